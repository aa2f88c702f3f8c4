package core_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The relay applies the law: on a store whose every settle takes 10 ms, a relay that only waits
// for its database (a sink that answers at once, one loop) keeps it busy nearly all the time.
// By default, while producers write, it cuts its rate until it takes about 0.4 s of database
// time per second, pacing its loop, and still drains at least 3 times what they write; alone,
// or with FixedRate, it is never limited.
func TestRelayAdaptiveRate(t *testing.T) {
	for _, c := range []struct {
		name      string
		fixed     bool
		producers bool
		limited   bool
	}{{"default_with_producers", false, true, true}, {"default_alone", false, false, false}, {"fixed_with_producers", true, true, false}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
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
			write := func(n, from int) error {
				evs := make([]core.Event, n)
				for j := range evs {
					evs[j] = core.Event{AggregateType: "order", AggregateID: "1", Type: "t", Payload: []byte("p"), PartitionKey: fmt.Sprint((from + j) % 26)}
				}
				return store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { _, err := ob.Write(ctx, tx, evs...); return err })
			}
			for i := 0; i < 100000; i += 1000 {
				if err := write(1000, i); err != nil {
					t.Fatal(err)
				}
			}
			if c.producers { // 300 records a second
				go func() {
					for i := 0; ctx.Err() == nil; i++ {
						_ = write(30, i)
						time.Sleep(100 * time.Millisecond)
					}
				}()
			}
			reader := sdkmetric.NewManualReader()
			r, err := core.NewRelay(hooked, core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) }),
				core.StaticRouter{Default: "d"}, &core.RelayOptions{BatchSize: 100, InFlight: 1, FixedRate: c.fixed, PollInterval: time.Millisecond,
					MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			time.Sleep(3 * time.Second)
			st0, t0 := r.Stats(), time.Now()
			time.Sleep(3 * time.Second)
			st, el := r.Stats(), time.Since(t0)
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			occ := (st.SettleTime + st.FetchTime - st0.SettleTime - st0.FetchTime).Seconds() / el.Seconds()
			drained := float64(st.Published-st0.Published) / el.Seconds()
			t.Logf("%.2f s of database time per second, %.0f records/s, %d cuts, limit %.0f/s", occ, drained, st.RateCuts, st.RateLimit)
			if c.limited && (st.RateCuts == 0 || st.RateLimit == 0 || st.PaceTime == 0 || occ > 0.6 || drained < 3*300) {
				t.Fatalf("producers writing, a relay that only waits for its database: %.2f s of database time per second, %.0f records/s, %+v; want cuts, a limit, paced loops, at most 0.6 and at least 900 records/s", occ, drained, st)
			}
			if !c.limited && (st.RateCuts != 0 || st.RateLimit != 0 || st.PaceTime != 0 || occ < 0.7) {
				t.Fatalf("%s: %.2f s of database time per second, %+v; want no limit and at least 0.7", c.name, occ, st)
			}
			// The metrics say the same: outboxkit.relay.rate.cuts and outboxkit.relay.pace.wait.
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			var cuts int64
			var wait float64
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Sum[int64]:
						if m.Name == "outboxkit.relay.rate.cuts" {
							cuts = d.DataPoints[0].Value
						}
					case metricdata.Sum[float64]:
						if m.Name == "outboxkit.relay.pace.wait" {
							wait = d.DataPoints[0].Value
						}
					}
				}
			}
			if fin := r.Stats(); uint64(cuts) != fin.RateCuts || math.Abs(wait-fin.PaceTime.Seconds()) > 0.001 {
				t.Fatalf("metrics: %d cuts and %.3f s paced; RelayStats after the run: %d and %s", cuts, wait, fin.RateCuts, fin.PaceTime)
			}
		})
	}
}

// RateLimit before any cut: MaxRate by default with a MaxRate, 0 without a MaxRate, and 0
// with FixedRate whatever MaxRate is.
func TestRelayRateLimitBeforeACut(t *testing.T) {
	store, err := memory.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	for _, c := range []struct {
		fixed   bool
		maxRate int
		want    float64
	}{{false, 5000, 5000}, {false, 0, 0}, {true, 5000, 0}} {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "d"}, &core.RelayOptions{FixedRate: c.fixed, MaxRate: c.maxRate})
		if err != nil {
			t.Fatal(err)
		}
		if st := r.Stats(); st.RateLimit != c.want || st.RateCuts != 0 {
			t.Fatalf("FixedRate %v, MaxRate %d: RateLimit %v, RateCuts %d; want %v, 0", c.fixed, c.maxRate, st.RateLimit, st.RateCuts, c.want)
		}
	}
}
