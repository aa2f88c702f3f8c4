package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

// Delivery is one consumed stream entry, decoded.
type Delivery struct {
	// Event is the event the producer wrote, rebuilt from the entry's fields; Payload is the
	// payload field.
	Event core.Event
	// CreatedAt is the outbox CreatedAt (ce_time; zero when the entry has none).
	CreatedAt time.Time
	// Stream and ID locate the entry. Deliveries is how many times the group delivered it
	// (the delivery count of XPENDING), from 1.
	Stream     string
	ID         string
	Deliveries int64
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error.
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

// Dead-letter entry fields, added to the original entry's fields.
const (
	FieldDeadLetterStream     = "outbox.dlq.stream"     // the entry's stream
	FieldDeadLetterID         = "outbox.dlq.id"         // its entry ID
	FieldDeadLetterDeliveries = "outbox.dlq.deliveries" // its delivery count, decimal
	FieldDeadLetterError      = "outbox.dlq.error"      // the last error's text
)

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// Name is this consumer's name in the group (XREADGROUP GROUP group Name). Entries it read
	// and did not acknowledge stay in its pending list: a consumer that starts again under the
	// same name takes them up at once, others claim them after MinIdle. Give each process a
	// stable name of its own. Default: the host name and process ID ("host-1234").
	Name string
	// StartID is where a group that does not exist yet starts reading (XGROUP CREATE stream
	// group StartID MKSTREAM): "0" for the whole stream, "$" for entries added from then on.
	// An existing group keeps its position. Default "0".
	StartID string
	// Count is the most entries one read returns (XREADGROUP / XAUTOCLAIM COUNT). Default 100.
	Count int
	// MaxBatch is the most entries of one read processed in one inbox transaction
	// (core.Inbox.ProcessBatch), in stream order, and then acknowledged together with one
	// XACK after that transaction committed. When a batch fails, its entries are tried again
	// one at a time in the same delivery (each in its own transaction, with MaxDeliveries and
	// the dead-letter rule): the entry that failed the batch (a *core.BatchError names it) is
	// not tried again then, the batch was its attempt of this delivery. 1 gives every entry
	// its own transaction. Default 100 (a read of Count entries is cut into batches of
	// MaxBatch).
	MaxBatch int
	// Block is how long a read waits for new entries (XREADGROUP BLOCK); it also bounds how
	// long Run takes to return once its context ends. Default 1s.
	Block time.Duration
	// RetryBackoff is the wait after a failed attempt before the consumer reads its own pending
	// entries again (XREADGROUP ... 0): the failed entry and the ones after it, in stream
	// order. Default 200ms.
	RetryBackoff time.Duration
	// MinIdle is how long an entry of another consumer must have been pending, unacknowledged,
	// before this one claims it (XAUTOCLAIM ... MinIdle): the consumer is taken for dead then.
	// Keep it well above the time one attempt takes. Default 30s.
	MinIdle time.Duration
	// ClaimInterval is how often the consumer looks for entries to claim. Default MinIdle/2
	// (at most 10s).
	ClaimInterval time.Duration
	// MaxDeliveries: an entry whose attempt fails when it has been delivered this many times
	// or more (XPENDING's delivery count: reads by any consumer of the group, and claims) goes
	// to the dead-letter stream instead of being tried again. An entry no attempt can get past
	// goes there at once: one that is not an outbox entry (ErrUndecodable), or one the inbox
	// refuses for good (core.ErrInvalidMessage, core.ErrDigestMismatch,
	// core.ErrBeyondRetention). An entry that kills its consumer process before the attempt
	// ends is not dead-lettered by this rule (it is claimed again after MinIdle). Default 5.
	MaxDeliveries int64
	// DeadLetterStream names the dead-letter stream of a stream. Default: stream + ".dlq".
	DeadLetterStream func(stream string) string
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and Version;
	// version 0 disables the gate). Default core.EventEntity. NoVersionGate turns it off.
	// Each delivery reaches Inbox.Process as core.InboxMessageOf(&d.Event, d.CreatedAt,
	// "redis:<stream>@<entry ID>") with this gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// ConsumerStats counts what a Consumer did.
type ConsumerStats struct {
	Received     uint64 // entries read (new, own pending re-read, claimed)
	Claimed      uint64 // entries claimed from other consumers (XAUTOCLAIM)
	Applied      uint64 // inbox outcome Applied
	Duplicate    uint64 // inbox outcome Duplicate
	Stale        uint64 // inbox outcome Stale
	Failed       uint64 // failed attempts (undecodable, inbox or handler error)
	DeadLettered uint64 // entries written to the dead-letter stream and acknowledged
	Acked        uint64 // entries acknowledged (XACK) after their inbox transaction committed
	Trimmed      uint64 // pending entries gone from the stream (trimmed or deleted) before processing
}

// Consumer reads one stream in a consumer group and processes every entry through a
// core.Inbox.
//
// Guarantees:
//   - Entries are processed in stream order, up to MaxBatch entries of one read in one inbox
//     transaction with the handler (core.Inbox.ProcessBatch, all or nothing; a failed batch
//     is tried again one entry at a time): a redelivered entry is a no-op (Duplicate).
//   - An entry is acknowledged (XACK; one XACK for a batch) only after its inbox transaction
//     committed, or once it is in the dead-letter stream: at least once into the inbox,
//     exactly once in effect.
//   - A failed attempt leaves the entry pending and stops the read in hand: after
//     RetryBackoff the consumer reads its own pending entries again from the first ("0"), so
//     the entry and those after it are tried again in order. After MaxDeliveries deliveries it
//     goes to the dead-letter stream (with the fields FieldDeadLetter*) and is acknowledged;
//     an entry no attempt can get past goes there at once.
//   - Entries another consumer left pending for MinIdle (it died, or stalls) are claimed with
//     XAUTOCLAIM and processed here.
//   - On shutdown the entry in hand is not acknowledged: it stays pending, for this consumer
//     when it starts again under the same Name, or for a claim by another after MinIdle.
//
// Several consumers of one group share the stream's entries between them, so per-key order
// then holds only as far as the inbox's version gate enforces it.
type Consumer[TTx any] struct {
	client goredis.UniversalClient
	stream string
	group  string
	proc   *consume.Processor[TTx, Delivery]
	o      ConsumerOptions
	log    *slog.Logger

	outcomes                                                consume.Outcomes
	received, claimed, failed, deadLettered, acked, trimmed atomic.Uint64
}

// NewConsumer returns a consumer of stream in group (created with MKSTREAM when missing),
// named consumer in the inbox, that processes every entry with handler through inbox. opts
// may be nil. Bad arguments and options are a *core.OptionError.
func NewConsumer[TTx any](client goredis.UniversalClient, stream, group string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	switch {
	case client == nil:
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	case stream == "":
		return nil, &core.OptionError{Field: "stream", Reason: "required"}
	case group == "":
		return nil, &core.OptionError{Field: "group", Reason: "required"}
	}
	proc, err := consume.NewProcessor(inbox, consumer, handler, deliveryEvent, ErrHandlerPanic)
	if err != nil {
		return nil, err
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "consumer"
		}
		o.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if o.StartID == "" {
		o.StartID = "0"
	}
	switch {
	case o.Count == 0:
		o.Count = 100
	case o.Count < 0:
		return nil, &core.OptionError{Field: "Count", Reason: "must not be negative"}
	}
	switch {
	case o.MaxBatch == 0:
		o.MaxBatch = 100
	case o.MaxBatch < 0:
		return nil, &core.OptionError{Field: "MaxBatch", Reason: "must not be negative (0 means 100, 1 one entry per transaction)"}
	}
	switch {
	case o.Block == 0:
		o.Block = time.Second
	case o.Block < time.Millisecond:
		return nil, &core.OptionError{Field: "Block", Reason: "must be at least 1ms (0 means 1s)"}
	}
	switch {
	case o.RetryBackoff == 0:
		o.RetryBackoff = 200 * time.Millisecond
	case o.RetryBackoff < 0:
		return nil, &core.OptionError{Field: "RetryBackoff", Reason: "must not be negative"}
	}
	switch {
	case o.MinIdle == 0:
		o.MinIdle = 30 * time.Second
	case o.MinIdle < time.Millisecond:
		return nil, &core.OptionError{Field: "MinIdle", Reason: "must be at least 1ms (0 means 30s)"}
	}
	switch {
	case o.ClaimInterval == 0:
		o.ClaimInterval = min(o.MinIdle/2, 10*time.Second)
	case o.ClaimInterval < 0:
		return nil, &core.OptionError{Field: "ClaimInterval", Reason: "must not be negative"}
	}
	switch {
	case o.MaxDeliveries == 0:
		o.MaxDeliveries = 5
	case o.MaxDeliveries < 0:
		return nil, &core.OptionError{Field: "MaxDeliveries", Reason: "must not be negative"}
	}
	if o.DeadLetterStream == nil {
		o.DeadLetterStream = func(stream string) string { return stream + ".dlq" }
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer[TTx]{client: client, stream: stream, group: group, proc: proc, o: o, log: log}, nil
}

// Stats returns the counters so far.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Claimed: c.claimed.Load(), Applied: c.outcomes.Applied.Load(),
		Duplicate: c.outcomes.Duplicate.Load(), Stale: c.outcomes.Stale.Load(), Failed: c.failed.Load(),
		DeadLettered: c.deadLettered.Load(), Acked: c.acked.Load(), Trimmed: c.trimmed.Load()}
}

// Run creates the group when it is missing and consumes until ctx is cancelled, then returns
// nil; the entry in hand stays pending. It returns an error only when the group cannot be
// created (retrying while Redis is unreachable, until ctx ends). A Consumer runs once at a time.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	if err := c.createGroup(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// own: read this consumer's own pending entries next (first of all: a restart under the
	// same name). one: read only the first of them, the entry that just failed: every read of
	// a pending entry counts as a delivery, and the entries queued behind it must not use up
	// their MaxDeliveries while it is retried.
	own, one := true, false
	var lastClaim time.Time
	for ctx.Err() == nil {
		if own {
			n := c.o.Count
			if one {
				n = 1
			}
			entries, err := c.read(ctx, "0", n)
			if err != nil {
				c.pause(ctx, err, "redis_read_pending_failed")
				continue
			}
			switch {
			case !c.process(ctx, entries, false):
				one = true
				c.sleep(ctx, c.o.RetryBackoff)
			case len(entries) < n:
				own, one = false, false
			default:
				one = false
			}
			continue
		}
		if time.Since(lastClaim) >= c.o.ClaimInterval {
			lastClaim = time.Now()
			entries, err := c.autoClaim(ctx)
			if err != nil {
				c.pause(ctx, err, "redis_autoclaim_failed")
				continue
			}
			if len(entries) > 0 {
				c.claimed.Add(uint64(len(entries)))
				c.log.Info("redis_entries_claimed", "stream", c.stream, "group", c.group, "consumer", c.o.Name, "entries", len(entries))
				if !c.process(ctx, entries, false) {
					// What is left of them is in this consumer's pending list now.
					own, one = true, true
					c.sleep(ctx, c.o.RetryBackoff)
				}
				continue
			}
		}
		entries, err := c.read(ctx, ">", c.o.Count)
		if err != nil {
			c.pause(ctx, err, "redis_read_failed")
			continue
		}
		if !c.process(ctx, entries, true) {
			own, one = true, true
			c.sleep(ctx, c.o.RetryBackoff)
		}
	}
	return nil
}

func (c *Consumer[TTx]) createGroup(ctx context.Context) error {
	for {
		err := c.client.XGroupCreateMkStream(ctx, c.stream, c.group, c.o.StartID).Err()
		if err == nil || strings.HasPrefix(err.Error(), "BUSYGROUP") {
			return nil
		}
		var re goredis.Error
		if errors.As(err, &re) && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			return fmt.Errorf("redis: XGROUP CREATE %s %s: %w", c.stream, c.group, err)
		}
		c.pause(ctx, err, "redis_group_create_failed")
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// pause logs a failed Redis call and waits a second (or until ctx ends).
func (c *Consumer[TTx]) pause(ctx context.Context, err error, msg string) {
	if ctx.Err() != nil {
		return
	}
	c.log.Warn(msg, "stream", c.stream, "group", c.group, "consumer", c.o.Name, "error", err)
	c.sleep(ctx, time.Second)
}

func (c *Consumer[TTx]) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// read reads from id: ">" waits up to Block for new entries; "0" returns this consumer's own
// pending entries without waiting.
func (c *Consumer[TTx]) read(ctx context.Context, id string, count int) ([]goredis.XMessage, error) {
	block := c.o.Block
	if id != ">" {
		block = -1 // no BLOCK argument: BLOCK 0 would wait forever
	}
	res, err := c.client.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: c.group, Consumer: c.o.Name,
		Streams: []string{c.stream, id}, Count: int64(count), Block: block}).Result()
	if errors.Is(err, goredis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []goredis.XMessage
	for _, s := range res {
		out = append(out, s.Messages...)
	}
	return out, nil
}

// autoClaim claims up to Count entries pending longer than MinIdle with other consumers.
func (c *Consumer[TTx]) autoClaim(ctx context.Context) ([]goredis.XMessage, error) {
	var out []goredis.XMessage
	start := "0-0"
	for len(out) < c.o.Count {
		msgs, next, err := c.client.XAutoClaim(ctx, &goredis.XAutoClaimArgs{Stream: c.stream, Group: c.group,
			MinIdle: c.o.MinIdle, Start: start, Count: int64(c.o.Count - len(out)), Consumer: c.o.Name}).Result()
		if err != nil {
			return out, err
		}
		out = append(out, msgs...)
		if next == "0-0" || next == "" {
			break
		}
		start = next
	}
	return out, nil
}

// deliveries returns the delivery count of each of entries (read from the pending list with
// XPENDING); fresh entries have been delivered once.
func (c *Consumer[TTx]) deliveries(ctx context.Context, entries []goredis.XMessage, fresh bool) (map[string]int64, error) {
	counts := make(map[string]int64, len(entries))
	if fresh || len(entries) == 0 {
		for _, e := range entries {
			counts[e.ID] = 1
		}
		return counts, nil
	}
	pend, err := c.client.XPendingExt(ctx, &goredis.XPendingExtArgs{Stream: c.stream, Group: c.group,
		Start: entries[0].ID, End: entries[len(entries)-1].ID, Count: int64(len(entries)), Consumer: c.o.Name}).Result()
	if err != nil {
		return nil, err
	}
	for _, p := range pend {
		counts[p.ID] = p.RetryCount
	}
	return counts, nil
}

// process handles entries in order and reports whether every one of them is done
// (acknowledged, or left pending only because its XACK failed); on false the caller backs off
// and reads its own pending entries again.
func (c *Consumer[TTx]) process(ctx context.Context, entries []goredis.XMessage, fresh bool) bool {
	if len(entries) == 0 {
		return true
	}
	c.received.Add(uint64(len(entries)))
	counts, err := c.deliveries(ctx, entries, fresh)
	if err != nil {
		c.pause(ctx, err, "redis_xpending_failed")
		return false
	}
	for len(entries) > 0 {
		if ctx.Err() != nil {
			return false
		}
		n := min(len(entries), c.o.MaxBatch)
		if !c.entries(ctx, entries[:n], counts) {
			return false
		}
		entries = entries[n:]
	}
	return true
}

// entries handles batch (at most MaxBatch entries, in stream order) in one inbox transaction
// when it holds several, then one at a time when that fails (entry), and reports whether the
// consumer may go on after it.
func (c *Consumer[TTx]) entries(ctx context.Context, batch []goredis.XMessage, counts map[string]int64) bool {
	var prior []error // the failed batch attempt of an entry
	if len(batch) > 1 {
		err := c.batch(ctx, batch, counts)
		switch consume.Decide(ctx, err) {
		case consume.Ack:
			return true
		case consume.Release:
			return false // shutdown: the entries stay pending
		}
		prior = make([]error, len(batch))
		var be *core.BatchError
		if errors.As(err, &be) && be.Index >= 0 && be.Index < len(batch) {
			prior[be.Index] = be.Err // the batch was this entry's attempt of this delivery
		}
		// A trimmed or undecodable entry stops the batch before the inbox: the one-at-a-time
		// pass acknowledges or dead-letters it, and the batch is no failed attempt.
		if !errors.Is(err, errNotBatchable) {
			c.failed.Add(1)
			c.log.Warn("redis_batch_failed", "stream", c.stream, "group", c.group, "first_id", batch[0].ID,
				"entries", len(batch), "error", err)
		}
	}
	for i := range batch {
		if ctx.Err() != nil {
			return false
		}
		var p error
		if prior != nil {
			p = prior[i]
		}
		if !c.entry(ctx, &batch[i], counts[batch[i].ID], p) {
			return false
		}
	}
	return true
}

// errNotBatchable stops a batch that holds an entry gone from the stream or one that is not
// an outbox entry.
var errNotBatchable = errors.New("redis: trimmed or undecodable entry in the batch")

// batch processes entries in one inbox transaction (core.Inbox.ProcessBatch) and, once it
// committed, acknowledges them all with one XACK. A *core.BatchError names the entry that
// failed it.
func (c *Consumer[TTx]) batch(ctx context.Context, entries []goredis.XMessage, counts map[string]int64) error {
	ds := make([]*Delivery, len(entries))
	msgs := make([]core.InboxMessage, len(entries))
	ids := make([]string, len(entries))
	for i := range entries {
		e := &entries[i]
		if len(e.Values) == 0 {
			return errNotBatchable
		}
		ev, created, err := decodeEntry(c.stream, e.ID, e.Values)
		if err != nil {
			return errNotBatchable
		}
		ds[i] = &Delivery{Event: ev, CreatedAt: created, Stream: c.stream, ID: e.ID, Deliveries: max(counts[e.ID], 1)}
		msgs[i] = consume.Message(&ds[i].Event, created, c.o.Entity, "redis:"+c.stream+"@"+e.ID)
		ids[i] = e.ID
	}
	res, err := c.proc.ProcessBatch(ctx, ds, msgs)
	if err != nil {
		return err
	}
	for _, r := range res {
		c.outcomes.Add(r.Outcome)
	}
	c.ack(ctx, ids...)
	return nil
}

// entry handles one entry and reports whether the consumer may go on to the next. prior, when
// not nil, is the error of the failed batch that was this entry's attempt of this delivery:
// it is not tried again now.
func (c *Consumer[TTx]) entry(ctx context.Context, e *goredis.XMessage, deliveries int64, prior error) bool {
	if len(e.Values) == 0 {
		// Read from a pending list but gone from the stream (MAXLEN trimming, XDEL): nothing
		// left to process.
		c.trimmed.Add(1)
		c.log.Error("redis_pending_entry_gone", "stream", c.stream, "group", c.group, "id", e.ID)
		c.ack(ctx, e.ID)
		return true
	}
	if deliveries < 1 {
		deliveries = 1 // not in the pending list any more (another consumer claimed it): at most a duplicate
	}
	ev, created, err := decodeEntry(c.stream, e.ID, e.Values)
	if err != nil {
		c.failed.Add(1)
		return c.deadLetter(ctx, e, deliveries, err)
	}
	act, err := consume.Retry, prior
	if prior == nil {
		d := &Delivery{Event: ev, CreatedAt: created, Stream: c.stream, ID: e.ID, Deliveries: deliveries}
		var res core.InboxResult
		res, err = c.proc.Process(ctx, d, consume.Message(&d.Event, d.CreatedAt, c.o.Entity, "redis:"+c.stream+"@"+e.ID))
		act = consume.Decide(ctx, err)
		switch act {
		case consume.Ack:
			c.outcomes.Add(res.Outcome)
			c.ack(ctx, e.ID)
			return true
		case consume.Release:
			return false // shutdown: the entry stays pending
		}
		c.failed.Add(1)
	} else if consume.IsPoison(prior) {
		act = consume.DeadLetter
	}
	c.log.Error("redis_entry_failed", "stream", c.stream, "id", e.ID, "event_id", ev.ID,
		"deliveries", deliveries, "action", act.String(), "error", err)
	if act == consume.DeadLetter {
		return c.deadLetter(ctx, e, deliveries, err)
	}
	if deliveries >= c.o.MaxDeliveries {
		return c.deadLetter(ctx, e, deliveries, fmt.Errorf("%w (%d): %w", ErrMaxDeliveries, deliveries, err))
	}
	return false
}

// ack acknowledges ids with one XACK. Their inbox transaction committed already: a failed
// XACK leaves the entries pending, and their next delivery is a Duplicate that is acknowledged
// then.
func (c *Consumer[TTx]) ack(ctx context.Context, ids ...string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.client.XAck(actx, c.stream, c.group, ids...).Err(); err != nil {
		c.log.Warn("redis_xack_failed", "stream", c.stream, "group", c.group, "first_id", ids[0], "entries", len(ids), "error", err)
		return
	}
	c.acked.Add(uint64(len(ids)))
}

// deadLetter appends e to the dead-letter stream, then acknowledges it. When the XADD fails,
// the entry stays pending and the consumer tries again after RetryBackoff.
func (c *Consumer[TTx]) deadLetter(ctx context.Context, e *goredis.XMessage, deliveries int64, cause error) bool {
	dlq := c.o.DeadLetterStream(c.stream)
	fields := make([]any, 0, 2*len(e.Values)+8)
	for k, v := range e.Values {
		fields = append(fields, k, v)
	}
	fields = append(fields, FieldDeadLetterStream, c.stream, FieldDeadLetterID, e.ID,
		FieldDeadLetterDeliveries, strconv.FormatInt(deliveries, 10),
		FieldDeadLetterError, driver.TruncateError(cause.Error()))
	if err := c.client.XAdd(ctx, &goredis.XAddArgs{Stream: dlq, Values: fields}).Err(); err != nil {
		c.log.Error("redis_dead_letter_failed", "stream", c.stream, "id", e.ID, "dead_letter_stream", dlq, "error", err)
		return false
	}
	c.deadLettered.Add(1)
	c.log.Error("redis_entry_dead_lettered", "stream", c.stream, "id", e.ID, "dead_letter_stream", dlq,
		"deliveries", deliveries, "error", cause)
	c.ack(ctx, e.ID)
	return true
}

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
