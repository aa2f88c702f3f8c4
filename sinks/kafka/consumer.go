package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/consume"
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

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error. It is the handler type of sqs.Handler
// too, over the SQS consumer's Delivery.
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// ConsumerOptions configures a Consumer. The zero value (or nil) is ready to use.
type ConsumerOptions struct {
	// ClientOptions build the consumer's kgo.Client: kgo.SeedBrokers, TLS (kgo.DialTLSConfig),
	// SASL (kgo.SASL), kgo.ClientID, ... The consumer adds its group options (ConsumerGroup,
	// ConsumeTopics, DisableAutoCommit, BlockRebalanceOnPoll and the rebalance callbacks);
	// do not pass those. Default none: franz-go's defaults (a broker at localhost:9092).
	// Liveness comes from the client: franz-go deadlines every request at
	// kgo.RequestTimeoutOverhead (default 10s) beyond the request's own timeout (a fetch's
	// kgo.FetchMaxWait, default 5s; a JoinGroup's kgo.RebalanceTimeout, default 60s), then
	// kills the connection and dials again, so a consumer whose brokers go silent with their
	// sockets open resumes by itself once they answer (within 15s for a fetch with the
	// defaults). Keep that deadline: do not raise it far.
	ClientOptions []kgo.Opt
	// MaxPollRecords is the most records one poll hands to the partition workers. Default 500.
	MaxPollRecords int
	// MaxBufferedRecords is the most records queued for one partition's worker: beyond it the
	// partition's fetching is paused until half of them are processed (backpressure).
	// Default 2 × MaxPollRecords.
	MaxBufferedRecords int
	// CommitInterval is how often the offsets of processed records are committed (also on
	// revoke and shutdown). A record processed but not committed yet is consumed again after
	// a crash and is then a no-op in the inbox. Default 500ms.
	CommitInterval time.Duration
	// MaxBatch is the most queued records of one partition processed in one inbox transaction
	// (core.Inbox.ProcessBatch), in offset order; a worker takes what is queued, up to MaxBatch,
	// and never waits for more. When a batch fails, its records are tried again one at a time
	// (each in its own transaction, with MaxAttempts and the dead-letter rule; the batch counts
	// as the first attempt of the record that failed it). 1 gives every record its own
	// transaction. Default 100.
	MaxBatch int
	// MaxAttempts is how many times a record is tried before it goes to the dead-letter topic.
	// A record no attempt can get past goes there at once: one that is not an outbox record
	// (ErrUndecodable), or one the inbox refuses for good (core.ErrInvalidMessage,
	// core.ErrDigestMismatch: its event ID was recorded with another payload,
	// core.ErrBeyondRetention). Default 5.
	MaxAttempts int
	// RetryBackoff is the wait between two attempts at a record. Default 200ms.
	RetryBackoff time.Duration
	// DeadLetterTopic names the dead-letter topic of a topic. Default: topic + ".dlt". Create
	// it beforehand (or build the client with kgo.AllowAutoTopicCreation): while it cannot be
	// written, the partition does not move past the record.
	DeadLetterTopic func(topic string) string
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and
	// Version; version 0 disables the gate). Default core.EventEntity: AggregateType + "/" +
	// AggregateID and AggregateVersion, no gate for an event without an AggregateVersion (the SQS consumer's
	// default too). NoVersionGate turns the gate off.
	// Each delivery reaches Inbox.Process as core.InboxMessageOf(&d.Event, d.CreatedAt,
	// "kafka:<topic>/<partition>@<offset>") with this gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// MaxDecompressedBytes bounds what one fetched batch may decompress to (franz-go's
	// kgo.MaxDecompressBatchBytes, whose own default is 1 GiB): a batch beyond it is a
	// decompression bomb or a limit set too low, and Run stops with a *DecompressError
	// (ErrDecompressedTooLarge) before anything of the batch is applied. Default
	// DefaultMaxDecompressedBytes (64 MiB); at least the largest batch the producers write
	// uncompressed (their max.message.bytes / kgo.ProducerBatchMaxBytes).
	MaxDecompressedBytes int
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// DefaultMaxDecompressedBytes is ConsumerOptions.MaxDecompressedBytes's default: 64 MiB, 64
// times the default largest batch of a producer (1 MB).
const DefaultMaxDecompressedBytes = 64 << 20

// NoVersionGate is a ConsumerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

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
	Paused       uint64 // times a partition's fetching was paused because its worker fell behind
}

// Consumer reads topics in a consumer group and processes every record through a core.Inbox.
//
// Guarantees:
//   - Each partition has a worker that processes its records one after another in offset
//     order; partitions are processed in parallel. Each record's handler runs in the inbox's
//     transaction (core.Inbox.ProcessBatch over up to MaxBatch queued records, all or
//     nothing; a failed batch is tried again one record at a time): a redelivered record is a
//     no-op (Duplicate).
//   - Offsets are committed (every CommitInterval, on revoke and on shutdown) only up to the
//     last record whose inbox transaction committed or that was dead-lettered: at least once
//     into the inbox, exactly once in effect.
//   - On a revoke, the workers of the revoked partitions finish the attempt in hand (no
//     further retry), abandon their queue and commit before the revoke completes, so the
//     next owner starts right after the last record processed here. Lost partitions (session expired) are abandoned
//     without a commit.
//   - A record whose processing fails is tried MaxAttempts times, RetryBackoff apart (attempts
//     are counted by this process), then written to its dead-letter topic with the headers
//     HeaderDeadLetter*, and its offset is passed; a record no attempt can get past goes there
//     at once: one that is not a decodable outbox record, or one the inbox refuses for good
//     (an invalid message, an event ID recorded with another payload, a message older than the
//     retention horizon). While the dead-letter write fails, the partition is rewound
//     to the record and does not move past it.
//   - Backpressure: a partition whose worker has more than MaxBufferedRecords queued is paused
//     (no fetching) until half of them are processed. Pause stops fetching every topic (the
//     queued records are still processed); Resume restarts it.
type Consumer[TTx any] struct {
	group  string
	topics []string
	proc   *consume.Processor[TTx, Delivery]
	o      ConsumerOptions
	log    *slog.Logger

	mu     sync.Mutex
	client *kgo.Client
	paused bool

	outcomes                                                         consume.Outcomes // applied, duplicate, stale
	received, failed, deadLettered, abandoned, commits, backpressure atomic.Uint64
}

// NewConsumer returns a consumer in group of topics, named consumer in the inbox, that
// processes every record with handler through inbox. opts may be nil. consumer must pass
// driver.CheckConsumer (the rule Inbox.Process applies), otherwise NewConsumer returns a
// *core.OptionError.
func NewConsumer[TTx any](group string, topics []string, inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *ConsumerOptions) (*Consumer[TTx], error) {
	switch {
	case group == "":
		return nil, &core.OptionError{Field: "group", Reason: "required"}
	case len(topics) == 0:
		return nil, &core.OptionError{Field: "topics", Reason: "required"}
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
	case o.MaxPollRecords == 0:
		o.MaxPollRecords = 500
	case o.MaxPollRecords < 0:
		return nil, &core.OptionError{Field: "MaxPollRecords", Reason: "must not be negative"}
	}
	switch {
	case o.MaxBufferedRecords == 0:
		o.MaxBufferedRecords = 2 * o.MaxPollRecords
	case o.MaxBufferedRecords < 0:
		return nil, &core.OptionError{Field: "MaxBufferedRecords", Reason: "must not be negative"}
	}
	switch {
	case o.CommitInterval == 0:
		o.CommitInterval = 500 * time.Millisecond
	case o.CommitInterval < 0:
		return nil, &core.OptionError{Field: "CommitInterval", Reason: "must not be negative"}
	}
	switch {
	case o.MaxBatch == 0:
		o.MaxBatch = 100
	case o.MaxBatch < 0:
		return nil, &core.OptionError{Field: "MaxBatch", Reason: "must not be negative"}
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
	switch {
	case o.MaxDecompressedBytes == 0:
		o.MaxDecompressedBytes = DefaultMaxDecompressedBytes
	case o.MaxDecompressedBytes < 0:
		return nil, &core.OptionError{Field: "MaxDecompressedBytes", Reason: fmt.Sprintf("must not be negative (0: the default %d)", DefaultMaxDecompressedBytes)}
	}
	if o.DeadLetterTopic == nil {
		o.DeadLetterTopic = func(topic string) string { return topic + ".dlt" }
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Consumer[TTx]{group: group, topics: append([]string(nil), topics...),
		proc: proc, o: o, log: log}, nil
}

// Stats returns the counters so far.
func (c *Consumer[TTx]) Stats() ConsumerStats {
	return ConsumerStats{Received: c.received.Load(), Applied: c.outcomes.Applied.Load(), Duplicate: c.outcomes.Duplicate.Load(),
		Stale: c.outcomes.Stale.Load(), Failed: c.failed.Load(), DeadLettered: c.deadLettered.Load(),
		Abandoned: c.abandoned.Load(), Commits: c.commits.Load(), Paused: c.backpressure.Load()}
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
	r := &run[TTx]{c: c, ctx: ctx, workers: map[tp]*worker{}}
	opts := append(append([]kgo.Opt(nil), c.o.ClientOptions...),
		kgo.ConsumerGroup(c.group),
		kgo.ConsumeTopics(c.topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.MaxDecompressBatchBytes(c.o.MaxDecompressedBytes),
		kgo.OnPartitionsRevoked(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			c.log.Info("kafka_partitions_revoked", "group", c.group, "partitions", ps)
			r.release(cl, ps, true)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, ps map[string][]int32) {
			c.log.Warn("kafka_partitions_lost", "group", c.group, "partitions", ps)
			r.release(cl, ps, false)
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
	lastCommit := time.Now()
	for {
		pctx, cancel := context.WithTimeout(ctx, c.o.CommitInterval)
		fs := cl.PollRecords(pctx, c.o.MaxPollRecords)
		cancel()
		if ctx.Err() != nil {
			// Shutdown, inside the poll window (no revoke can run): the workers finish or
			// abandon their record (ctx is cancelled, so an inbox transaction in progress
			// rolls back), then what is done is committed.
			r.release(cl, nil, true)
			cl.AllowRebalance()
			return nil
		}
		var bomb *DecompressError
		fs.EachError(func(topic string, p int32, err error) {
			var tl *kgo.ErrDecompressTooLarge
			switch {
			case errors.As(err, &tl):
				bomb = &DecompressError{Topic: tl.Topic, Partition: tl.Partition, Offset: tl.Offset,
					NextOffset: tl.NextOffset, Max: c.o.MaxDecompressedBytes, err: err}
			case !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded):
				c.log.Warn("kafka_fetch_failed", "topic", topic, "partition", p, "error", err)
			}
		})
		if bomb != nil {
			// As at shutdown: the workers finish the record in hand and what is done is
			// committed (never an offset at or past the batch, which no worker has); this
			// poll's other records are not dispatched and are consumed again later.
			c.log.Error("kafka_decompress_refused", "topic", bomb.Topic, "partition", bomb.Partition,
				"offset", bomb.Offset, "next_offset", bomb.NextOffset, "max_decompressed_bytes", bomb.Max)
			r.release(cl, nil, true)
			cl.AllowRebalance()
			return bomb
		}
		r.dispatch(cl, fs)
		r.rewind(cl)
		if time.Since(lastCommit) >= c.o.CommitInterval {
			r.commit(cl, nil)
			lastCommit = time.Now()
		}
		cl.AllowRebalance()
	}
}

type tp struct {
	topic string
	part  int32
}

// run is the state of one Run: a worker per partition that has records.
type run[TTx any] struct {
	c   *Consumer[TTx]
	ctx context.Context

	mu      sync.Mutex // workers; held by commit and release
	workers map[tp]*worker
}

// worker processes the records of one partition in offset order.
type worker struct {
	tp     tp
	wake   chan struct{}
	quit   chan struct{}
	exited chan struct{}

	mu        sync.Mutex
	queue     []*kgo.Record
	next      int64       // offset after the last record done (-1: none yet)
	done      *kgo.Record // last record processed or dead-lettered
	committed *kgo.Record // last record committed
	stuck     *kgo.Record // first record not done; set when it had to stop (dead-letter failed)
	resumeAt  int64       // after a rewind, the offset the next dispatched records must start at (-1: none)
	paused    bool        // fetching paused for backpressure
}

func (r *run[TTx]) worker(cl *kgo.Client, t tp) *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[t]
	if w == nil {
		w = &worker{tp: t, wake: make(chan struct{}, 1), quit: make(chan struct{}), exited: make(chan struct{}), next: -1, resumeAt: -1}
		r.workers[t] = w
		go r.work(cl, w)
	}
	return w
}

// dispatch queues each partition's records on its worker, pausing the partitions whose queue
// is longer than MaxBufferedRecords.
func (r *run[TTx]) dispatch(cl *kgo.Client, fs kgo.Fetches) {
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		r.c.received.Add(uint64(len(p.Records)))
		w := r.worker(cl, tp{p.Topic, p.Partition})
		w.mu.Lock()
		if w.resumeAt >= 0 && p.Records[0].Offset == w.resumeAt {
			w.resumeAt = -1 // the rewind took effect
		}
		if w.stuck == nil && w.resumeAt < 0 {
			w.queue = append(w.queue, p.Records...)
		} else {
			// Fetched past a stuck record before the rewind: consumed again after it.
			r.c.abandoned.Add(uint64(len(p.Records)))
		}
		pause := len(w.queue) > r.c.o.MaxBufferedRecords && !w.paused
		if pause {
			w.paused = true
		}
		w.mu.Unlock()
		if pause {
			cl.PauseFetchPartitions(map[string][]int32{p.Topic: {p.Partition}})
			r.c.backpressure.Add(1)
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	})
}

// rewind moves every stuck partition back to its stuck record, so it is consumed again.
// Called from the poll loop while no rebalance can run (kgo.SetOffsets' rule).
func (r *run[TTx]) rewind(cl *kgo.Client) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t, w := range r.workers {
		w.mu.Lock()
		if s := w.stuck; s != nil {
			cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{t.topic: {t.part: {Epoch: s.LeaderEpoch, Offset: s.Offset}}})
			w.stuck, w.resumeAt = nil, s.Offset
		}
		w.mu.Unlock()
	}
}

// work is a worker's loop.
func (r *run[TTx]) work(cl *kgo.Client, w *worker) {
	defer close(w.exited)
	for {
		select {
		case <-w.quit:
			return
		case <-w.wake:
		}
		for {
			w.mu.Lock()
			if len(w.queue) == 0 || w.stuck != nil {
				w.mu.Unlock()
				break
			}
			n := min(len(w.queue), r.c.o.MaxBatch)
			batch := make([]*kgo.Record, 0, n)
			for _, rec := range w.queue[:n] {
				if rec.Offset >= w.next { // else done already (fetched again after a rewind)
					batch = append(batch, rec)
				}
			}
			w.queue = w.queue[n:]
			resume := w.paused && len(w.queue) <= r.c.o.MaxBufferedRecords/2
			if resume {
				w.paused = false
			}
			w.mu.Unlock()
			if resume {
				cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.part}})
			}
			if len(batch) == 0 {
				continue
			}
			select {
			case <-w.quit:
				return // revoked or shutting down: the rest is abandoned
			default:
			}
			done := r.c.records(r.ctx, cl, batch, w.quit)
			w.mu.Lock()
			if done > 0 {
				w.done, w.next = batch[done-1], batch[done-1].Offset+1
			}
			if done < len(batch) {
				// Not done (shutdown, or the dead-letter topic could not be written): drop what
				// is queued; the poll loop rewinds the partition to the first record not done.
				r.c.abandoned.Add(uint64(len(batch) - done + len(w.queue)))
				w.queue = nil
				if r.ctx.Err() == nil {
					w.stuck = batch[done]
				}
			}
			w.mu.Unlock()
		}
	}
}

// commit commits the records done since the last commit, of the workers in only (all when
// only is nil). The caller holds no lock.
func (r *run[TTx]) commit(cl *kgo.Client, only []*worker) {
	if only == nil {
		r.mu.Lock()
		for _, w := range r.workers {
			only = append(only, w)
		}
		r.mu.Unlock()
	}
	var recs []*kgo.Record
	for _, w := range only {
		w.mu.Lock()
		if w.done != nil && w.done != w.committed {
			recs = append(recs, w.done)
		}
		w.mu.Unlock()
	}
	if len(recs) == 0 {
		return
	}
	// The inbox transactions committed: record that even when ctx is being cancelled.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 10*time.Second)
	err := cl.CommitRecords(cctx, recs...)
	cancel()
	if err != nil {
		// Not committed: the records are consumed again, and the inbox makes that a no-op.
		r.c.log.Warn("kafka_commit_failed", "group", r.c.group, "error", err)
		return
	}
	r.c.commits.Add(1)
	for _, w := range only {
		w.mu.Lock()
		for _, rec := range recs {
			if rec.Topic == w.tp.topic && rec.Partition == w.tp.part {
				w.committed = rec
			}
		}
		w.mu.Unlock()
	}
}

// release stops the workers of ps (all when ps is nil): each finishes the attempt in hand and
// abandons its queue; then, when commit is set, what they did is committed. It returns once
// they stopped: a revoke completes only after that.
func (r *run[TTx]) release(cl *kgo.Client, ps map[string][]int32, commit bool) {
	r.mu.Lock()
	var ws []*worker
	for t, w := range r.workers {
		if ps != nil && !slices.Contains(ps[t.topic], t.part) {
			continue
		}
		ws = append(ws, w)
		delete(r.workers, t)
	}
	r.mu.Unlock()
	for _, w := range ws {
		close(w.quit)
	}
	for _, w := range ws {
		<-w.exited
		w.mu.Lock()
		r.c.abandoned.Add(uint64(len(w.queue)))
		w.queue = nil
		paused := w.paused
		w.mu.Unlock()
		if paused {
			cl.ResumeFetchPartitions(map[string][]int32{w.tp.topic: {w.tp.part}})
		}
	}
	if commit {
		r.commit(cl, ws)
	}
}

// records processes recs (one partition's, in offset order) in one inbox transaction when
// there are several; when that fails, one at a time (record). It returns how many of recs,
// from the first, are done; once quit is closed it starts no further attempt.
func (c *Consumer[TTx]) records(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, quit <-chan struct{}) int {
	prior := make([]error, len(recs)) // the failed batch attempt of a record
	if len(recs) > 1 {
		err := c.batch(ctx, recs)
		switch consume.Decide(ctx, err) {
		case consume.Ack:
			return len(recs)
		case consume.Release:
			return 0 // interrupted by shutdown, not a failure of the records
		}
		var be *core.BatchError
		if errors.As(err, &be) {
			prior[be.Index] = be.Err // the batch was this record's first attempt
		}
		// An undecodable record stops the batch before the inbox: the one-at-a-time pass
		// dead-letters it, and the batch is no failed attempt.
		if !errors.Is(err, errUndecodable) {
			c.failed.Add(1)
			c.log.Warn("kafka_batch_failed", "topic", recs[0].Topic, "partition", recs[0].Partition,
				"first_offset", recs[0].Offset, "records", len(recs), "error", err)
		}
	}
	for i, rec := range recs {
		if i > 0 {
			select {
			case <-quit:
				return i
			default:
			}
		}
		if !c.record(ctx, cl, rec, prior[i], quit) {
			return i
		}
	}
	return len(recs)
}

// errUndecodable stops a batch that holds a record that is not an outbox record.
var errUndecodable = errors.New("kafka: undecodable record in the batch")

// batch processes recs in one inbox transaction (core.Inbox.ProcessBatch). A *core.BatchError
// names the record that failed it.
func (c *Consumer[TTx]) batch(ctx context.Context, recs []*kgo.Record) error {
	ds := make([]*Delivery, len(recs))
	msgs := make([]core.InboxMessage, len(recs))
	for i, r := range recs {
		ev, created, err := decodeRecord(r)
		if err != nil {
			return errUndecodable
		}
		ds[i] = &Delivery{Event: ev, CreatedAt: created, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Attempt: 1}
		msgs[i] = c.message(ds[i])
	}
	res, err := c.proc.ProcessBatch(ctx, ds, msgs)
	if err != nil {
		return err
	}
	for _, r := range res {
		c.outcomes.Add(r.Outcome)
	}
	return nil
}

// record tries r up to MaxAttempts times (counting a failed batch attempt, prior, as the
// first), then dead-letters it; a record no attempt can get past (consume.DeadLetter:
// undecodable, or refused by the inbox for good) is dead-lettered at once. It reports whether
// r is done. Once quit is closed (revoke, shutdown) it starts no further attempt.
func (c *Consumer[TTx]) record(ctx context.Context, cl *kgo.Client, r *kgo.Record, prior error, quit <-chan struct{}) bool {
	ev, created, err := decodeRecord(r)
	if err != nil {
		c.failed.Add(1) // not an outbox record: no attempt can get past it
		return c.deadLetter(ctx, cl, r, 1, err)
	}
	attempts := 0
	if prior != nil {
		attempts, err = 1, prior
		if consume.Decide(ctx, prior) == consume.DeadLetter {
			return c.deadLetter(ctx, cl, r, attempts, err)
		}
	}
	for attempts < c.o.MaxAttempts {
		if attempts > 0 {
			select {
			case <-ctx.Done():
				return false
			case <-quit:
				return false
			case <-time.After(c.o.RetryBackoff):
			}
		}
		attempts++
		d := &Delivery{Event: ev, CreatedAt: created, Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Attempt: attempts}
		res, perr := c.proc.Process(ctx, d, c.message(d))
		err = perr
		act := consume.Decide(ctx, err)
		switch act {
		case consume.Ack:
			c.outcomes.Add(res.Outcome)
			return true
		case consume.Release:
			return false // interrupted by shutdown, not a failure of the record
		}
		c.failed.Add(1)
		c.log.Error("kafka_record_failed", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
			"event_id", ev.ID, "attempt", attempts, "action", act.String(), "error", err)
		if act == consume.DeadLetter {
			return c.deadLetter(ctx, cl, r, attempts, err)
		}
	}
	return c.deadLetter(ctx, cl, r, attempts, err)
}

// message is d's inbox message.
func (c *Consumer[TTx]) message(d *Delivery) core.InboxMessage {
	return consume.Message(&d.Event, d.CreatedAt, c.o.Entity, fmt.Sprintf("kafka:%s/%d@%d", d.Topic, d.Partition, d.Offset))
}

func (c *Consumer[TTx]) deadLetter(ctx context.Context, cl *kgo.Client, r *kgo.Record, attempts int, cause error) bool {
	dlt := &kgo.Record{Topic: c.o.DeadLetterTopic(r.Topic), Key: r.Key, Value: r.Value,
		Headers: append(append([]kgo.RecordHeader(nil), r.Headers...),
			kgo.RecordHeader{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
			kgo.RecordHeader{Key: HeaderDeadLetterPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
			kgo.RecordHeader{Key: HeaderDeadLetterOffset, Value: []byte(strconv.FormatInt(r.Offset, 10))},
			kgo.RecordHeader{Key: HeaderDeadLetterAttempts, Value: []byte(strconv.Itoa(attempts))},
			kgo.RecordHeader{Key: HeaderDeadLetterError, Value: []byte(driver.TruncateError(cause.Error()))},
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

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
