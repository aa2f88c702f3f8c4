package webhook_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// TestRelayThroughFaults: a core.Relay drains an in-memory outbox through the sink to an
// endpoint that, before the Handler, answers every fifth request slowly (past the sink's
// Timeout, then hands it to the Handler anyway: applied, but the answer is lost), 500 with
// Retry-After, 500 without, or closes the connection mid-request (hijack and close). Nothing
// is lost: every event is applied exactly once in the receiver's inbox, and per aggregate the
// applied (acknowledged) deliveries are in version order. Per-event and batch mode.
func TestRelayThroughFaults(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{0, 8} {
		t.Run(fmt.Sprintf("batch_size=%d", batch), func(t *testing.T) {
			t.Parallel()
			relayThroughFaults(t, batch)
		})
	}
}

func relayThroughFaults(t *testing.T, batchSize int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	secret := newSecret(t)

	// The receiver: the Handler on an in-memory inbox, recording applied versions per aggregate.
	recvStore, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](ctx, recvStore, nil)
	require.NoError(t, err)
	var (
		mu      sync.Mutex
		applied = map[string][]int64{}
	)
	rc, err := webhook.NewHandler(inbox, "faults", func(ctx context.Context, tx *memory.Tx, d *webhook.Delivery) error {
		if err := tx.Incr(d.Event.ID); err != nil {
			return err
		}
		mu.Lock()
		applied[d.Event.AggregateID] = append(applied[d.Event.AggregateID], d.Event.AggregateVersion)
		mu.Unlock()
		return nil
	}, &webhook.HandlerOptions{Secrets: []string{secret}, Entity: webhook.NoVersionGate, Logger: quiet()})
	require.NoError(t, err)
	var n atomic.Int64
	var faults [4]atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch k := n.Add(1) % 5; k {
		case 0: // slow: past the sink's Timeout, then applied anyway
			faults[0].Add(1)
			time.Sleep(400 * time.Millisecond)
			r = r.WithContext(context.WithoutCancel(r.Context()))
		case 1:
			faults[1].Add(1)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusInternalServerError)
			return
		case 2:
			faults[2].Add(1)
			http.Error(w, "oops", http.StatusInternalServerError)
			return
		case 3: // close the connection mid-request
			faults[3].Add(1)
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		rc.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	// The producer: an outbox of aggregates × versions.
	producer, err := memory.New(nil)
	require.NoError(t, err)
	outbox, err := core.NewOutbox[*memory.Tx](ctx, producer, nil)
	require.NoError(t, err)
	const aggregates, versions = 6, 15
	for v := 1; v <= versions; v++ {
		require.NoError(t, producer.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			var evs []core.Event
			for a := 0; a < aggregates; a++ {
				evs = append(evs, core.Event{AggregateType: "order", AggregateID: fmt.Sprint(a), AggregateVersion: int64(v),
					Type: "order.updated", Payload: []byte(fmt.Sprintf(`{"a":%d,"v":%d}`, a, v))})
			}
			_, err := outbox.Write(ctx, tx, evs...)
			return err
		}))
	}
	sink := newSink(t, webhook.Options{Secrets: []string{secret}, Timeout: 200 * time.Millisecond, BatchSize: batchSize})
	relay, err := core.NewRelay(producer, sink, core.StaticRouter{Default: srv.URL + "/hook"}, &core.RelayOptions{
		PollInterval: 20 * time.Millisecond,
		Retry:        core.RetryPolicy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		// Four requests in five fail here, so cycles that fail entirely are common and the
		// breaker opens; its default 30s cap made the per-event run outlast the deadline. The
		// subject is what the faults do to delivery, not the breaker's pace.
		BreakerMaxDelay: 100 * time.Millisecond,
		Logger:          quiet(),
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()

	total := aggregates * versions
	for {
		if int(rc.Stats().Applied) >= total || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // let the slow ones land
	stop()
	require.NoError(t, <-relayDone)

	mu.Lock()
	defer mu.Unlock()
	for a := 0; a < aggregates; a++ {
		got := applied[fmt.Sprint(a)]
		require.Len(t, got, versions, "aggregate %d: applied %v", a, got)
		for i, v := range got {
			require.Equal(t, int64(i+1), v, "aggregate %d applied out of order: %v", a, got)
		}
	}
	for i := range faults {
		require.NotZero(t, faults[i].Load(), "fault %d never injected", i)
	}
	st := rc.Stats()
	require.Equal(t, uint64(total), st.Applied)
	t.Logf("requests %d, faults %d/%d/%d/%d, stats %+v", n.Load(), faults[0].Load(), faults[1].Load(), faults[2].Load(), faults[3].Load(), st)
}
