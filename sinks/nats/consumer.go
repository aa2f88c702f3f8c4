package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

// Delivery is one consumed message, decoded.
type Delivery struct {
	// Event is the event the producer wrote, rebuilt from the message's headers; Payload is
	// the message data.
	Event core.Event
	// CreatedAt is the outbox CreatedAt (ce-time; zero when the message has none).
	CreatedAt time.Time
	// Subject, Stream and StreamSeq locate the message. Attempt is the server's delivery
	// count of it (NumDelivered), from 1.
	Subject   string
	Stream    string
	StreamSeq uint64
	Attempt   int
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error.
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// FilterSubjects restricts the durable consumer to these subjects of the stream (one on
	// servers before 2.10). Default none: every subject of the stream.
	FilterSubjects []string
	// AckWait is the consumer's ack wait: a message neither acknowledged nor Nak'ed this long
	// after its delivery is delivered again. While a message's inbox transaction runs (for
	// a batch, until each of its messages is acknowledged, Nak'ed or terminated), the
	// consumer tells the server every AckWait/2 that it is in progress. Default 30s.
	AckWait time.Duration
	// MaxDeliver is how many deliveries of a message (the server's NumDelivered) fail before
	// it goes to the dead-letter subject. A message no attempt can get past goes there at
	// once: one that is not an outbox message (ErrUndecodable), or one the inbox refuses for
	// good (core.ErrInvalidMessage, core.ErrDigestMismatch, core.ErrBeyondRetention). The
	// server-side consumer is created with no MaxDeliver of its own (unlimited), so that a
	// message whose dead-letter publish fails is delivered again, never dropped. A message
	// handed back on shutdown counts as a delivery too. Default 5.
	MaxDeliver int
	// RetryBackoff is the delay of the Nak after a failed attempt (NakWithDelay): the server
	// delivers the message again after it. Default 1s.
	RetryBackoff time.Duration
	// MaxBatch is the most messages one pull (Fetch) asks for, and the most processed in one
	// inbox transaction (core.Inbox.ProcessBatch): the consumer takes the messages of the
	// pull that have arrived, up to MaxBatch, and never waits for more. Each is acknowledged
	// only after that transaction committed. When the batch fails, its messages are tried
	// again one at a time, each in its own transaction with the Nak and dead-letter rules
	// (the message that failed the batch as poison is dead-lettered at once; after any other
	// failure the handler runs again for the message that failed it, and the failed batch
	// does not count against MaxDeliver). 1 gives every message its own transaction (and
	// pulls one at a time). Default 100.
	MaxBatch int
	// FetchWait is how long one pull waits for messages; it also bounds how long Run takes to
	// return once its context ended, and delays the Nak of the messages handed back on
	// shutdown. Default 1s.
	FetchWait time.Duration
	// DeadLetterSubject names the dead-letter subject of a message's subject. Default "dlq." +
	// subject. A stream must cover it (otherwise the message is Nak'ed and dead-lettered
	// again on its next delivery), and it must not be one this consumer reads.
	DeadLetterSubject func(subject string) string
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and
	// Version; version 0 disables the gate). Default core.EventEntity. NoVersionGate turns
	// the gate off. Each delivery reaches Inbox.Process as core.InboxMessageOf(&d.Event,
	// d.CreatedAt, "nats:<stream>@<stream sequence>") with this gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

// Dead-letter message headers, added to the original message's headers (its Nats-Msg-Id
// becomes "<stream>:<stream sequence>", so that dead-lettering one stored message twice is
// deduplicated by the dead-letter stream).
const (
	HeaderDeadLetterSubject  = "outbox-dlq-subject"  // the message's subject
	HeaderDeadLetterStream   = "outbox-dlq-stream"   // its stream
	HeaderDeadLetterSequence = "outbox-dlq-sequence" // its stream sequence, decimal
	HeaderDeadLetterAttempts = "outbox-dlq-attempts" // deliveries made, decimal
	HeaderDeadLetterError    = "outbox-dlq-error"    // the last error's text
)

// ConsumerStats counts what a Consumer did.
type ConsumerStats struct {
	Received     uint64 // messages delivered
	Applied      uint64 // inbox outcome Applied
	Duplicate    uint64 // inbox outcome Duplicate
	Stale        uint64 // inbox outcome Stale
	Failed       uint64 // failed attempts (undecodable, inbox or handler error; a failed batch counts once)
	DeadLettered uint64 // messages published to the dead-letter subject and terminated
	Released     uint64 // messages Nak'ed unprocessed on shutdown
	AckFailed    uint64 // acknowledgements the server did not confirm (delivered again: a no-op)
}

// Consumer reads a stream through a durable pull consumer and processes every message
// through a core.Inbox.
//
// Guarantees:
//   - Messages are processed one after another in the order the server delivers them, each
//     with the handler in the inbox's transaction (core.Inbox.ProcessBatch over up to
//     MaxBatch messages of a pull that have arrived, all or nothing; a failed batch is tried
//     again one message at a time): a message delivered again is a no-op (Duplicate).
//   - A message is acknowledged (a double ack: the server confirms it) only after its inbox
//     transaction committed: at least once into the inbox, exactly once in effect.
//   - A failed attempt Naks the message with RetryBackoff, so the server delivers it again
//     after the messages behind it: per key, order holds across a retry only through the
//     inbox's version gate with core.InboxOptions{Gap: core.GapReject} (a later version of an
//     aggregate then waits, core.ErrVersionGap, until the earlier one applied). With the
//     inbox's default, GapAllow, a later version applied first makes the earlier one Stale:
//     its effect is skipped. The same holds when a consumer process dies: the messages it
//     held come back only after AckWait, while the next process already receives later ones
//     (internal/reliability's NATS kill points run with GapReject for this reason).
//   - After MaxDeliver failed deliveries, or at once for a message no attempt can get past,
//     the message is published to its dead-letter subject with the headers
//     HeaderDeadLetter* and then terminated (Term); while that publish fails, it is Nak'ed and
//     tried again on its next delivery.
//   - On shutdown the messages in hand finish or are abandoned (their transaction rolls back),
//     and every message delivered but not processed is Nak'ed with a delay of FetchWait (past
//     the end of the last pull), so it is delivered again within about FetchWait to another
//     instance of the durable consumer, or to the next run.
type Consumer[TTx any] struct {
	js      jetstream.JetStream
	stream  string
	durable string
	proc    *consume.Processor[TTx, Delivery]
	o       ConsumerOptions
	log     *slog.Logger

	outcomes                                            consume.Outcomes
	received, failed, deadLettered, released, ackFailed atomic.Uint64
}

// NewConsumer returns a consumer of stream through the durable pull consumer durable (created
// or updated by Run), named consumer in the inbox, that processes every message with handler
// through inbox. opts may be nil. consumer must pass driver.CheckConsumer (the rule
// Inbox.Process applies), otherwise NewConsumer returns a *core.OptionError.
func NewConsumer[TTx any](js jetstream.JetStream, stream, durable string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	switch {
	case js == nil:
		return nil, &core.OptionError{Field: "js", Reason: "must not be nil"}
	case stream == "":
		return nil, &core.OptionError{Field: "stream", Reason: "required"}
	case durable == "":
		return nil, &core.OptionError{Field: "durable", Reason: "required"}
	}
	proc, err := consume.NewProcessor(inbox, consumer, handler, deliveryEvent, ErrHandlerPanic)
	if err != nil {
		return nil, err
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{{"AckWait", &o.AckWait, 30 * time.Second}, {"RetryBackoff", &o.RetryBackoff, time.Second}, {"FetchWait", &o.FetchWait, time.Second}} {
		switch {
		case *d.v == 0:
			*d.v = d.def
		case *d.v < 0:
			return nil, &core.OptionError{Field: d.field, Reason: "must not be negative (0: default " + d.def.String() + ")"}
		}
	}
	for _, n := range []struct {
		field string
		v     *int
		def   int
	}{{"MaxDeliver", &o.MaxDeliver, 5}, {"MaxBatch", &o.MaxBatch, 100}} {
		switch {
		case *n.v == 0:
			*n.v = n.def
		case *n.v < 0:
			return nil, &core.OptionError{Field: n.field, Reason: "must not be negative (0: default " + strconv.Itoa(n.def) + ")"}
		}
	}
	for _, s := range o.FilterSubjects {
		if s == "" {
			return nil, &core.OptionError{Field: "FilterSubjects", Reason: "must not hold an empty subject"}
		}
	}
	if o.DeadLetterSubject == nil {
		o.DeadLetterSubject = func(subject string) string { return "dlq." + subject }
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer[TTx]{js: js, stream: stream, durable: durable, proc: proc, o: o, log: log}, nil
}

// Stats returns the counters so far.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Applied: c.outcomes.Applied.Load(), Duplicate: c.outcomes.Duplicate.Load(),
		Stale: c.outcomes.Stale.Load(), Failed: c.failed.Load(), DeadLettered: c.deadLettered.Load(),
		Released: c.released.Load(), AckFailed: c.ackFailed.Load()}
}

// Config is the configuration Run creates or updates the durable consumer with.
func (c *Consumer[TTx]) Config() jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{Durable: c.durable, AckPolicy: jetstream.AckExplicitPolicy, AckWait: c.o.AckWait,
		MaxDeliver: -1, DeliverPolicy: jetstream.DeliverAllPolicy}
	switch len(c.o.FilterSubjects) {
	case 0:
	case 1:
		cfg.FilterSubject = c.o.FilterSubjects[0]
	default:
		cfg.FilterSubjects = append([]string(nil), c.o.FilterSubjects...)
	}
	return cfg
}

// Run creates or updates the durable consumer, then pulls and processes messages until ctx
// is cancelled, Naks what it pulled and did not process, and returns nil. It returns an error
// only when the durable consumer cannot be created or updated (no such stream, JetStream
// unavailable). A pull that fails is logged and tried again after RetryBackoff.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.stream, c.Config())
	if err != nil {
		return fmt.Errorf("nats: durable consumer %s of stream %s: %w", c.durable, c.stream, err)
	}
	for ctx.Err() == nil {
		batch, err := cons.Fetch(c.o.MaxBatch, jetstream.FetchMaxWait(c.o.FetchWait))
		if err != nil {
			c.log.Warn("nats_fetch_failed", "stream", c.stream, "durable", c.durable, "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(c.o.RetryBackoff):
			}
			continue
		}
		msgs := batch.Messages()
		for msg := range msgs {
			// This message and what else of the pull has arrived, up to MaxBatch: one inbox
			// transaction. Never wait for more.
			chunk := []jetstream.Msg{msg}
		more:
			for len(chunk) < c.o.MaxBatch {
				select {
				case m, ok := <-msgs:
					if !ok {
						break more
					}
					chunk = append(chunk, m)
				default:
					break more
				}
			}
			c.received.Add(uint64(len(chunk)))
			if ctx.Err() != nil {
				// Shutdown: hand them back unprocessed (see release).
				for _, m := range chunk {
					c.release(m)
				}
				continue
			}
			c.process(ctx, chunk)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			c.log.Warn("nats_fetch_failed", "stream", c.stream, "durable", c.durable, "error", err)
		}
	}
	return nil
}

// process applies msgs, pulled in this order: those that are not outbox messages are
// dead-lettered at once; the others go through the inbox in one transaction when there are
// several (core.Inbox.ProcessBatch) and are acknowledged once it committed. When that batch
// fails, they are tried one at a time (attempt), except that the message that failed the
// batch as poison is dead-lettered at once. Until every one of them is acknowledged, Nak'ed
// or terminated, the server is told every AckWait/2 that they are in progress.
func (c *Consumer[TTx]) process(ctx context.Context, msgs []jetstream.Msg) {
	stop := c.keepAlive(msgs)
	defer stop()
	ms := make([]jetstream.Msg, 0, len(msgs))
	ds := make([]*Delivery, 0, len(msgs))
	for _, msg := range msgs {
		d, err := c.delivery(msg)
		if err != nil {
			c.failed.Add(1) // not an outbox message: no attempt can get past it
			c.deadLetter(ctx, msg, d, err)
			continue
		}
		ms, ds = append(ms, msg), append(ds, d)
	}
	prior := make([]error, len(ds)) // the failed batch, when it was this message's poison
	if len(ds) > 1 {
		err := c.batch(ctx, ms, ds)
		switch consume.Decide(ctx, err) {
		case consume.Ack:
			return
		case consume.Release:
			for _, m := range ms {
				c.release(m) // interrupted by shutdown, not a failure of the messages
			}
			return
		case consume.DeadLetter:
			// No attempt can get past this message: dead-letter it without another.
			var be *core.BatchError
			if errors.As(err, &be) && be.Index >= 0 && be.Index < len(ds) {
				prior[be.Index] = be.Err
			}
		}
		c.failed.Add(1)
		c.log.Warn("nats_batch_failed", "stream", ds[0].Stream, "first_stream_seq", ds[0].StreamSeq,
			"messages", len(ds), "error", err)
	}
	for i := range ds {
		if ctx.Err() != nil {
			for _, m := range ms[i:] {
				c.release(m)
			}
			return
		}
		c.attempt(ctx, ms[i], ds[i], prior[i])
	}
}

// delivery decodes msg. On error, the Delivery has msg's coordinates (for its dead letter).
func (c *Consumer[TTx]) delivery(msg jetstream.Msg) (*Delivery, error) {
	d := &Delivery{Subject: msg.Subject(), Stream: c.stream, Attempt: 1}
	if meta, err := msg.Metadata(); err == nil {
		d.Stream, d.StreamSeq, d.Attempt = meta.Stream, meta.Sequence.Stream, int(meta.NumDelivered)
	}
	ev, created, err := decodeMsg(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		return d, err
	}
	d.Event, d.CreatedAt = ev, created
	return d, nil
}

// batch processes ds, the deliveries of ms, in one inbox transaction and, once it committed,
// acknowledges ms. A *core.BatchError names the message that failed it.
func (c *Consumer[TTx]) batch(ctx context.Context, ms []jetstream.Msg, ds []*Delivery) error {
	msgs := make([]core.InboxMessage, len(ds))
	for i, d := range ds {
		msgs[i] = c.message(d)
	}
	res, err := c.proc.ProcessBatch(ctx, ds, msgs)
	if err != nil {
		return err
	}
	for _, r := range res {
		c.outcomes.Add(r.Outcome)
	}
	// The inbox transaction committed: acknowledge, even while shutting down, several at a
	// time (each ack waits for the server's confirmation).
	sem := make(chan struct{}, maxConcurrentAcks)
	var wg sync.WaitGroup
	for i := range ms {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.ack(ctx, ms[i], ds[i])
		}()
	}
	wg.Wait()
	return nil
}

// maxConcurrentAcks bounds the acknowledgements of a batch that wait for the server at once.
const maxConcurrentAcks = 32

// ack acknowledges msg, whose inbox transaction committed (a double ack: the server confirms
// it), even while shutting down.
func (c *Consumer[TTx]) ack(ctx context.Context, msg jetstream.Msg, d *Delivery) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := msg.DoubleAck(actx); err != nil {
		// Delivered again after AckWait, and then a no-op in the inbox.
		c.ackFailed.Add(1)
		c.log.Warn("nats_ack_failed", "subject", d.Subject, "stream_seq", d.StreamSeq, "event_id", d.Event.ID, "error", err)
	}
}

// attempt makes one attempt at msg, of delivery d, in its own inbox transaction and acts on
// its outcome (consume.Decide). A non-nil prior is the failure of the batch this message
// failed as poison: it is dead-lettered without another attempt.
func (c *Consumer[TTx]) attempt(ctx context.Context, msg jetstream.Msg, d *Delivery, prior error) {
	err := prior
	if err == nil {
		var res core.InboxResult
		res, err = c.proc.Process(ctx, d, c.message(d))
		switch consume.Decide(ctx, err) {
		case consume.Ack:
			c.outcomes.Add(res.Outcome)
			c.ack(ctx, msg, d)
			return
		case consume.Release:
			c.release(msg) // interrupted by shutdown, not a failure of the message
			return
		}
		c.failed.Add(1)
	}
	act := consume.Decide(ctx, err)
	c.log.Error("nats_message_failed", "subject", d.Subject, "stream_seq", d.StreamSeq, "event_id", d.Event.ID,
		"attempt", d.Attempt, "action", act.String(), "error", err)
	if act == consume.DeadLetter || d.Attempt >= c.o.MaxDeliver {
		c.deadLetter(ctx, msg, d, err)
		return
	}
	if nerr := msg.NakWithDelay(c.o.RetryBackoff); nerr != nil {
		c.log.Warn("nats_nak_failed", "subject", d.Subject, "stream_seq", d.StreamSeq, "error", nerr)
	}
}

// release hands msg back on shutdown: a Nak delayed by FetchWait, past the end of this run's
// last pull (an immediate Nak would deliver it to that pull again), so it is delivered again
// within about FetchWait, to another instance of the durable consumer or to the next run.
func (c *Consumer[TTx]) release(msg jetstream.Msg) {
	_ = msg.NakWithDelay(c.o.FetchWait)
	c.released.Add(1)
}

// keepAlive tells the server every AckWait/2 that msgs are in progress, until stop is called
// (nats.go sends nothing for a message already acknowledged, Nak'ed or terminated).
func (c *Consumer[TTx]) keepAlive(msgs []jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(c.o.AckWait / 2)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress()
				}
			}
		}
	}()
	return func() { close(done); <-exited }
}

// message is d's inbox message.
func (c *Consumer[TTx]) message(d *Delivery) core.InboxMessage {
	return consume.Message(&d.Event, d.CreatedAt, c.o.Entity, fmt.Sprintf("nats:%s@%d", d.Stream, d.StreamSeq))
}

// deadLetter publishes msg to its dead-letter subject, then terminates it; when the publish
// fails, it Naks msg (the next delivery tries again).
func (c *Consumer[TTx]) deadLetter(ctx context.Context, msg jetstream.Msg, d *Delivery, cause error) {
	h := make(nats.Header, len(msg.Headers())+6)
	for k, vs := range msg.Headers() {
		h[k] = append([]string(nil), vs...)
	}
	h[HeaderMsgID] = []string{d.Stream + ":" + strconv.FormatUint(d.StreamSeq, 10)}
	h[HeaderDeadLetterSubject] = []string{d.Subject}
	h[HeaderDeadLetterStream] = []string{d.Stream}
	h[HeaderDeadLetterSequence] = []string{strconv.FormatUint(d.StreamSeq, 10)}
	h[HeaderDeadLetterAttempts] = []string{strconv.Itoa(d.Attempt)}
	h[HeaderDeadLetterError] = []string{headerValue(driver.TruncateError(cause.Error()))}
	dl := &nats.Msg{Subject: c.o.DeadLetterSubject(d.Subject), Data: msg.Data(), Header: h}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	_, err := c.js.PublishMsg(pctx, dl)
	cancel()
	if err != nil {
		c.log.Error("nats_dead_letter_failed", "subject", d.Subject, "stream_seq", d.StreamSeq,
			"dead_letter_subject", dl.Subject, "error", err)
		_ = msg.NakWithDelay(c.o.RetryBackoff)
		return
	}
	if err := msg.Term(); err != nil {
		// Delivered again: dead-lettered again, which the dead-letter stream deduplicates.
		c.log.Warn("nats_term_failed", "subject", d.Subject, "stream_seq", d.StreamSeq, "error", err)
	}
	c.deadLettered.Add(1)
	c.log.Error("nats_message_dead_lettered", "subject", d.Subject, "stream_seq", d.StreamSeq,
		"dead_letter_subject", dl.Subject, "attempts", d.Attempt, "error", cause)
}

// headerValue makes s fit on one header line.
func headerValue(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if ch == '\r' || ch == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
