package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

// Delivery is one consumed message, decoded.
type Delivery struct {
	// Event is the event the producer wrote, rebuilt from the message's headers and
	// content-type; Payload is the body.
	Event core.Event
	// CreatedAt is the outbox CreatedAt (cloudEvents:time; zero when the message has none).
	CreatedAt time.Time
	// Queue is the queue, DeliveryTag the broker's tag of this delivery on its channel, and
	// Redelivered the broker's flag (the message was delivered before and not acknowledged).
	Queue       string
	DeliveryTag uint64
	Redelivered bool
	// Attempt counts this consumer's attempts at the delivery, from 1.
	Attempt int
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error (the handler type of the Kafka and SQS
// consumers, over this package's Delivery).
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// Defaults of ConsumerOptions.
const (
	DefaultPrefetch    = 32
	DefaultMaxBatch    = 100
	DefaultBatchWait   = 2 * time.Millisecond
	DefaultMaxAttempts = 5
	DefaultRetryDelay  = 200 * time.Millisecond
)

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// Config configures the connection, as Options.Config. Default amqp091's defaults;
	// Config.Recovery must be nil.
	Config *amqp.Config
	// Prefetch is the channel's QoS prefetch count: the most unacknowledged messages the
	// broker hands the consumer at once, 1 to 65535. Default DefaultPrefetch (32).
	Prefetch int
	// MaxBatch is the most messages applied in one inbox transaction
	// (core.Inbox.ProcessBatch), in queue order: the consumer takes the delivery it waits for
	// and those handed over within BatchWait after it, up to MaxBatch, and acknowledges them
	// once that transaction committed. When the batch fails, its
	// messages are tried again one at a time, each in its own transaction with MaxAttempts and
	// the dead-letter rule (the batch counts as the first attempt of the message that failed
	// it), so a poison message is rejected alone. 1 gives every message its own transaction.
	// At most Prefetch (the broker never hands over more unacknowledged messages). Default
	// DefaultMaxBatch (100), lowered to Prefetch when that is smaller (32 with the default
	// Prefetch).
	MaxBatch int
	// BatchWait is the longest the consumer waits, from the first delivery of a batch, for
	// more deliveries to fill it up to MaxBatch; it stops at once when the batch is full.
	// amqp091 hands deliveries over one at a time from a goroutine of its own, so a batch that
	// took only what is handed over without waiting would mostly hold one message; this short
	// wait lets the messages already received (or arriving right after the previous batch's
	// acknowledgement) join the batch. It delays a message of an idle queue by at most
	// BatchWait. Default DefaultBatchWait (2ms); with MaxBatch 1 there is no wait.
	BatchWait time.Duration
	// MaxAttempts is how many times a message is tried before it is rejected to the queue's
	// dead-letter exchange (basic.nack, requeue=false). A message no attempt can get past is
	// rejected at once: one that is not an outbox message (ErrUndecodable), or one the inbox
	// refuses for good (core.ErrInvalidMessage, core.ErrDigestMismatch,
	// core.ErrBeyondRetention). Default DefaultMaxAttempts (5).
	MaxAttempts int
	// RetryDelay is the wait between two attempts at a message. Default DefaultRetryDelay
	// (200ms).
	RetryDelay time.Duration
	// Entity maps an event to the inbox's version gate. Default core.EventEntity;
	// NoVersionGate turns the gate off. Each delivery reaches Inbox.Process as
	// core.InboxMessageOf(&d.Event, d.CreatedAt, "rabbitmq:<queue>/<message-id>") with this
	// gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

// ConsumerStats counts what a Consumer did.
type ConsumerStats struct {
	Received     uint64 // deliveries taken from the channel
	Applied      uint64 // inbox outcome Applied
	Duplicate    uint64 // inbox outcome Duplicate
	Stale        uint64 // inbox outcome Stale
	Failed       uint64 // failed attempts (undecodable, inbox or handler error)
	DeadLettered uint64 // rejected (basic.nack, requeue=false) to the queue's dead-letter exchange
	Released     uint64 // handed back on shutdown (basic.nack, requeue=true)
	Sessions     uint64 // connections and channels opened (1 plus the reconnects)
}

// Consumer reads one queue and processes every message through a core.Inbox.
//
// Guarantees:
//   - Messages are processed in the order the queue hands them out, each with the handler in
//     its inbox transaction: the deliveries received are applied up to MaxBatch at a time in
//     one transaction (core.Inbox.ProcessBatch, all or nothing), a single one with
//     core.Inbox.Process. A redelivered message is a no-op (Duplicate).
//   - A message is acknowledged (basic.ack) only after its inbox transaction committed (or
//     the inbox found it Duplicate or Stale); a batch with one basic.ack (multiple) on its
//     last delivery tag when nothing before it on the channel is unsettled, else one by one.
//     When the acknowledgement is lost with the connection, the broker delivers the messages
//     again and the inbox absorbs them.
//   - A failed batch is tried again one message at a time, in order; a failed attempt at a
//     message is retried in place, RetryDelay apart, up to MaxAttempts (the failed batch
//     counts as the first attempt of the message that failed it), holding the message (and
//     the queue's order behind it); then the message is rejected without requeue to the
//     queue's dead-letter exchange. A message no attempt can get past is rejected at once,
//     alone: the others of its batch are applied. Without an x-dead-letter-exchange on the
//     queue the broker DROPS a rejected message: declare one (DeclareQueue does).
//   - On shutdown the consumer is cancelled and every message it holds unprocessed is handed
//     back (basic.nack, requeue=true); unacknowledged messages of a lost connection go back to
//     the queue by themselves. Run then dials again with a backoff (100ms doubling to 5s).
type Consumer[TTx any] struct {
	queue string
	d     dialer
	proc  *consume.Processor[TTx, Delivery]
	o     ConsumerOptions
	log   *slog.Logger

	outcomes                                           consume.Outcomes
	received, failed, deadLettered, released, sessions atomic.Uint64
}

// NewConsumer returns a consumer of queue on the broker at url, named consumer in the inbox,
// that processes every message with handler through inbox. opts may be nil. consumer must
// pass driver.CheckConsumer, otherwise NewConsumer returns a *core.OptionError.
func NewConsumer[TTx any](url, queue string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	cfg, err := config(url, o.Config)
	if err != nil {
		return nil, err
	}
	if queue == "" {
		return nil, &core.OptionError{Field: "queue", Reason: "required"}
	}
	proc, err := consume.NewProcessor(inbox, consumer, handler, deliveryEvent, ErrHandlerPanic)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Prefetch == 0:
		o.Prefetch = DefaultPrefetch
	case o.Prefetch < 0 || o.Prefetch > 65535:
		return nil, &core.OptionError{Field: "Prefetch", Reason: "must be between 1 and 65535 (0 means the default, 32)"}
	}
	switch {
	case o.MaxAttempts == 0:
		o.MaxAttempts = DefaultMaxAttempts
	case o.MaxAttempts < 0:
		return nil, &core.OptionError{Field: "MaxAttempts", Reason: "must not be negative (0 means the default, 5)"}
	}
	switch {
	case o.RetryDelay == 0:
		o.RetryDelay = DefaultRetryDelay
	case o.RetryDelay < 0:
		return nil, &core.OptionError{Field: "RetryDelay", Reason: "must not be negative (0 means the default, 200ms)"}
	}
	switch {
	case o.MaxBatch == 0:
		o.MaxBatch = min(DefaultMaxBatch, o.Prefetch)
	case o.MaxBatch < 0 || o.MaxBatch > o.Prefetch:
		return nil, &core.OptionError{Field: "MaxBatch", Reason: fmt.Sprintf("must be between 1 and Prefetch (%d): the broker hands over no more unacknowledged messages (0 means the default, 100 or Prefetch when smaller)", o.Prefetch)}
	}
	switch {
	case o.BatchWait == 0:
		o.BatchWait = DefaultBatchWait
	case o.BatchWait < 0:
		return nil, &core.OptionError{Field: "BatchWait", Reason: "must not be negative (0 means the default, 2ms)"}
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer[TTx]{queue: queue, d: dialer{url: url, cfg: cfg, log: log, name: "rabbitmq_consumer"},
		proc: proc, o: o, log: log}, nil
}

// Stats returns the consumer's counters.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Applied: c.outcomes.Applied.Load(), Duplicate: c.outcomes.Duplicate.Load(),
		Stale: c.outcomes.Stale.Load(), Failed: c.failed.Load(), DeadLettered: c.deadLettered.Load(),
		Released: c.released.Load(), Sessions: c.sessions.Load()}
}

// Run consumes until ctx is cancelled, then hands back what it holds, closes its connection
// and returns nil. A lost connection or channel is logged and dialed again after a backoff.
// Run may be called once.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	defer func() { _ = c.d.close() }()
	pause := minRedialBackoff
	for ctx.Err() == nil {
		err := c.session(ctx)
		if ctx.Err() != nil {
			break
		}
		c.log.Warn("rabbitmq_consumer_session_ended", "queue", c.queue, "retry_in", pause, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, maxRedialBackoff)
	}
	return nil
}

// session consumes on one channel until it closes or ctx ends.
func (c *Consumer[TTx]) session(ctx context.Context) error {
	conn, err := c.d.connection(ctx)
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(c.o.Prefetch, 0, false); err != nil {
		return err
	}
	tag := "outboxkit-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	deliveries, err := ch.Consume(c.queue, tag, false, false, false, false, nil)
	if err != nil {
		return err
	}
	c.sessions.Add(1)
	closed := fmt.Errorf("%w: queue %q: the channel or connection closed", ErrChannelClosed, c.queue)
	// Every delivery tag up to settled was acknowledged or rejected (tags count from 1 on a
	// channel, and this channel has only this consumer).
	var settled uint64
	batch := make([]amqp.Delivery, 0, c.o.MaxBatch)
	for {
		select {
		case <-ctx.Done():
			c.release(ch, tag, deliveries, nil)
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return closed
			}
			batch = append(batch[:0], d)
			open := c.fill(ctx, &batch, deliveries)
			c.received.Add(uint64(len(batch)))
			if held := c.handle(ctx, batch, &settled); len(held) > 0 {
				// Shutdown: held is handed back after the cancel, so that the broker does not
				// deliver it to this consumer again.
				c.release(ch, tag, deliveries, held)
				return nil
			}
			if !open {
				return closed
			}
			if ctx.Err() != nil {
				c.release(ch, tag, deliveries, nil)
				return nil
			}
		}
	}
}

// fill appends to batch the deliveries received within BatchWait, up to MaxBatch. It returns
// false once deliveries is closed.
func (c *Consumer[TTx]) fill(ctx context.Context, batch *[]amqp.Delivery, deliveries <-chan amqp.Delivery) bool {
	if len(*batch) >= c.o.MaxBatch {
		return true
	}
	wait := time.NewTimer(c.o.BatchWait)
	defer wait.Stop()
	for len(*batch) < c.o.MaxBatch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return false
			}
			*batch = append(*batch, d)
		case <-wait.C:
			return true
		case <-ctx.Done():
			return true
		}
	}
	return true
}

// release cancels the consumer and hands back held and every delivery still buffered.
func (c *Consumer[TTx]) release(ch *amqp.Channel, tag string, deliveries <-chan amqp.Delivery, held []amqp.Delivery) {
	_ = ch.Cancel(tag, false)
	for i := range held {
		if held[i].Nack(false, true) == nil {
			c.released.Add(1)
		}
	}
	timeout := time.After(5 * time.Second)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return
			}
			if d.Nack(false, true) == nil {
				c.released.Add(1)
			}
		case <-timeout:
			return // closing the channel hands back the rest
		}
	}
}

// handle processes ds, consecutive deliveries in queue order, and settles them: several in
// one inbox transaction, acknowledged together once it committed; when that fails, one at a
// time (one). It returns the deliveries left unsettled because the shutdown cut the work short
// (the caller hands them back), nil when all are settled.
func (c *Consumer[TTx]) handle(ctx context.Context, ds []amqp.Delivery, settled *uint64) []amqp.Delivery {
	prior := make([]error, len(ds)) // the failed batch attempt of a delivery
	if len(ds) > 1 {
		err := c.batch(ctx, ds)
		switch consume.Decide(ctx, err) {
		case consume.Ack:
			c.ack(ds, settled)
			return nil
		case consume.Release:
			return ds // interrupted by shutdown, not a failure of the messages
		}
		var be *core.BatchError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(ds) {
			prior[be.Index] = be.Err // the batch was this message's first attempt
		}
		// An undecodable message stops the batch before the inbox: the one-at-a-time pass
		// rejects it, and the batch is no failed attempt.
		if !errors.Is(err, errUndecodable) {
			c.failed.Add(1)
			c.log.Warn("rabbitmq_consumer_batch_failed", "queue", c.queue, "first_delivery_tag", ds[0].DeliveryTag,
				"messages", len(ds), "error", err)
		}
	}
	for i := range ds {
		if i > 0 && ctx.Err() != nil {
			return ds[i:]
		}
		if !c.one(ctx, &ds[i], prior[i], settled) {
			return ds[i:]
		}
	}
	return nil
}

// errUndecodable stops a batch that holds a message that is not an outbox message.
var errUndecodable = errors.New("rabbitmq: undecodable message in the batch")

// batch processes ds in one inbox transaction (core.Inbox.ProcessBatch). A *core.BatchError
// names the delivery that failed it.
func (c *Consumer[TTx]) batch(ctx context.Context, ds []amqp.Delivery) error {
	dels := make([]*Delivery, len(ds))
	msgs := make([]core.InboxMessage, len(ds))
	for i := range ds {
		ev, created, err := decodeDelivery(&ds[i])
		if err != nil {
			return errUndecodable
		}
		dels[i] = &Delivery{Event: ev, CreatedAt: created, Queue: c.queue, DeliveryTag: ds[i].DeliveryTag,
			Redelivered: ds[i].Redelivered, Attempt: 1}
		msgs[i] = c.message(dels[i])
	}
	res, err := c.proc.ProcessBatch(ctx, dels, msgs)
	if err != nil {
		return err
	}
	for _, r := range res {
		c.outcomes.Add(r.Outcome)
	}
	return nil
}

// message is d's inbox message.
func (c *Consumer[TTx]) message(d *Delivery) core.InboxMessage {
	return consume.Message(&d.Event, d.CreatedAt, c.o.Entity, "rabbitmq:"+c.queue+"/"+d.Event.ID)
}

// ack acknowledges ds, whose inbox transaction committed: with one basic.ack (multiple) on the
// last tag when ds are the channel's next deliveries, nothing unsettled before them; else each
// on its own. A failed ack means a closed channel: the messages are delivered again with the
// next one, and the inbox finds them Duplicate.
func (c *Consumer[TTx]) ack(ds []amqp.Delivery, settled *uint64) {
	last := ds[len(ds)-1].DeliveryTag
	if len(ds) > 1 && ds[0].DeliveryTag == *settled+1 && last == *settled+uint64(len(ds)) {
		if err := ds[len(ds)-1].Ack(true); err != nil {
			c.log.Warn("rabbitmq_consumer_ack_failed", "queue", c.queue, "delivery_tag", last, "messages", len(ds), "error", err)
			return
		}
		*settled = last
		return
	}
	for i := range ds {
		if err := ds[i].Ack(false); err != nil {
			c.log.Warn("rabbitmq_consumer_ack_failed", "queue", c.queue, "message_id", ds[i].MessageId, "error", err)
			continue
		}
		settle(settled, ds[i].DeliveryTag)
	}
}

// settle records that tag was acknowledged or rejected.
func settle(settled *uint64, tag uint64) {
	if tag == *settled+1 {
		*settled = tag
	}
}

// one processes one delivery in its own transactions and settles it: ack, or reject to the
// dead-letter exchange. prior, when not nil, is the error of the failed batch that was its
// first attempt. It returns false, leaving d unsettled, when the shutdown cut the attempt short
// (the caller hands it back).
func (c *Consumer[TTx]) one(ctx context.Context, d *amqp.Delivery, prior error, settled *uint64) bool {
	ev, created, err := decodeDelivery(d)
	act := consume.Retry
	attempt := 0
	if err != nil {
		err = consume.Poison(err)
		act = consume.Decide(ctx, err)
		c.failed.Add(1)
	} else {
		del := &Delivery{Event: ev, CreatedAt: created, Queue: c.queue, DeliveryTag: d.DeliveryTag, Redelivered: d.Redelivered}
		msg := c.message(del)
		for attempt = 1; ; attempt++ {
			var res core.InboxResult
			if attempt == 1 && prior != nil {
				err = prior // counted as failed with its batch
			} else {
				del.Attempt = attempt
				res, err = c.proc.Process(ctx, del, msg)
			}
			act = consume.Decide(ctx, err)
			if act == consume.Ack {
				c.outcomes.Add(res.Outcome)
				break
			}
			if act == consume.Release {
				break
			}
			if attempt > 1 || prior == nil {
				c.failed.Add(1)
			}
			if act == consume.DeadLetter || attempt >= c.o.MaxAttempts {
				act = consume.DeadLetter
				break
			}
			c.log.Warn("rabbitmq_consumer_attempt_failed", "queue", c.queue, "event_id", ev.ID, "attempt", attempt, "error", err)
			select {
			case <-ctx.Done():
				act = consume.Release
			case <-time.After(c.o.RetryDelay):
			}
			if act == consume.Release {
				break
			}
		}
	}
	switch act {
	case consume.Ack:
		c.ack([]amqp.Delivery{*d}, settled)
	case consume.Release:
		return false
	default: // DeadLetter
		c.log.Error("rabbitmq_consumer_dead_letter", "queue", c.queue, "message_id", d.MessageId, "attempts", attempt, "error", err)
		if nerr := d.Nack(false, false); nerr != nil {
			c.log.Warn("rabbitmq_consumer_nack_failed", "queue", c.queue, "message_id", d.MessageId, "error", nerr)
			return true
		}
		settle(settled, d.DeliveryTag)
		c.deadLettered.Add(1)
	}
	return true
}

// DeclareQueue declares a durable queue with its dead-letter path, idempotently: a fanout
// exchange queue+".dlx", a durable queue queue+".dlq" bound to it, and queue with
// x-dead-letter-exchange set to queue+".dlx" (args adds other queue arguments, e.g.
// x-queue-type). The consumer's rejected messages land in queue+".dlq". Declaring an existing
// queue with other arguments fails (406 PRECONDITION_FAILED) and closes ch.
func DeclareQueue(ch *amqp.Channel, queue string, args amqp.Table) error {
	if ch == nil || queue == "" {
		return errors.New("rabbitmq: DeclareQueue needs a channel and a queue name")
	}
	dlx, dlq := queue+".dlx", queue+".dlq"
	if err := ch.ExchangeDeclare(dlx, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declaring exchange %q: %w", dlx, err)
	}
	if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: declaring queue %q: %w", dlq, err)
	}
	if err := ch.QueueBind(dlq, "", dlx, false, nil); err != nil {
		return fmt.Errorf("rabbitmq: binding queue %q to %q: %w", dlq, dlx, err)
	}
	a := amqp.Table{}
	for k, v := range args {
		a[k] = v
	}
	a["x-dead-letter-exchange"] = dlx
	if _, err := ch.QueueDeclare(queue, true, false, false, false, a); err != nil {
		return fmt.Errorf("rabbitmq: declaring queue %q: %w", queue, err)
	}
	return nil
}

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
