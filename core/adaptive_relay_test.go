package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The relay applies the law: on a store whose every settle takes 10 ms, a relay that only waits
// for its database (a sink that answers at once, one loop) keeps it busy nearly all the time;
// with AdaptiveRate it cuts its rate until it takes about 0.4 s of database time per second,
// pacing its loop; without, it is never limited.
func TestRelayAdaptiveRate(t *testing.T) {
	for _, adaptive := range []bool{true, false} {
		ctx, cancel := context.WithCancel(t.Context())
		store, err := memory.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		hooked := &hookedSettle{Store: store, before: func(context.Context, driver.SettleParams) error {
			time.Sleep(10 * time.Millisecond)
			return nil
		}}
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 60000; i += 1000 {
			evs := make([]core.Event, 1000)
			for j := range evs {
				evs[j] = core.Event{AggregateType: "order", AggregateID: "1", Type: "t", Payload: []byte("p"), PartitionKey: string(rune('a' + (i+j)%26))}
			}
			if err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { _, err := ob.Write(ctx, tx, evs...); return err }); err != nil {
				t.Fatal(err)
			}
		}
		r, err := core.NewRelay(hooked, core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) }),
			core.StaticRouter{Default: "d"}, &core.RelayOptions{BatchSize: 100, InFlight: 1, AdaptiveRate: adaptive, PollInterval: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		time.Sleep(2 * time.Second)
		st0, t0 := r.Stats(), time.Now()
		time.Sleep(3 * time.Second)
		st, el := r.Stats(), time.Since(t0)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		occ := (st.SettleTime + st.FetchTime - st0.SettleTime - st0.FetchTime).Seconds() / el.Seconds()
		if adaptive && (st.RateCuts == 0 || st.RateLimit == 0 || st.PaceTime == 0 || occ > 0.6) {
			t.Fatalf("AdaptiveRate, a relay that only waits for its database: %.2f s of database time per second, %+v; want cuts, a limit, paced loops and at most 0.6", occ, st)
		}
		if !adaptive && (st.RateCuts != 0 || st.RateLimit != 0 || st.PaceTime != 0 || occ < 0.7) {
			t.Fatalf("without AdaptiveRate: %.2f s of database time per second, %+v; want no limit and at least 0.7", occ, st)
		}
		t.Logf("adaptive=%v: %.2f s of database time per second, %d cuts, limit %.0f/s", adaptive, occ, st.RateCuts, st.RateLimit)
	}
}

// RateLimit before any cut: MaxRate with AdaptiveRate and a MaxRate, 0 without a MaxRate, and
// 0 without AdaptiveRate whatever MaxRate is.
func TestRelayRateLimitBeforeACut(t *testing.T) {
	store, err := memory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	for _, c := range []struct {
		adaptive bool
		maxRate  int
		want     float64
	}{{true, 5000, 5000}, {true, 0, 0}, {false, 5000, 0}} {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "d"}, &core.RelayOptions{AdaptiveRate: c.adaptive, MaxRate: c.maxRate})
		if err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.RateLimit != c.want || st.RateCuts != 0 {
			t.Fatalf("AdaptiveRate %v, MaxRate %d: RateLimit %v, RateCuts %d; want %v, 0", c.adaptive, c.maxRate, st.RateLimit, st.RateCuts, c.want)
		}
	}
}
