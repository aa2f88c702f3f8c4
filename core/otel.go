package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
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
func publishSpan(ctx context.Context, tp trace.TracerProvider, prop propagation.TextMapPropagator, system string, recs []driver.Record) (context.Context, trace.Span) {
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

// relayInstruments are a relay's synchronous instruments (recorded once per batch, never per
// record, so that metrics cost nothing measurable on the drain path).
type relayInstruments struct {
	sendDuration              metric.Float64Histogram
	fetchDuration             metric.Float64Histogram
	settleDuration            metric.Float64Histogram
	publishLatency            metric.Float64Histogram
	batchSize                 metric.Int64Histogram
	settledCount              metric.Int64Counter
	laneMoves, leaseExpiries  metric.Int64Counter
	resent                    metric.Int64Counter
	sendErrors                metric.Int64Counter
	streamRestarts            metric.Int64Counter   // CDC relays only
	rateCuts                  metric.Int64Counter   // polling relays only
	paceWait                  metric.Float64Counter // polling relays only
	kind                      metric.MeasurementOption
	published, failed, parked metric.MeasurementOption
	errorTypes                map[string]metric.MeasurementOption // by error.type, built once
	restartCauses             map[string]metric.MeasurementOption // by outboxkit.cause, built once
}

// The error.type values of outboxkit.relay.send.errors (OpenTelemetry's error.type attribute;
// "_OTHER" is its name for an error of no known class).
const (
	errTypeTimeout  = "timeout"          // the send's context ended, or a network timeout
	errTypeRejected = "rejected"         // a permanent error (IsPermanent): parked at once
	errTypeNotAcked = "not_acknowledged" // ErrNotAcknowledged: no answer, or behind a failed key
	errTypeOther    = "_OTHER"           // any other retryable error
)

// errorType classifies a record's failed outcome for outboxkit.relay.send.errors.
func errorType(err error) string {
	var ne net.Error
	switch {
	case IsPermanent(err):
		return errTypeRejected
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errTypeTimeout
	case errors.Is(err, ErrNotAcknowledged):
		return errTypeNotAcked
	}
	return errTypeOther
}

func newRelayInstruments(mp metric.MeterProvider, kind string) (*relayInstruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	i := &relayInstruments{kind: metric.WithAttributes(attribute.String("outboxkit.relay.kind", kind))}
	var err, e error
	i.sendDuration, err = m.Float64Histogram("outboxkit.relay.send.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one Sink.Send call (one batch)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	i.fetchDuration, e = m.Float64Histogram("outboxkit.relay.fetch.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one Store.Fetch call that returned records (one batch; polling relay)."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	i.settleDuration, e = m.Float64Histogram("outboxkit.relay.settle.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one Store.Settle call: the fenced marks of one batch's records."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	i.batchSize, e = m.Int64Histogram("outboxkit.relay.batch.size", metric.WithUnit("{event}"),
		metric.WithDescription("Records sent in one Sink.Send call."),
		metric.WithExplicitBucketBoundaries(1, 10, 50, 100, 250, 500, 1000, 5000))
	err = errors.Join(err, e)
	i.publishLatency, e = m.Float64Histogram("outboxkit.relay.publish.latency", metric.WithUnit("s"),
		metric.WithDescription("Commit-to-publish latency: an acknowledged record's CreatedAt (database clock) to the sink's acknowledgement (the relay's clock)."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600))
	err = errors.Join(err, e)
	i.settledCount, e = m.Int64Counter("outboxkit.relay.settled", metric.WithUnit("{event}"),
		metric.WithDescription("Records settled: published, failed (retried later) or parked."))
	err = errors.Join(err, e)
	i.laneMoves, e = m.Int64Counter("outboxkit.relay.lane.moves", metric.WithUnit("{lane}"),
		metric.WithDescription("Lanes this relay claimed: each claim moves a lane to a new lease (at start, when rebalancing, or after a lease expired)."))
	err = errors.Join(err, e)
	i.leaseExpiries, e = m.Int64Counter("outboxkit.relay.lease.expiries", metric.WithUnit("{lane}"),
		metric.WithDescription("Lanes this relay took over from a lease that expired instead of being released (its holder crashed, stalled or lost the database)."))
	err = errors.Join(err, e)
	i.resent, e = m.Int64Counter("outboxkit.relay.resent", metric.WithUnit("{event}"),
		metric.WithDescription("Records the sink acknowledged whose mark was refused because their lane's lease was lost: the lane's new owner sends them again."))
	err = errors.Join(err, e)
	i.sendErrors, e = m.Int64Counter("outboxkit.relay.send.errors", metric.WithUnit("{event}"),
		metric.WithDescription("Records a send did not deliver, by error.type: timeout, rejected (permanent: parked), not_acknowledged, _OTHER (retryable)."))
	err = errors.Join(err, e)
	i.streamRestarts, e = m.Int64Counter("outboxkit.relay.cdc.stream.restarts", metric.WithUnit("{stream}"),
		metric.WithDescription("Change streams a CDC relay replaced after they failed, by outboxkit.cause: stalled (nothing received within the source's liveness bound), broken (the log connection failed or could not be opened), database (a mark or checkpoint failed). Each resumed from the checkpoint."))
	err = errors.Join(err, e)
	i.rateCuts, e = m.Int64Counter("outboxkit.relay.rate.cuts", metric.WithUnit("{cut}"),
		metric.WithDescription("Times the adaptive drain cut a polling relay's rate: it took more than its share of the database's time while producers wrote (RelayOptions.FixedRate)."))
	err = errors.Join(err, e)
	i.paceWait, e = m.Float64Counter("outboxkit.relay.pace.wait", metric.WithUnit("s"),
		metric.WithDescription("Time a polling relay's loops waited before a send for its rate budget (RelayOptions.MaxRate or the adaptive drain), summed over its loops."))
	err = errors.Join(err, e)
	if err != nil {
		return nil, fmt.Errorf("outbox: relay instruments: %w", err)
	}
	outcome := func(o string) metric.MeasurementOption {
		return metric.WithAttributes(attribute.String("outboxkit.relay.kind", kind), attribute.String("outboxkit.outcome", o))
	}
	i.published, i.failed, i.parked = outcome("published"), outcome("failed"), outcome("parked")
	i.errorTypes = map[string]metric.MeasurementOption{}
	for _, t := range []string{errTypeTimeout, errTypeRejected, errTypeNotAcked, errTypeOther} {
		i.errorTypes[t] = metric.WithAttributes(attribute.String("outboxkit.relay.kind", kind), attribute.String("error.type", t))
	}
	// Rare events: start the counters at 0 so that every series is exported (and alertable)
	// at once.
	ctx := context.Background()
	i.laneMoves.Add(ctx, 0, i.kind)
	i.leaseExpiries.Add(ctx, 0, i.kind)
	i.resent.Add(ctx, 0, i.kind)
	for _, o := range []metric.MeasurementOption{i.published, i.failed, i.parked} {
		i.settledCount.Add(ctx, 0, o)
	}
	for _, o := range i.errorTypes {
		i.sendErrors.Add(ctx, 0, o)
	}
	if kind == "cdc" {
		i.restartCauses = map[string]metric.MeasurementOption{}
		for _, c := range []string{restartStalled, restartBroken, restartDatabase} {
			i.restartCauses[c] = metric.WithAttributes(attribute.String("outboxkit.relay.kind", kind), attribute.String("outboxkit.cause", c))
			i.streamRestarts.Add(ctx, 0, i.restartCauses[c])
		}
	}
	if kind == "polling" {
		i.rateCuts.Add(ctx, 0, i.kind)
		i.paceWait.Add(ctx, 0, i.kind)
	}
	return i, nil
}

// streamRestarted counts a CDC relay's change stream replaced after it failed, by cause.
func (i *relayInstruments) streamRestarted(ctx context.Context, cause string) {
	i.streamRestarts.Add(ctx, 1, i.restartCauses[cause])
}

// rateCut counts a cut of the adaptive drain.
func (i *relayInstruments) rateCut(ctx context.Context) {
	i.rateCuts.Add(ctx, 1, i.kind)
}

// paced records d that a loop waited for the rate budget.
func (i *relayInstruments) paced(ctx context.Context, d time.Duration) {
	i.paceWait.Add(ctx, d.Seconds(), i.kind)
}

// durationBuckets are the bucket boundaries (s) of the relay's fetch, send and settle durations.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// fetched records the duration of a fetch that returned records.
func (i *relayInstruments) fetched(ctx context.Context, d time.Duration) {
	i.fetchDuration.Record(ctx, d.Seconds(), i.kind)
}

// settledIn records the duration of one Store.Settle call.
func (i *relayInstruments) settledIn(ctx context.Context, d time.Duration) {
	i.settleDuration.Record(ctx, d.Seconds(), i.kind)
}

func (i *relayInstruments) sent(ctx context.Context, d time.Duration, n int) {
	i.sendDuration.Record(ctx, d.Seconds(), i.kind)
	i.batchSize.Record(ctx, int64(n), i.kind)
}

// acked records the commit-to-publish latency of each record the sink acknowledged at ack, and
// counts each record it did not by error type (the only per-record measurements; a no-op
// provider makes them free).
func (i *relayInstruments) acked(ctx context.Context, ack time.Time, recs []driver.Record, outcome []error) {
	latency := i.publishLatency.Enabled(ctx)
	for k := range recs {
		switch {
		case outcome[k] != nil:
			i.sendErrors.Add(ctx, 1, i.errorTypes[errorType(outcome[k])])
		case latency && !recs[k].CreatedAt.IsZero():
			i.publishLatency.Record(ctx, max(ack.Sub(recs[k].CreatedAt).Seconds(), 0), i.kind)
		}
	}
}

// laneCounters count a relay's lane claims, takeovers and resends (RelayStats).
type laneCounters struct {
	claimed, expired, resent atomic.Uint64
}

// claimed records the leases ClaimLanes returned and returns how many were taken over.
func (i *relayInstruments) claimed(ctx context.Context, leases []driver.Lease) (takenOver int) {
	for _, l := range leases {
		if l.TakenOver {
			takenOver++
		}
	}
	if len(leases) > 0 {
		i.laneMoves.Add(ctx, int64(len(leases)), i.kind)
	}
	if takenOver > 0 {
		i.leaseExpiries.Add(ctx, int64(takenOver), i.kind)
	}
	return takenOver
}

// lost records n acknowledged records whose settle a lost lease refused.
func (i *relayInstruments) lost(ctx context.Context, n int) {
	if n > 0 {
		i.resent.Add(ctx, int64(n), i.kind)
	}
}

func (i *relayInstruments) settled(ctx context.Context, p driver.SettleParams) {
	if len(p.Published) > 0 {
		i.settledCount.Add(ctx, int64(len(p.Published)), i.published)
	}
	parked := 0
	for _, f := range p.Failed {
		if f.Park {
			parked++
		}
	}
	if n := len(p.Failed) - parked; n > 0 {
		i.settledCount.Add(ctx, int64(n), i.failed)
	}
	if parked > 0 {
		i.settledCount.Add(ctx, int64(parked), i.parked)
	}
}

// inboxInstruments are an inbox's instruments: messages once per message, duration once per
// transaction (a Process call or a ProcessBatch call).
type inboxInstruments struct {
	messages metric.Int64Counter
	duration metric.Float64Histogram
	horizon  metric.Float64Gauge
	pruned   metric.Int64Counter
}

func newInboxInstruments(mp metric.MeterProvider) (*inboxInstruments, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentationName)
	var i inboxInstruments
	var err, e error
	i.messages, err = m.Int64Counter("outboxkit.inbox.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages processed by the inbox, by outcome."))
	i.duration, e = m.Float64Histogram("outboxkit.inbox.process.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one inbox transaction (checks, record, handler, commit)."),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	err = errors.Join(err, e)
	i.horizon, e = m.Float64Gauge("outboxkit.inbox.retention.horizon", metric.WithUnit("s"),
		metric.WithDescription("The consumer's retention horizon as a Unix time: messages that occurred before it are rejected (beyond retention). Set by Prune, and by Process when it reads a horizon."))
	err = errors.Join(err, e)
	i.pruned, e = m.Int64Counter("outboxkit.inbox.pruned", metric.WithUnit("{record}"),
		metric.WithDescription("Inbox records deleted by Prune behind the retention horizon."))
	if err = errors.Join(err, e); err != nil {
		return nil, fmt.Errorf("inbox: instruments: %w", err)
	}
	return &i, nil
}

// processed counts one message by its outcome.
func (i *inboxInstruments) processed(ctx context.Context, consumer string, res InboxResult, err error) {
	outcome := "failed"
	switch {
	case err == nil && res.Outcome == Applied:
		outcome = "applied"
	case err == nil && res.Outcome == Duplicate:
		outcome = "duplicate"
	case err == nil && res.Outcome == Stale:
		outcome = "stale"
	case errors.Is(err, ErrDigestMismatch):
		outcome = "digest_conflict"
	case errors.Is(err, ErrBeyondRetention):
		outcome = "beyond_retention"
	case errors.Is(err, ErrVersionGap):
		outcome = "version_gap"
	}
	i.messages.Add(ctx, 1, metric.WithAttributes(attribute.String("outboxkit.consumer", consumer), attribute.String("outboxkit.outcome", outcome)))
}

// recordTx records the duration of one inbox transaction (of Process or ProcessBatch).
func (i *inboxInstruments) recordTx(ctx context.Context, consumer string, d time.Duration) {
	i.duration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("outboxkit.consumer", consumer)))
}

// horizonSeen records consumer's retention horizon h (zero: never pruned, nothing recorded).
func (i *inboxInstruments) horizonSeen(ctx context.Context, consumer string, h time.Time) {
	if !h.IsZero() {
		i.horizon.Record(ctx, float64(h.UnixMicro())/1e6, metric.WithAttributes(attribute.String("outboxkit.consumer", consumer)))
	}
}

// prunedRecords records a Prune of consumer that deleted n records.
func (i *inboxInstruments) prunedRecords(ctx context.Context, consumer string, n int) {
	i.pruned.Add(ctx, int64(n), metric.WithAttributes(attribute.String("outboxkit.consumer", consumer)))
}
