package sqs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/consume"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Delivery is one received message, decoded.
type Delivery struct {
	// Event is the event as the producer wrote it; Payload is the verified payload (fetched from
	// S3 for a claim-checked message).
	Event core.Event
	// CreatedAt is the outbox CreatedAt (zero when the producer did not send it).
	CreatedAt time.Time
	// QueueURL, MessageID and ReceiveCount describe the SQS delivery. GroupID is the FIFO
	// MessageGroupId ("" on a standard queue).
	QueueURL     string
	MessageID    string
	ReceiveCount int
	GroupID      string
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error. It is the handler type of
// kafka.Handler too, over the Kafka consumer's Delivery.
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// MaxMessages is the most messages one ReceiveMessage returns, 1 to 10. Default 10.
	MaxMessages int
	// WaitTime is the long-polling wait of ReceiveMessage, 0 to 20s (whole seconds). Default 20s.
	WaitTime time.Duration
	// VisibilityTimeout is requested on every receive and renewed while messages are being
	// processed, 1s to 12h (whole seconds). Default 30s.
	VisibilityTimeout time.Duration
	// ExtendEvery is how often the visibility of messages still being processed is renewed.
	// Default VisibilityTimeout/3; must be below VisibilityTimeout.
	ExtendEvery time.Duration
	// Concurrency is the most groups (FIFO message groups; single messages on a standard
	// queue) processed at once, over all pollers. Default 4; at most MaxConcurrency.
	Concurrency int
	// Pollers is the number of receive loops. Default 1; at most MaxPollers.
	Pollers int
	// RequestTimeout bounds each DeleteMessageBatch and ChangeMessageVisibilityBatch call, and,
	// added to WaitTime, each ReceiveMessage long poll (SDK retries included): the SDK's HTTP
	// client has no overall timeout, so without this bound an endpoint that stops answering
	// with the connection left open would hold a poller (and the messages in hand) for ever.
	// A receive that times out is retried after a pause, on a new connection; its messages, if
	// the queue handed them out, come back after VisibilityTimeout. Default
	// DefaultRequestTimeout (10s); at most MaxRequestTimeout.
	RequestTimeout time.Duration
	// S3 reads claim-checked payloads. Default nil: a claim-checked message fails with
	// ErrClaimCheckBucket and is not deleted.
	S3 *s3.Client
	// ClaimCheckBuckets lists the buckets claim-checked payloads may be read from, with the
	// consumer's own credentials. Default nil: none (deny by default): a message pointing
	// anywhere else fails with ErrClaimCheckBucket before any S3 request and is not deleted.
	ClaimCheckBuckets []string
	// MaxClaimCheckBytes bounds the size of a claim-checked payload. A reference claiming more
	// fails with ErrClaimCheckTooLarge before any S3 request; an object whose actual size
	// differs from the claimed size fails with ErrClaimCheckDigest before its body is read, and
	// no more than the claimed size is ever read. Default and maximum
	// core.MaxLimitPayloadBytes (64 MiB), the largest payload an outbox accepts.
	MaxClaimCheckBytes int64
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and
	// Version; version 0 disables the gate). Default core.EventEntity: AggregateType + "/" +
	// AggregateID and AggregateVersion, no gate for an event without an AggregateVersion (the Kafka consumer's
	// default too). NoVersionGate turns the gate off.
	// Each delivery reaches Inbox.Process as core.InboxMessageOf(&d.Event, d.CreatedAt,
	// "sqs:<queue>/<message id>") with this gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// TracerProvider records a span per message ("process <queue>", kind consumer), a child
	// of the producer's span whose trace context the event's headers carry (Outbox.Write stores
	// it); the inbox transaction and the handler run inside it. Default nil: the global
	// provider (otel.GetTracerProvider), a no-op until set.
	TracerProvider trace.TracerProvider
	// Propagator reads the trace context from the event's headers. Default nil: the global
	// propagator (otel.GetTextMapPropagator).
	Propagator propagation.TextMapPropagator
	// MeterProvider receives outboxkit.consumer.messages ({message}), the counts of Stats by
	// outboxkit.outcome (received, applied, duplicate, stale, failed, deleted, released) with
	// messaging.system and messaging.destination.name (the queue's name): never an event or
	// message id. Give the Inbox its own InboxOptions.MeterProvider for the inbox's instruments.
	// Default nil: the global provider (otel.GetMeterProvider), a no-op until set.
	MeterProvider metric.MeterProvider
}

// Upper bounds of ConsumerOptions.
const (
	MaxConcurrency    = 1024
	MaxPollers        = 64
	MaxRequestTimeout = 15 * time.Minute
)

// DefaultRequestTimeout is the default ConsumerOptions.RequestTimeout: a receive waits at
// most WaitTime + 10s (30s with the default WaitTime), any other request at most 10s.
const DefaultRequestTimeout = 10 * time.Second

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

// ConsumerStats counts what a Consumer did.
type ConsumerStats struct {
	Received  uint64 // messages received
	Applied   uint64 // inbox outcome Applied
	Duplicate uint64 // inbox outcome Duplicate
	Stale     uint64 // inbox outcome Stale
	Failed    uint64 // processing failed (undecodable, claim check, inbox or handler error): not deleted (left for redelivery or, past the queue's maxReceiveCount, its dead-letter queue); the later messages of its FIFO group in that batch stay in flight uncounted
	Deleted   uint64 // deleted after their inbox transaction committed
	Released  uint64 // visibility reset to 0 on shutdown
}

// Consumer receives messages from one SQS queue and processes each through a core.Inbox.
type Consumer[TTx any] struct {
	client   *awssqs.Client
	queueURL string
	proc     *consume.Processor[TTx, Delivery]
	o        ConsumerOptions
	log      *slog.Logger
	sem      chan struct{}

	outcomes                            consume.Outcomes // applied, duplicate, stale
	received, failed, deleted, released atomic.Uint64

	messages metric.Int64Counter
	attrs    map[string]metric.AddOption // by outcome, built once
}

// count adds n to the stat of outcome (the metric; the caller updates its atomic counter).
func (c *Consumer[TTx]) count(outcome string, n int) {
	if a, ok := c.attrs[outcome]; ok {
		c.messages.Add(context.Background(), int64(n), a)
	}
}

// NewConsumer returns a consumer named consumer (the inbox's consumer name) of queueURL that
// processes every message with handler through inbox. opts may be nil. consumer must pass
// driver.CheckConsumer (the rule Inbox.Process applies), otherwise NewConsumer returns a
// *core.OptionError.
func NewConsumer[TTx any](client *awssqs.Client, queueURL string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	switch {
	case client == nil:
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	case queueURL == "":
		return nil, &core.OptionError{Field: "queueURL", Reason: "required"}
	}
	proc, err := consume.NewProcessor(inbox, consumer, handler, deliveryEvent, ErrHandlerPanic)
	if err != nil {
		return nil, err
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.MaxMessages == 0:
		o.MaxMessages = 10
	case o.MaxMessages < 1 || o.MaxMessages > 10:
		return nil, &core.OptionError{Field: "MaxMessages", Reason: "must be between 1 and 10"}
	}
	switch {
	case o.WaitTime == 0:
		o.WaitTime = 20 * time.Second
	case o.WaitTime < 0 || o.WaitTime > 20*time.Second:
		return nil, &core.OptionError{Field: "WaitTime", Reason: "must be between 0 and 20s"}
	}
	switch {
	case o.VisibilityTimeout == 0:
		o.VisibilityTimeout = 30 * time.Second
	case o.VisibilityTimeout < time.Second || o.VisibilityTimeout > 12*time.Hour:
		return nil, &core.OptionError{Field: "VisibilityTimeout", Reason: "must be between 1s and 12h"}
	}
	switch {
	case o.ExtendEvery == 0:
		o.ExtendEvery = o.VisibilityTimeout / 3
	case o.ExtendEvery < 0 || o.ExtendEvery >= o.VisibilityTimeout:
		return nil, &core.OptionError{Field: "ExtendEvery", Reason: "must be positive and below VisibilityTimeout"}
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = 4
	case o.Concurrency < 0 || o.Concurrency > MaxConcurrency:
		return nil, &core.OptionError{Field: "Concurrency", Reason: fmt.Sprintf("must be between 0 (default) and %d", MaxConcurrency)}
	}
	switch {
	case o.Pollers == 0:
		o.Pollers = 1
	case o.Pollers < 0 || o.Pollers > MaxPollers:
		return nil, &core.OptionError{Field: "Pollers", Reason: fmt.Sprintf("must be between 0 (default) and %d", MaxPollers)}
	}
	switch {
	case o.RequestTimeout == 0:
		o.RequestTimeout = DefaultRequestTimeout
	case o.RequestTimeout < 0 || o.RequestTimeout > MaxRequestTimeout:
		return nil, &core.OptionError{Field: "RequestTimeout", Reason: fmt.Sprintf("must be between 0 (default) and %v", MaxRequestTimeout)}
	}
	switch {
	case o.MaxClaimCheckBytes == 0:
		o.MaxClaimCheckBytes = core.MaxLimitPayloadBytes
	case o.MaxClaimCheckBytes < 0 || o.MaxClaimCheckBytes > core.MaxLimitPayloadBytes:
		return nil, &core.OptionError{Field: "MaxClaimCheckBytes", Reason: fmt.Sprintf("must be between 0 (default) and %d", core.MaxLimitPayloadBytes)}
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	mp := o.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	messages, err := mp.Meter("github.com/outboxkit/outbox/sinks/sqs").Int64Counter("outboxkit.consumer.messages",
		metric.WithUnit("{message}"), metric.WithDescription("Messages of the SQS consumer by outcome (as ConsumerStats)."))
	if err != nil {
		return nil, fmt.Errorf("sqs: consumer instruments: %w", err)
	}
	attrs := map[string]metric.AddOption{}
	for _, o := range []string{"received", "applied", "duplicate", "stale", "failed", "deleted", "released"} {
		attrs[o] = metric.WithAttributes(attribute.String("messaging.system", "aws_sqs"),
			attribute.String("messaging.destination.name", queueName(queueURL)), attribute.String("outboxkit.outcome", o))
	}
	return &Consumer[TTx]{client: client, queueURL: queueURL, proc: proc,
		o: o, log: log, sem: make(chan struct{}, o.Concurrency), messages: messages, attrs: attrs}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Applied: c.outcomes.Applied.Load(), Duplicate: c.outcomes.Duplicate.Load(),
		Stale: c.outcomes.Stale.Load(), Failed: c.failed.Load(), Deleted: c.deleted.Load(), Released: c.released.Load()}
}

// Run receives and processes messages until ctx is cancelled, then returns nil once every
// received message is either processed (and deleted) or released (visibility 0). Receive
// errors are logged and retried after a pause.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range c.o.Pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.poll(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func (c *Consumer[TTx]) poll(ctx context.Context) {
	pause := 100 * time.Millisecond
	for ctx.Err() == nil {
		// The long poll answers within WaitTime; RequestTimeout more is the bound of a receive
		// whose endpoint went silent.
		rctx, cancel := context.WithTimeout(ctx, c.o.WaitTime+c.o.RequestTimeout)
		out, err := c.client.ReceiveMessage(rctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(c.queueURL),
			MaxNumberOfMessages:         int32(c.o.MaxMessages),
			WaitTimeSeconds:             int32(c.o.WaitTime / time.Second),
			VisibilityTimeout:           int32(c.o.VisibilityTimeout / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("sqs_consumer_receive_failed", "queue_url", c.queueURL, "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, 10*time.Second)
			continue
		}
		pause = 100 * time.Millisecond
		if len(out.Messages) > 0 {
			c.received.Add(uint64(len(out.Messages)))
			c.count("received", len(out.Messages))
			c.processBatch(ctx, out.Messages)
		}
	}
}

// message states within a batch.
const (
	pending int32 = iota
	succeeded
	failedState
	release
)

func (c *Consumer[TTx]) processBatch(ctx context.Context, msgs []types.Message) {
	state := make([]atomic.Int32, len(msgs))
	// Groups in receive order: a FIFO group's messages are processed one after another.
	var order []string
	groups := map[string][]int{}
	for i := range msgs {
		g := msgs[i].Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
		if g == "" {
			g = "\x00" + strconv.Itoa(i) // standard queue: every message on its own
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}

	stopExtend := make(chan struct{})
	extended := make(chan struct{})
	go func() {
		defer close(extended)
		c.extend(ctx, msgs, state, stopExtend)
	}()

	var wg sync.WaitGroup
	for _, g := range order {
		idx := groups[g]
		select {
		case c.sem <- struct{}{}:
		case <-ctx.Done():
			for _, i := range idx {
				state[i].Store(release)
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-c.sem }()
			for k, i := range idx {
				if ctx.Err() != nil {
					for _, j := range idx[k:] {
						state[j].Store(release)
					}
					return
				}
				switch c.process(ctx, &msgs[i]) {
				case consume.Ack:
					state[i].Store(succeeded)
				case consume.Release:
					for _, j := range idx[k:] {
						state[j].Store(release)
					}
					return
				default: // Retry, DeadLetter: left on the queue (its redrive policy dead-letters)
					state[i].Store(failedState)
					c.failed.Add(1)
					c.count("failed", 1)
					// Later messages of the group stay in flight untouched: they become visible
					// again with this one, after it, so the group's order holds.
					for _, j := range idx[k+1:] {
						state[j].Store(failedState)
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stopExtend)
	<-extended

	// Settle with a context that outlives a shutdown: a committed message must be deleted.
	// Each request has its own RequestTimeout.
	sctx := context.WithoutCancel(ctx)
	var del, rel []types.Message
	for i := range msgs {
		switch state[i].Load() {
		case succeeded:
			del = append(del, msgs[i])
		case release, pending:
			rel = append(rel, msgs[i])
		}
	}
	if len(del) > 0 {
		c.deleteAll(sctx, del)
	}
	if len(rel) > 0 {
		c.changeVisibility(sctx, rel, 0)
		c.released.Add(uint64(len(rel)))
		c.count("released", len(rel))
	}
}

// extend renews the visibility of the batch's pending and committed-but-not-deleted messages
// every ExtendEvery until stop.
func (c *Consumer[TTx]) extend(ctx context.Context, msgs []types.Message, state []atomic.Int32, stop <-chan struct{}) {
	t := time.NewTicker(c.o.ExtendEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		// Committed messages wait for the batch's delete: renew them too, or a slow group in
		// the same batch would make them reappear (the inbox would absorb them, as wasted work).
		var live []types.Message
		for i := range msgs {
			if s := state[i].Load(); s == pending || s == succeeded {
				live = append(live, msgs[i])
			}
		}
		if len(live) == 0 {
			continue
		}
		// Bounded by ExtendEvery too, so that a renewal never overlaps the next one.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.o.ExtendEvery)
		c.changeVisibility(cctx, live, c.o.VisibilityTimeout)
		cancel()
	}
}

// changeVisibility sets the visibility of msgs to to, in one request bounded by RequestTimeout.
func (c *Consumer[TTx]) changeVisibility(ctx context.Context, msgs []types.Message, to time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, c.o.RequestTimeout)
	defer cancel()
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for k := range msgs {
		entries[k] = types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(k)),
			ReceiptHandle: msgs[k].ReceiptHandle, VisibilityTimeout: int32(to / time.Second)}
	}
	out, err := c.client.ChangeMessageVisibilityBatch(ctx, &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(c.queueURL), Entries: entries})
	if err != nil {
		c.log.Warn("sqs_consumer_change_visibility_failed", "queue_url", c.queueURL, "messages", len(msgs), "error", err)
		return
	}
	for _, f := range out.Failed {
		c.log.Warn("sqs_consumer_change_visibility_failed", "queue_url", c.queueURL, "entry", aws.ToString(f.Id),
			"code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
	}
}

// deleteAll deletes msgs in one request bounded by RequestTimeout.
func (c *Consumer[TTx]) deleteAll(ctx context.Context, msgs []types.Message) {
	ctx, cancel := context.WithTimeout(ctx, c.o.RequestTimeout)
	defer cancel()
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for k := range msgs {
		entries[k] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), ReceiptHandle: msgs[k].ReceiptHandle}
	}
	out, err := c.client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.queueURL), Entries: entries})
	if err != nil {
		// Redelivered later and then recognised by the inbox as a duplicate.
		c.log.Warn("sqs_consumer_delete_failed", "queue_url", c.queueURL, "messages", len(msgs), "error", err)
		return
	}
	c.deleted.Add(uint64(len(out.Successful)))
	c.count("deleted", len(out.Successful))
	for _, f := range out.Failed {
		c.log.Warn("sqs_consumer_delete_failed", "queue_url", c.queueURL, "entry", aws.ToString(f.Id),
			"code", aws.ToString(f.Code), "error", aws.ToString(f.Message))
	}
}

// process decodes m, runs it through the inbox and returns what to do with it: consume.Ack
// once the inbox transaction committed (Applied, Duplicate or Stale), consume.Release when the
// shutdown cut it short, consume.Retry or consume.DeadLetter when it failed (the message is
// left on the queue either way: SQS dead-letters by the queue's redrive policy).
func (c *Consumer[TTx]) process(ctx context.Context, m *types.Message) consume.Action {
	d, err := c.decode(ctx, m)
	if err != nil {
		act := consume.Decide(ctx, err)
		if act != consume.Release {
			c.log.Error("sqs_consumer_undecodable", "queue_url", c.queueURL, "message_id", aws.ToString(m.MessageId),
				"receive_count", m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)],
				"action", act.String(), "error", err)
		}
		return act
	}
	tp := c.o.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx, span := tp.Tracer("github.com/outboxkit/outbox/sinks/sqs").Start(
		core.TraceContext(ctx, c.o.Propagator, d.Event.Headers), "process "+queueName(c.queueURL),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("messaging.system", "aws_sqs"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", queueName(c.queueURL)),
		))
	defer span.End()
	// A panicking handler fails this message like an error (ErrHandlerPanic): the inbox
	// transaction rolls back, the message stays on the queue, and the consumer goes on.
	res, err := c.proc.Process(ctx, d, consume.Message(&d.Event, d.CreatedAt, c.o.Entity,
		"sqs:"+queueName(c.queueURL)+"/"+d.MessageID))
	act := consume.Decide(ctx, err)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		if act != consume.Release {
			c.log.Error("sqs_consumer_process_failed", "queue_url", c.queueURL, "message_id", d.MessageID,
				"event_id", d.Event.ID, "receive_count", d.ReceiveCount, "action", act.String(), "error", err)
		}
		return act
	}
	c.count(c.outcomes.Add(res.Outcome), 1)
	return act
}

func (c *Consumer[TTx]) decode(ctx context.Context, m *types.Message) (*Delivery, error) {
	body := aws.ToString(m.Body)
	attr := func(name string) (string, bool) {
		v, ok := m.MessageAttributes[name]
		if !ok || v.StringValue == nil {
			return "", false
		}
		return *v.StringValue, true
	}
	if _, ok := m.MessageAttributes[wire.AttrID]; !ok {
		if env, ok := snsEnvelope(body); ok {
			body, attr = env.Message, env.attr
		}
	}
	dec, err := wire.Decode(body, attr)
	if err != nil {
		// Not an outbox message: no attempt can decode it.
		return nil, consume.Poison(fmt.Errorf("sqs: message %s: %w", aws.ToString(m.MessageId), err))
	}
	if ref := dec.ClaimCheck; ref != nil {
		if c.o.S3 == nil || !slices.Contains(c.o.ClaimCheckBuckets, ref.Bucket) {
			return nil, fmt.Errorf("%w: message %s: s3://%s/%s", ErrClaimCheckBucket, aws.ToString(m.MessageId), ref.Bucket, ref.Key)
		}
		p, err := wire.FetchClaimCheck(ctx, c.o.S3, ref, c.o.MaxClaimCheckBytes)
		if err != nil {
			return nil, fmt.Errorf("sqs: message %s: %w", aws.ToString(m.MessageId), err)
		}
		dec.Event.Payload = p
	}
	n, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return &Delivery{
		Event: dec.Event, CreatedAt: dec.CreatedAt, QueueURL: c.queueURL, MessageID: aws.ToString(m.MessageId),
		ReceiveCount: n, GroupID: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
	}, nil
}

// envelope is the JSON body SNS delivers to SQS without raw message delivery.
type envelope struct {
	Type              string
	Message           string
	MessageAttributes map[string]struct{ Type, Value string }
}

func (e *envelope) attr(name string) (string, bool) {
	a, ok := e.MessageAttributes[name]
	return a.Value, ok
}

func snsEnvelope(body string) (*envelope, bool) {
	if !strings.HasPrefix(strings.TrimSpace(body), "{") {
		return nil, false
	}
	var e envelope
	if json.Unmarshal([]byte(body), &e) != nil || e.Type != "Notification" {
		return nil, false
	}
	return &e, true
}

func queueName(url string) string {
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return url
}

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
