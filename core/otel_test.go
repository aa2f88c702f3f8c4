package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testhook"
)

// The relay's metrics carry bounded attributes only: never an event id or a partition key.
func TestRelayMetricsHaveBoundedAttributes(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 60, 0)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r, err := core.NewRelay(b.store, b.sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		PollInterval: 5 * time.Millisecond, BatchSize: 10, MeterProvider: mp, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Published == 60 }, "all published")
	cancel()
	require.NoError(t, <-done)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	ids := map[string]bool{}
	for id := range b.sink.sent {
		ids[id] = true
	}
	allowed := map[attribute.Key]bool{"outboxkit.relay.kind": true, "outboxkit.outcome": true, "error.type": true}
	seen := map[string]bool{}
	check := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			require.True(t, allowed[kv.Key], "unbounded attribute %s", kv.Key)
			require.False(t, ids[kv.Value.String()], "an event id as attribute value")
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			seen[m.Name] = true
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
					if m.Name == "outboxkit.relay.settled" {
						o, _ := p.Attributes.Value("outboxkit.outcome")
						require.Equal(t, map[bool]int64{true: 60, false: 0}[o.AsString() == "published"], p.Value, o.AsString())
					}
					if m.Name == "outboxkit.relay.send.errors" {
						require.Zero(t, p.Value, "exported at 0 before any error")
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
					if m.Name == "outboxkit.relay.publish.latency" {
						require.Equal(t, uint64(60), p.Count, "one latency per acknowledged record")
						require.Positive(t, p.Sum)
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
					require.Equal(t, int64(60), p.Sum)
				}
			}
		}
	}
	for _, name := range []string{"outboxkit.relay.send.duration", "outboxkit.relay.fetch.duration", "outboxkit.relay.settle.duration",
		"outboxkit.relay.batch.size", "outboxkit.relay.settled",
		"outboxkit.relay.publish.latency", "outboxkit.relay.send.errors", "outboxkit.relay.lane.moves",
		"outboxkit.relay.lease.expiries", "outboxkit.relay.resent", "outboxkit.relay.rate.cuts", "outboxkit.relay.pace.wait"} {
		require.True(t, seen[name], name)
	}
}

// A CDC relay records the same per-send instruments, with outboxkit.relay.kind = cdc.
func TestCDCRelayMetrics(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 30, 0)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	r, err := core.NewCDCRelay(b.store, b.store.ChangeSource(), b.sink, core.StaticRouter{Default: "x"}, &core.CDCOptions{
		BatchSize: 10, MeterProvider: mp, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Published == 30 }, "all published")
	cancel()
	require.NoError(t, <-done)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var sum, settled int64
	var latencies uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "outboxkit.relay.settled" {
				for _, p := range d.DataPoints {
					if o, _ := p.Attributes.Value("outboxkit.outcome"); o.AsString() == "published" {
						settled += p.Value
					}
				}
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "outboxkit.relay.publish.latency" {
				for _, p := range h.DataPoints {
					latencies += p.Count
				}
			}
			if h, ok := m.Data.(metricdata.Histogram[int64]); ok && m.Name == "outboxkit.relay.batch.size" {
				for _, p := range h.DataPoints {
					kind, _ := p.Attributes.Value("outboxkit.relay.kind")
					require.Equal(t, "cdc", kind.AsString())
					sum += p.Sum
				}
			}
		}
	}
	require.Equal(t, int64(30), sum)
	require.Equal(t, int64(30), settled, "settled published, as the polling relay counts it")
	require.Equal(t, uint64(30), latencies, "one commit-to-publish latency per acknowledged record")
}

// The inbox counts outcomes per consumer (applied, duplicate, digest conflict, stale, beyond
// retention), exports the retention horizon and the records pruned; no event id is an
// attribute.
func TestInboxMetrics(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	in, err := core.NewInbox[*memory.Tx](t.Context(), store, &core.InboxOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	ctx := context.Background()
	apply := func(ctx context.Context, tx *memory.Tx, _ core.InboxMessage) error { return tx.Incr("n") }
	old := time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Microsecond)
	for _, m := range []core.InboxMessage{
		{EventID: "ev-1", Payload: []byte("a"), OccurredAt: old},                             // applied
		{EventID: "ev-1", Payload: []byte("a"), OccurredAt: old},                             // duplicate
		{EventID: "ev-1", Payload: []byte("b"), OccurredAt: old},                             // digest conflict
		{EventID: "ev-2", Payload: []byte("a"), OccurredAt: old, Entity: "acct", Version: 2}, // applied
		{EventID: "ev-3", Payload: []byte("a"), OccurredAt: old, Entity: "acct", Version: 1}, // stale
	} {
		_, _ = in.Process(ctx, "billing", m, apply)
	}
	horizon := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	n, err := in.Prune(ctx, "billing", horizon, 0)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	_, err = in.Process(ctx, "billing", core.InboxMessage{EventID: "ev-4", Payload: []byte("a"), OccurredAt: old}, apply)
	require.ErrorIs(t, err, core.ErrBeyondRetention)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	var pruned int64
	var horizonSeen []float64
	check := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			require.Contains(t, []attribute.Key{"outboxkit.consumer", "outboxkit.outcome"}, kv.Key)
			require.NotContains(t, []string{"ev-1", "ev-2", "ev-3", "ev-4", "acct"}, kv.Value.String())
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
					switch m.Name {
					case "outboxkit.inbox.messages":
						o, _ := p.Attributes.Value("outboxkit.outcome")
						got[o.AsString()] += p.Value
					case "outboxkit.inbox.pruned":
						pruned += p.Value
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
					if m.Name == "outboxkit.inbox.retention.horizon" {
						horizonSeen = append(horizonSeen, p.Value)
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					check(p.Attributes)
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"applied": 2, "duplicate": 1, "digest_conflict": 1, "stale": 1, "beyond_retention": 1}, got)
	require.Equal(t, int64(3), pruned)
	require.Equal(t, []float64{float64(horizon.UnixMicro()) / 1e6}, horizonSeen)
}

// ProcessBatch counts each message of a committed batch by its outcome and records one
// duration per transaction; a batch that fails counts only the message that failed it (the
// others were rolled back unprocessed).
func TestInboxBatchMetrics(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	in, err := core.NewInbox[*memory.Tx](t.Context(), store, &core.InboxOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	ctx := context.Background()
	apply := func(ctx context.Context, tx *memory.Tx, _ int, _ core.InboxMessage) error { return tx.Incr("n") }
	m := func(id, payload string) core.InboxMessage {
		return core.InboxMessage{EventID: id, Payload: []byte(payload)}
	}
	_, err = in.ProcessBatch(ctx, "billing", []core.InboxMessage{m("ev-1", "a"), m("ev-2", "a"), m("ev-1", "a")}, apply)
	require.NoError(t, err)
	_, err = in.ProcessBatch(ctx, "billing", []core.InboxMessage{m("ev-3", "a"), m("ev-1", "b")}, apply)
	var be *core.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 1, be.Index)
	require.ErrorIs(t, err, core.ErrDigestMismatch)
	require.Equal(t, 2, store.Counter("n"), "the failed batch rolled back")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	var transactions uint64
	for _, sm := range rm.ScopeMetrics {
		for _, met := range sm.Metrics {
			switch d := met.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if met.Name == "outboxkit.inbox.messages" {
						o, _ := p.Attributes.Value("outboxkit.outcome")
						got[o.AsString()] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if met.Name == "outboxkit.inbox.process.duration" {
						transactions += p.Count
					}
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"applied": 2, "duplicate": 1, "digest_conflict": 1}, got)
	require.Equal(t, uint64(2), transactions)
}

// CleanupOutbox counts the rows it deleted on its MeterProvider, with no attribute.
func TestCleanupMetrics(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 25, 0)
	r := b.relay(t, "cleanup")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Published == 25 }, "all published")
	cancel()
	require.NoError(t, <-done)

	reader := sdkmetric.NewManualReader()
	opts := &core.CleanupOptions{Retention: time.Hour, BatchSize: 10, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))}
	testhook.SetClock(opts, func() time.Time { return time.Now().Add(2 * time.Hour) })
	n, err := core.CleanupOutbox(context.Background(), b.store, opts)
	require.NoError(t, err)
	require.Equal(t, 25, n)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var got int64 = -1
	watermark := 0.0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "outboxkit.cleanup.deleted" {
				require.Len(t, s.DataPoints, 1)
				require.Zero(t, s.DataPoints[0].Attributes.Len(), "no attribute")
				got = s.DataPoints[0].Value
			}
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == "outboxkit.cleanup.watermark" {
				require.Len(t, g.DataPoints, 1)
				require.Zero(t, g.DataPoints[0].Attributes.Len(), "no attribute")
				watermark = g.DataPoints[0].Value
			}
		}
	}
	require.Equal(t, int64(25), got)
	// The cutoff is the (test) clock minus the retention: about now + 1h, as a Unix time.
	require.InDelta(t, float64(time.Now().Add(time.Hour).Unix()), watermark, 60)
}

// A relay counts the lanes it claims (lane moves), those it took over from an expired lease, and
// the acknowledged records whose mark a lost lease refused (sent again by the new owner), in
// Stats and in its instruments.
func TestRelayCountsLaneMovesExpiriesAndResends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupStop(t, 30, 1)
	base := time.Now().UTC().Truncate(time.Microsecond)
	// A crashed worker's leases: they expire at base+1s and are never released.
	ghost, err := b.store.ClaimLanes(ctx, driver.ClaimParams{Owner: "ghost", Max: 4, TTL: time.Second, Now: base})
	require.NoError(t, err)
	require.Len(t, ghost, 4)

	reader := sdkmetric.NewManualReader()
	opts := &core.RelayOptions{Owner: "relay", PollInterval: 5 * time.Millisecond, BatchSize: 10, InFlight: 1,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Logger: slog.New(slog.DiscardHandler)}
	testhook.SetClock(opts, func() time.Time { return base.Add(2 * time.Second) })
	r, err := core.NewRelay(b.store, b.sink, core.StaticRouter{Default: "x"}, opts)
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	<-b.sink.entered // the first batch is in flight
	st := r.Stats()
	require.Equal(t, uint64(4), st.LaneMoves)
	require.Equal(t, uint64(4), st.LeaseExpiries, "every lane was taken over from the ghost's expired lease")

	// Meanwhile the relay's leases expire and another worker takes its lanes over.
	pub, err := b.store.Generation(ctx)
	require.NoError(t, err)
	thief, err := b.store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "thief", Max: 4,
		TTL: time.Hour, Now: base.Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, thief, 4)
	b.sink.release()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().ClaimLost > 0 }, "the settle is refused")
	cancel()
	require.NoError(t, <-done)
	st = r.Stats()
	require.Equal(t, uint64(10), st.Resent, "the whole acknowledged batch is resent by the new owner")
	require.Zero(t, st.Published)
	require.Equal(t, uint64(4), st.LaneMoves, "no lane could be claimed back from the thief")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					got[m.Name] += p.Value
				}
			}
		}
	}
	require.Equal(t, int64(4), got["outboxkit.relay.lane.moves"])
	require.Equal(t, int64(4), got["outboxkit.relay.lease.expiries"])
	require.Equal(t, int64(10), got["outboxkit.relay.resent"])
}

// failingSink rejects every message of aggregate "0" for good and times out the first attempt
// of each message of aggregate "1".
type failingSink struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (s *failingSink) Send(_ context.Context, msgs []core.Message) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]error, len(msgs))
	for i, m := range msgs {
		switch {
		case m.Record.AggregateID == "0":
			out[i] = core.Permanent(errors.New("rejected by the broker"))
		case m.Record.AggregateID == "1" && !s.seen[m.Record.ID]:
			s.seen[m.Record.ID] = true
			out[i] = fmt.Errorf("send: %w", context.DeadlineExceeded)
		}
	}
	return out
}

// outboxkit.relay.send.errors counts each record a send did not deliver by error.type, and
// outboxkit.relay.settled the retries and parks that follow.
func TestRelayCountsSendErrorsByType(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 14, 0) // 2 events per aggregate "0".."6"
	reader := sdkmetric.NewManualReader()
	r, err := core.NewRelay(b.store, &failingSink{seen: map[string]bool{}}, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		PollInterval: 5 * time.Millisecond, BatchSize: 20, Retry: core.RetryPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// Aggregate "0" is parked (its second event waits behind it); "1" is retried and published.
	waitFor(t, 30*time.Second, func() bool { st := r.Stats(); return st.Published == 12 && st.Parked == 1 }, "published and parked")
	cancel()
	require.NoError(t, <-done)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	errs, settled := map[string]int64{}, map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				continue
			}
			for _, p := range d.DataPoints {
				switch m.Name {
				case "outboxkit.relay.send.errors":
					v, _ := p.Attributes.Value("error.type")
					errs[v.AsString()] += p.Value
				case "outboxkit.relay.settled":
					v, _ := p.Attributes.Value("outboxkit.outcome")
					settled[v.AsString()] += p.Value
				}
			}
		}
	}
	require.Equal(t, int64(2), errs["timeout"], "each event of aggregate 1 timed out once")
	require.Contains(t, []int64{1, 2}, errs["rejected"], "the first event of aggregate 0, and the second when it was in the same send")
	require.Zero(t, errs["not_acknowledged"])
	require.Zero(t, errs["_OTHER"])
	require.Len(t, errs, 4, "every error.type is exported")
	// A failure holds back the rest of its key's batch: one or two retries were recorded.
	st := r.Stats()
	require.Equal(t, map[string]int64{"published": 12, "failed": int64(st.Failures - st.Parked), "parked": 1}, settled)
	require.Positive(t, settled["failed"])
}
