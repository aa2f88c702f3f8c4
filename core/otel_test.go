package core_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
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
	allowed := map[attribute.Key]bool{"outboxkit.relay.kind": true, "outboxkit.outcome": true}
	seen := map[string]bool{}
	check := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			require.True(t, allowed[kv.Key], "unbounded attribute %s", kv.Key)
			require.False(t, ids[kv.Value.Emit()], "an event id as attribute value")
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
						require.Equal(t, int64(60), p.Value)
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
	for _, name := range []string{"outboxkit.relay.send.duration", "outboxkit.relay.batch.size", "outboxkit.relay.settled", "outboxkit.relay.publish.latency"} {
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
	var sum int64
	var latencies uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
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
	require.Equal(t, uint64(30), latencies, "one commit-to-publish latency per acknowledged record")
}

// The inbox counts outcomes per consumer, a digest conflict included; no event id is an
// attribute.
func TestInboxMetrics(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	reader := sdkmetric.NewManualReader()
	in, err := core.NewInbox[*memory.Tx](store, &core.InboxOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	require.NoError(t, err)
	ctx := context.Background()
	apply := func(ctx context.Context, tx *memory.Tx, _ core.InboxMessage) error { return tx.Incr("n") }
	for _, payload := range []string{"a", "a", "b"} { // applied, duplicate, digest conflict
		_, _ = in.Process(ctx, "billing", core.InboxMessage{EventID: "ev-1", Payload: []byte(payload)}, apply)
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "outboxkit.inbox.messages" {
				for _, p := range s.DataPoints {
					for _, kv := range p.Attributes.ToSlice() {
						require.Contains(t, []attribute.Key{"outboxkit.consumer", "outboxkit.outcome"}, kv.Key)
						require.NotEqual(t, "ev-1", kv.Value.Emit())
					}
					o, _ := p.Attributes.Value("outboxkit.outcome")
					got[o.AsString()] += p.Value
				}
			}
		}
	}
	require.Equal(t, map[string]int64{"applied": 1, "duplicate": 1, "digest_conflict": 1}, got)
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
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "outboxkit.cleanup.deleted" {
				require.Len(t, s.DataPoints, 1)
				require.Zero(t, s.DataPoints[0].Attributes.Len(), "no attribute")
				got = s.DataPoints[0].Value
			}
		}
	}
	require.Equal(t, int64(25), got)
}
