package sqs_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// One trace runs from the producer's transaction to the consumer's handler: Outbox.Write stores
// the producer span's context in the event, the relay's publish span links to it, and the
// consumer's process span (in which the handler runs) is its child.
func TestTraceFromProducerToHandler(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("trace"), nil)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	prop := propagation.TraceContext{}
	ctx := context.Background()

	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), &core.OutboxOptions{Propagator: prop})
	require.NoError(t, err)
	pctx, producer := tp.Tracer("test").Start(ctx, "producer tx")
	headers := map[string]string{"k": "v"}
	require.NoError(t, store.InTx(pctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "1", Type: "order.created", Headers: headers})
		return err
	}))
	producer.End()
	require.Equal(t, map[string]string{"k": "v"}, headers, "the caller's headers are not modified")

	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: url}, &core.RelayOptions{
		PollInterval: 10 * time.Millisecond, TracerProvider: tp, Propagator: prop, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	defer func() { stop(); require.NoError(t, <-done) }()

	var mu sync.Mutex
	var handlerSpan trace.SpanContext
	reader := sdkmetric.NewManualReader()
	b := startConsumer(t, e, url, &sqs.ConsumerOptions{TracerProvider: tp, Propagator: prop,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
		func(ctx context.Context, _ *memory.Tx, d *sqs.Delivery) error {
			mu.Lock()
			handlerSpan = trace.SpanContextFromContext(ctx)
			mu.Unlock()
			require.NotEmpty(t, d.Event.Headers["traceparent"])
			return nil
		})
	require.Eventually(t, func() bool { return len(b.deliveries()) == 1 }, 30*time.Second, 10*time.Millisecond)

	want := producer.SpanContext()
	mu.Lock()
	require.Equal(t, want.TraceID(), handlerSpan.TraceID(), "the handler runs in the producer's trace")
	mu.Unlock()
	var publish, process tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exp.GetSpans() {
			switch {
			case s.Name == "publish outbox":
				publish = s
			case s.SpanKind == trace.SpanKindConsumer:
				process = s
			}
		}
		return publish.Name != "" && process.Name != ""
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, want.TraceID(), process.SpanContext.TraceID())
	require.Equal(t, want.SpanID(), process.Parent.SpanID(), "the consumer's span is the producer span's child")
	require.Equal(t, handlerSpan.SpanID(), process.SpanContext.SpanID(), "the handler runs in the process span")
	require.Len(t, publish.Links, 1)
	require.Equal(t, want.SpanID(), publish.Links[0].SpanContext.SpanID(), "the publish span links to the producer")
	require.Equal(t, trace.SpanKindProducer, publish.SpanKind)

	// The consumer's metrics count the message by outcome, with bounded attributes.
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "outboxkit.consumer.messages" {
				for _, p := range sum.DataPoints {
					require.Equal(t, 3, p.Attributes.Len(), "messaging.system, messaging.destination.name, outboxkit.outcome")
					o, _ := p.Attributes.Value("outboxkit.outcome")
					got[o.AsString()] += p.Value
				}
			}
		}
	}
	require.Equal(t, int64(1), got["received"])
	require.Equal(t, int64(1), got["applied"])
}
