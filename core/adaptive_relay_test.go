package core_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The relay applies the law: on a store whose settles become slow the relay cuts its rate and
// sends fewer records per second than before; the same relay without AdaptiveRate does not.
func TestRelayAdaptiveRate(t *testing.T) {
	for _, adaptive := range []bool{true, false} {
		ctx, cancel := context.WithCancel(t.Context())
		store, err := memory.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		var slow atomic.Bool
		hooked := &hookedSettle{Store: store, before: func(_ context.Context, p driver.SettleParams) error {
			if slow.Load() && len(p.Published) >= 100 {
				time.Sleep(20 * time.Millisecond)
			} else {
				time.Sleep(2 * time.Millisecond)
			}
			return nil
		}}
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
		if err != nil {
			t.Fatal(err)
		}
		const n = 60000
		for i := 0; i < n; i += 1000 {
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
		time.Sleep(1500 * time.Millisecond) // the baseline: fast settles
		slow.Store(true)
		time.Sleep(4 * time.Second)
		st := r.Stats()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if adaptive && (st.RateCuts == 0 || st.RateLimit == 0 || st.PaceTime == 0) {
			t.Fatalf("AdaptiveRate with settles 10x slower: %+v; want cuts, a limit and paced loops", st)
		}
		if !adaptive && (st.RateCuts != 0 || st.RateLimit != 0 || st.PaceTime != 0) {
			t.Fatalf("without AdaptiveRate: %+v; want no limit", st)
		}
	}
}
