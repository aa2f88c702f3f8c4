package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// An endpoint that answers 429 with Retry-After: 1 gets the event again no sooner than a second
// later, although the relay's own backoff is 10 ms: the sink's outcome carries the header
// (core.RetryAfter) and the relay honours it.
func TestRelayHonoursRetryAfterHeader(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		seen = append(seen, time.Now())
		first := len(seen) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	require.NoError(t, store.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "1", Type: "order.placed", Payload: []byte(`{}`)})
		return err
	}))
	relay, err := core.NewRelay(store, newSink(t, webhook.Options{Secrets: []string{newSecret(t)}}),
		core.StaticRouter{Default: srv.URL}, &core.RelayOptions{
			PollInterval: 10 * time.Millisecond, Logger: quiet(),
			Retry: core.RetryPolicy{Initial: 10 * time.Millisecond, Max: time.Minute, Jitter: -1},
		})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 2 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 2, "one refusal, then the delivery")
	require.GreaterOrEqual(t, seen[1].Sub(seen[0]), time.Second, "the retry waited for Retry-After")
}
