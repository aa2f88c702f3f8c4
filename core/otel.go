package core

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// instrumentationName names the tracer of core's spans.
const instrumentationName = "github.com/outboxkit/outbox/core"

func propagatorOr(p propagation.TextMapPropagator) propagation.TextMapPropagator {
	if p != nil {
		return p
	}
	return otel.GetTextMapPropagator()
}

// WithTraceContext returns headers with the trace context of ctx added through prop (nil: the
// global propagator, otel.GetTextMapPropagator): with the W3C propagator, "traceparent" and
// "tracestate". Keys the headers already have are kept as they are. When ctx carries no valid
// span, or the propagator writes nothing, headers is returned unchanged (not copied); otherwise
// a copy is returned and headers is not modified.
func WithTraceContext(ctx context.Context, prop propagation.TextMapPropagator, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	carrier := propagation.MapCarrier{}
	propagatorOr(prop).Inject(ctx, carrier)
	if len(carrier) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(carrier))
	for k, v := range carrier {
		out[k] = v
	}
	for k, v := range headers {
		out[k] = v
	}
	return out
}

// TraceContext returns ctx carrying the remote span context stored in headers by
// WithTraceContext (through prop; nil: the global propagator). A consumer starts its processing
// span from it, as a child of the producer's span.
func TraceContext(ctx context.Context, prop propagation.TextMapPropagator, headers map[string]string) context.Context {
	if len(headers) == 0 {
		return ctx
	}
	return propagatorOr(prop).Extract(ctx, propagation.MapCarrier(headers))
}

// publishSpan starts the relay's span of one batch (kind producer), linked to the producers'
// spans found in the records' headers. It returns ctx unchanged and a non-recording span when
// tracing is off.
func publishSpan(ctx context.Context, tp trace.TracerProvider, prop propagation.TextMapPropagator, system string, recs []Record) (context.Context, trace.Span) {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx, span := tp.Tracer(instrumentationName).Start(ctx, "publish outbox", trace.WithSpanKind(trace.SpanKindProducer))
	if !span.IsRecording() {
		return ctx, span
	}
	span.SetAttributes(
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.system", system),
		attribute.Int("messaging.batch.message_count", len(recs)),
	)
	prop = propagatorOr(prop)
	for i := range recs {
		if len(recs[i].Headers) == 0 {
			continue
		}
		sc := trace.SpanContextFromContext(prop.Extract(context.Background(), propagation.MapCarrier(recs[i].Headers)))
		if sc.IsValid() {
			span.AddLink(trace.Link{SpanContext: sc})
		}
	}
	return ctx, span
}

// endPublishSpan records the outcome of a batch on its span and ends it.
func endPublishSpan(span trace.Span, outcome []error) {
	if span.IsRecording() {
		failed := 0
		for _, err := range outcome {
			if err != nil {
				failed++
			}
		}
		span.SetAttributes(attribute.Int("outboxkit.failed_count", failed))
		if failed > 0 {
			span.SetStatus(codes.Error, "some messages were not acknowledged")
		}
	}
	span.End()
}
