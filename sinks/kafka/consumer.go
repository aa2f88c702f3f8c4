package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
)

// Delivery is one consumed record, decoded.
type Delivery struct {
	// Event is the event the producer wrote, rebuilt from the record's headers; Payload is the
	// record value.
	Event core.Event
	// CreatedAt is the outbox CreatedAt (ce_time; zero when the record has none).
	CreatedAt time.Time
	// Topic, Partition and Offset locate the record. Attempt counts this process's attempts at
	// it, from 1.
	Topic     string
	Partition int32
	Offset    int64
	Attempt   int
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox.
type Handler[TTx any] func(ctx context.Context, tx TTx, d *Delivery) error

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// ClientOptions build the consumer's kgo.Client: kgo.SeedBrokers, TLS (kgo.DialTLSConfig),
	// SASL (kgo.SASL), kgo.ClientID, ... The consumer adds its group options (ConsumerGroup,
	// ConsumeTopics, DisableAutoCommit, BlockRebalanceOnPoll and the rebalance callbacks);
	// do not pass those. Default none: franz-go's defaults (a broker at localhost:9092).
	ClientOptions []kgo.Opt
	// MaxPollRecords is the most records processed between two offset commits. Default 500.
	MaxPollRecords int
	// MaxAttempts is how many times a record is tried before it goes to the dead-letter topic.
	// Default 5.
	MaxAttempts int
	// RetryBackoff is the wait between two attempts at a record. Default 200ms.
	RetryBackoff time.Duration
	// DeadLetterTopic names the dead-letter topic of a topic. Default: topic + ".dlt". Create
	// it beforehand (or build the client with kgo.AllowAutoTopicCreation): while it cannot be
	// written, the partition does not move past the record.
	DeadLetterTopic func(topic string) string
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and
	// Version; version 0 disables the gate). Default: AggregateType + "/" + AggregateID and
	// AggregateVersion.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(*core.Event) (string, int64) { return "", 0 }

// Dead-letter record headers, added to the original record's key, value and headers.
const (
	HeaderDeadLetterTopic     = "outbox.dlt.topic"     // the record's topic
	HeaderDeadLetterPartition = "outbox.dlt.partition" // its partition, decimal
	HeaderDeadLetterOffset    = "outbox.dlt.offset"    // its offset, decimal
	HeaderDeadLetterAttempts  = "outbox.dlt.attempts"  // attempts made, decimal
	HeaderDeadLetterError     = "outbox.dlt.error"     // the last error's text
)

// ConsumerStats counts what a Consumer did.
type ConsumerStats struct {
	Received     uint64 // records polled
	Applied      uint64 // inbox outcome Applied
	Duplicate    uint64 // inbox outcome Duplicate
	Stale        uint64 // inbox outcome Stale
	Failed       uint64 // failed attempts (undecodable, inbox or handler error)
	DeadLettered uint64 // records written to the dead-letter topic
	Abandoned    uint64 // polled records left unprocessed (shutdown, rebalance, dead-letter topic unreachable): consumed again
	Commits      uint64 // offset commits that succeeded
}

// Consumer reads topics in a consumer group and processes every record through a core.Inbox.
//
// Guarantees:
//   - Records of one partition are processed one after another in offset order; different
//     partitions of one poll run in parallel. Each record's handler runs in the inbox's
//     transaction (core.Inbox.Process): a redelivered record is a no-op (Duplicate).
//   - Offsets are committed only after the inbox transactions of the records they cover
//     committed, and never past a record that was neither processed nor dead-lettered: at
//     least once into the inbox, exactly once in effect.
//   - Rebalances wait for the current poll (kgo.BlockRebalanceOnPoll): the records of a revoked
//     partition have finished and their offsets are committed before the revoke completes.
//     When a rebalance is waiting, no new attempt starts: records not yet processed are
//     abandoned (not committed) and the partition's next owner consumes them.
//   - A record whose processing fails is tried MaxAttempts times, RetryBackoff apart (attempts
//     are counted by this process), then written to its dead-letter topic with the headers
//     HeaderDeadLetter*, and its offset is passed; a record that is not a decodable outbox
//     record goes there at once. While the dead-letter write fails the partition does not
//     move past the record.
//   - Pause stops fetching (records already polled are finished); Resume restarts it.
type Consumer[TTx any] struct {
	group, name string
	topics      []string
	inbox       *core.Inbox[TTx]
	handler     Handler[TTx]
	o           ConsumerOptions
	log         *slog.Logger

	mu     sync.Mutex
	client *kgo.Client
	paused bool

	rebalancing atomic.Bool

	received, applied, duplicate, stale, failed, deadLettered, abandoned, commits atomic.Uint64
}

// NewConsumer returns a consumer in group of topics, named consumer in the inbox, that
// processes every record with handler through inbox. opts may be nil.
func NewConsumer[TTx any](group string, topics []string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	switch {
	case group == "":
		return nil, &core.OptionError{Field: "group", Reason: "required"}
	case len(topics) == 0:
		return nil, &core.OptionError{Field: "topics", Reason: "required"}
	case inbox == nil:
		return nil, &core.OptionError{Field: "inbox", Reason: "must not be nil"}
	case consumer == "":
		return nil, &core.OptionError{Field: "consumer", Reason: "required"}
	case handler == nil:
		return nil, &core.OptionError{Field: "handler", Reason: "must not be nil"}
	}
	var o ConsumerOptions
	if opts != nil {
		o = *opts
	}
	switch {
	case o.MaxPollRecords == 0:
		o.MaxPollRecords = 500
	case o.MaxPollRecords < 0:
		return nil, &core.OptionError{Field: "MaxPollRecords", Reason: "must not be negative"}
	}
	switch {
	case o.MaxAttempts == 0:
		o.MaxAttempts = 5
	case o.MaxAttempts < 0:
		return nil, &core.OptionError{Field: "MaxAttempts", Reason: "must not be negative"}
	}
	switch {
	case o.RetryBackoff == 0:
		o.RetryBackoff = 200 * time.Millisecond
	case o.RetryBackoff < 0:
		return nil, &core.OptionError{Field: "RetryBackoff", Reason: "must not be negative"}
	}
	if o.DeadLetterTopic == nil {
		o.DeadLetterTopic = func(topic string) string { return topic + ".dlt" }
	}
	if o.Entity == nil {
		o.Entity = func(ev *core.Event) (string, int64) {
			return ev.AggregateType + "/" + ev.AggregateID, ev.AggregateVersion
		}
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer[TTx]{group: group, name: consumer, topics: append([]string(nil), topics...),
		inbox: inbox, handler: handler, o: o, log: log}, nil
}

// Stats returns the counters so far.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Applied: c.applied.Load(), Duplicate: c.duplicate.Load(),
		Stale: c.stale.Load(), Failed: c.failed.Load(), DeadLettered: c.deadLettered.Load(),
		Abandoned: c.abandoned.Load(), Commits: c.commits.Load()}
}

// Pause stops fetching new records (for backpressure); the records already polled are
// processed. It may be called before or during Run.
func (c *Consumer[TTx]) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = true
	if c.client != nil {
		c.client.PauseFetchTopics(c.topics...)
	}
}

// Resume undoes Pause.
func (c *Consumer[TTx]) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = false
	if c.client != nil {
		c.client.ResumeFetchTopics(c.topics...)
	}
}

// Run joins the group and consumes until ctx is cancelled, then commits what it processed,
// leaves the group and returns nil. It returns an error only when the client cannot be built.
// A Consumer runs once.
func (c *Consumer[TTx]) Run(ctx context.Context) error {
	opts := append(append([]kgo.Opt(nil), c.o.ClientOptions...),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.OnPartitionsCallbackBlocked(func(context.Context, *kgo.Client) { c.rebalancing.Store(true) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			c.log.Info("kafka_partitions_revoked", "group", c.group, "partitions", lost)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
			c.log.Warn("kafka_partitions_lost", "group", c.group, "partitions", lost)
		}),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka: consumer client: %w", err)
	}
	c.mu.Lock()
	c.client = cl
	if c.paused {
		cl.PauseFetchTopics(c.topics...)
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.client = nil
		c.mu.Unlock()
		cl.CloseAllowingRebalance()
	}()
	for ctx.Err() == nil {
		fs := cl.PollRecords(ctx, c.o.MaxPollRecords)
		fs.EachError(func(topic string, p int32, err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				c.log.Warn("kafka_fetch_failed", "topic", topic, "partition", p, "error", err)
			}
		})
		c.rebalancing.Store(false)
		c.round(ctx, cl, fs)
		cl.AllowRebalance()
	}
	return nil
}

// round processes one poll: every partition in parallel, then one offset commit of what was
// done and a rewind of what was not.
func (c *Consumer[TTx]) round(ctx context.Context, cl *kgo.Client, fs kgo.Fetches) {
	type part struct {
		recs []*kgo.Record
		done int
	}
	var parts []*part
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) > 0 {
			parts = append(parts, &part{recs: p.Records})
		}
	})
	if len(parts) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, p := range parts {
		c.received.Add(uint64(len(p.recs)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.done = c.partition(ctx, cl, p.recs)
		}()
	}
	wg.Wait()
	var commit []*kgo.Record
	rewind := map[string]map[int32]kgo.EpochOffset{}
	for _, p := range parts {
		if p.done > 0 {
			commit = append(commit, p.recs[p.done-1])
		}
		if p.done < len(p.recs) {
			r := p.recs[p.done]
			if rewind[r.Topic] == nil {
				rewind[r.Topic] = map[int32]kgo.EpochOffset{}
			}
			rewind[r.Topic][r.Partition] = kgo.EpochOffset{Epoch: r.LeaderEpoch, Offset: r.Offset}
			c.abandoned.Add(uint64(len(p.recs) - p.done))
		}
	}
	if len(commit) > 0 {
		// The inbox transactions committed: record that even when ctx is being cancelled.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := cl.CommitRecords(cctx, commit...)
		cancel()
		if err != nil {
			// Not committed: the records are consumed again, and the inbox makes that a no-op.
			c.log.Warn("kafka_commit_failed", "group", c.group, "error", err)
		} else {
			c.commits.Add(1)
		}
	}
	if len(rewind) > 0 {
		cl.SetOffsets(rewind)
	}
}

// partition processes recs (one partition, in offset order) and returns how many are done
// (processed or dead-lettered), a prefix of recs.
func (c *Consumer[TTx]) partition(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) int {
	for i, r := range recs {
		if ctx.Err() != nil || c.rebalancing.Load() {
			return i
		}
		if !c.record(ctx, cl, r) {
			return i
		}
	}
	return len(recs)
}

// record tries r up to MaxAttempts times, then dead-letters it. It reports whether r is done.
func (c *Consumer[TTx]) record(ctx context.Context, cl *kgo.Client, r *kgo.Record) bool {
	ev, created, err := decodeRecord(r)
	if err != nil {
		c.failed.Add(1)
		return c.deadLetter(ctx, cl, r, 1, err)
	}
	attempts := 0
	for attempts < c.o.MaxAttempts {
		if attempts > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-time.After(c.o.RetryBackoff):
			}
			if c.rebalancing.Load() {
				return false
			}
		}
		attempts++
		d := &Delivery{Event: ev, CreatedAt: created, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Attempt: attempts}
		if err = c.process(ctx, d); err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false // interrupted by shutdown, not a failure of the record
		}
		c.failed.Add(1)
		c.log.Error("kafka_record_failed", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
			"event_id", ev.ID, "attempt", attempts, "error", err)
	}
	return c.deadLetter(ctx, cl, r, attempts, err)
}

func (c *Consumer[TTx]) process(ctx context.Context, d *Delivery) (err error) {
	entity, version := c.o.Entity(&d.Event)
	msg := core.InboxMessage{EventID: d.Event.ID, Payload: d.Event.Payload, Entity: entity, Version: version,
		OccurredAt: d.CreatedAt, SourcePosition: fmt.Sprintf("kafka:%s/%d@%d", d.Topic, d.Partition, d.Offset)}
	res, err := c.inbox.Process(ctx, c.name, msg, func(ctx context.Context, tx TTx, _ core.InboxMessage) (herr error) {
		defer func() {
			if p := recover(); p != nil {
				herr = fmt.Errorf("%w: %v", ErrHandlerPanic, p)
			}
		}()
		return c.handler(ctx, tx, d)
	})
	if err != nil {
		return err
	}
	switch res.Outcome {
	case core.Applied:
		c.applied.Add(1)
	case core.Duplicate:
		c.duplicate.Add(1)
	case core.Stale:
		c.stale.Add(1)
	}
	return nil
}

func (c *Consumer[TTx]) deadLetter(ctx context.Context, cl *kgo.Client, r *kgo.Record, attempts int, cause error) bool {
	dlt := &kgo.Record{Topic: c.o.DeadLetterTopic(r.Topic), Key: r.Key, Value: r.Value,
		Headers: append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderDeadLetterAttempts, Value: []byte(strconv.Itoa(attempts))},
			kgo.RecordHeader{Key: HeaderDeadLetterError, Value: []byte(core.TruncateError(cause.Error()))},
		)}
	if err := cl.ProduceSync(ctx, dlt).FirstErr(); err != nil {
		c.log.Error("kafka_dead_letter_failed", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
			"dead_letter_topic", dlt.Topic, "error", err)
		return false
	}
	c.deadLettered.Add(1)
	c.log.Error("kafka_record_dead_lettered", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"dead_letter_topic", dlt.Topic, "attempts", attempts, "error", cause)
	return true
}
