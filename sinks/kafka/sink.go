package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// DefaultSource is the default ce_source.
const DefaultSource = "outboxkit"

// recordOverhead approximates the bytes a record adds to a batch beyond its key, value and
// header bytes (varint lengths, attributes, timestamp and offset deltas).
const recordOverhead = 64

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// Source is the CloudEvents source (ce_source) of every record, a URI reference. Default
	// DefaultSource.
	Source string
	// ContentType is the content-type header of records whose event has no "content-type"
	// header. Default "": no content-type header (the CloudEvent has no datacontenttype).
	ContentType string
	// Concurrency is the most topics one Send call produces to at once. Default 8.
	Concurrency int
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Sink produces messages to Kafka: core.Message.Destination is the topic.
type Sink struct {
	client   *kgo.Client
	o        Options
	maxBytes int
	log      *slog.Logger
	rounds   rounds
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink that produces with client, which the caller built with kgo.NewClient (its
// brokers, TLS, SASL and compression, e.g. kgo.ProducerBatchCompression(kgo.ZstdCompression()))
// and closes after the sink's last Send. The client must keep franz-go's default idempotent
// producer (which implies acks=all): New refuses a client built with
// kgo.DisableIdempotentWrite or kgo.AllowIdempotentProduceCancellation. opts may be nil.
func New(client *kgo.Client, opts *Options) (*Sink, error) {
	if client == nil {
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	}
	if v, _ := client.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		return nil, &core.OptionError{Field: "client", Reason: "must keep the idempotent producer (built with kgo.DisableIdempotentWrite)"}
	}
	if v, _ := client.OptValue(kgo.AllowIdempotentProduceCancellation).(bool); v {
		return nil, &core.OptionError{Field: "client", Reason: "must keep the idempotent producer (built with kgo.AllowIdempotentProduceCancellation)"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = 8
	case o.Concurrency < 0:
		return nil, &core.OptionError{Field: "Concurrency", Reason: "must not be negative"}
	}
	maxBytes, _ := client.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	if maxBytes <= 0 {
		maxBytes = 1_000_012 // franz-go's default
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sink{client: client, o: o, maxBytes: int(maxBytes), log: log, rounds: rounds{client: client}}, nil
}

// Send implements core.Sink. It produces every message as one record (key = the partition key,
// so one key stays in one partition) and waits for the broker's acknowledgement of each.
// Concurrent Sends (a relay's InFlight loops) share produce requests: while one round of
// requests is at the brokers, the records of the Sends that arrive meanwhile go out together
// in the next one (a broker answers a connection's requests in order, so separate requests
// would wait behind each other there).
// A record in flight is not given up when ctx ends (the idempotent producer cannot, without
// risking a duplicate): while the brokers are silent with their sockets open, Send waits. The
// client deadlines each produce request (kgo.ProduceRequestTimeout + kgo.RequestTimeoutOverhead,
// 10s + 10s by default), kills the connection and produces again, so Send returns soon after
// the brokers answer again.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, len(msgs))
	items := make([]batcher.Item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		if m.Destination == "" {
			items[i].Err = core.Permanent(fmt.Errorf("kafka: event %s: %w: empty topic", m.ID, core.ErrUnknownDestination))
			continue
		}
		r := &kgo.Record{Topic: m.Destination, Key: []byte(m.GroupID), Value: m.Payload,
			Headers: encodeHeaders(m, s.o.Source, s.o.ContentType)}
		size := len(r.Key) + len(r.Value) + recordOverhead
		for _, h := range r.Headers {
			size += len(h.Key) + len(h.Value) + 4
		}
		if size > s.maxBytes {
			items[i].Err = core.Permanent(fmt.Errorf("kafka: event %s: %w: about %d bytes, client limit %d", m.ID, ErrMessageTooLarge, size, s.maxBytes))
			continue
		}
		recs[i] = r
	}
	// One request per topic: every record of it is produced at once and the producer keeps
	// the order of each partition; the batcher keeps the prefix rule per key.
	return batcher.Run(ctx, items, batcher.Options{Concurrency: s.o.Concurrency}, func(ctx context.Context, topic string, idx []int) []error {
		batch := make([]*kgo.Record, len(idx))
		pos := make(map[*kgo.Record]int, len(idx))
		for k, i := range idx {
			batch[k] = recs[i]
			pos[recs[i]] = k
		}
		res := core.Outcomes(len(idx), core.ErrNotAcknowledged)
		for _, pr := range s.rounds.produce(ctx, batch) {
			if k, ok := pos[pr.Record]; ok {
				res[k] = nil
				if pr.Err != nil {
					res[k] = classify(msgs[idx[k]].ID, pr.Err)
				}
			}
		}
		for _, err := range res {
			if err != nil {
				s.log.Warn("kafka_produce_failed", "topic", topic, "records", len(idx), "permanent", core.IsPermanent(err), "error", err)
				break
			}
		}
		return res
	})
}

// classify wraps a produce error: Kafka errors that no retry can fix (invalid record, not
// authorised, unknown topic) are permanent; the rest (timeouts, cancellation, leadership
// changes, a batch refused as too large, anything unknown) are retryable.
func classify(id string, err error) error {
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
		// The broker refused a whole batch, which holds other records too: retryable, so that
		// they are not parked for their neighbour (Send already failed records too large for
		// the client alone, permanently).
		return fmt.Errorf("kafka: event %s: %w: %w", id, ErrMessageTooLarge, err)
	}
	err = fmt.Errorf("kafka: event %s: %w", id, err)
	var ke *kerr.Error
	if errors.As(err, &ke) && (!ke.Retriable || errors.Is(ke, kerr.UnknownTopicOrPartition)) {
		return core.Permanent(err)
	}
	return err
}

// rounds produces the records of concurrent Sends together, one round at a time: a round is
// one ProduceSync (which stops the client's linger, since the relay waits for the outcome
// anyway) of every record queued since the round before began. A broker answers the requests
// of a connection in order, one after the other, so rounds in flight at once would wait for
// each other there: a relay's InFlight loops sending at once paid up to InFlight broker round
// trips per send (BENCHMARKS.md, "The whole pipeline"). Each record's outcome is that of its
// own ProduceSync, so per-partition order and errors are as if each Send produced alone.
type rounds struct {
	client  *kgo.Client
	mu      sync.Mutex
	queue   []*produceCall
	running bool
}

// produceCall is one Send's records (of one topic) waiting for a round.
type produceCall struct {
	ctx  context.Context
	recs []*kgo.Record
	res  kgo.ProduceResults
	done chan struct{}
}

// produce queues recs for the next round, starts the rounds when none is running, and
// returns their results (a record without one was not acknowledged). When ctx ends while recs
// are still queued they are given up (each fails with ctx's error); once in a round, their
// outcome is awaited, as ProduceSync awaits a record the client holds.
func (r *rounds) produce(ctx context.Context, recs []*kgo.Record) kgo.ProduceResults {
	c := &produceCall{ctx: ctx, recs: recs, done: make(chan struct{})}
	r.mu.Lock()
	r.queue = append(r.queue, c)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if start {
		go r.run()
	}
	select {
	case <-c.done:
		return c.res
	case <-ctx.Done():
	}
	// Still queued: its records never reached the client, so they can be given up.
	r.mu.Lock()
	i := slices.Index(r.queue, c)
	if i >= 0 {
		r.queue = slices.Delete(r.queue, i, i+1)
	}
	r.mu.Unlock()
	if i < 0 {
		<-c.done // in a round: wait for its outcome
		return c.res
	}
	return failed(c.recs, ctx.Err())
}

// failed is the results of records that were not produced, each with err.
func failed(recs []*kgo.Record, err error) kgo.ProduceResults {
	res := make(kgo.ProduceResults, len(recs))
	for i, rec := range recs {
		res[i] = kgo.ProduceResult{Record: rec, Err: err}
	}
	return res
}

// run produces round after round until the queue is empty.
func (r *rounds) run() {
	for {
		r.mu.Lock()
		calls := r.queue
		r.queue = nil
		if len(calls) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		r.round(calls)
	}
}

// round produces the records of calls in one ProduceSync, on a context that ends when every
// call's context has ended (a call whose context ended first produces nothing), and gives
// each call its records' results.
func (r *rounds) round(calls []*produceCall) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live []*produceCall
	var all []*kgo.Record
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.res = failed(c.recs, err)
			close(c.done)
			continue
		}
		live = append(live, c)
		all = append(all, c.recs...)
	}
	if len(live) == 0 {
		return
	}
	var left atomic.Int64
	left.Store(int64(len(live)))
	for _, c := range live {
		stop := context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
		defer stop()
	}
	res := r.client.ProduceSync(ctx, all...)
	by := make(map[*kgo.Record]kgo.ProduceResult, len(res))
	for _, pr := range res {
		by[pr.Record] = pr
	}
	for _, c := range live {
		c.res = make(kgo.ProduceResults, 0, len(c.recs))
		for _, rec := range c.recs {
			if pr, ok := by[rec]; ok {
				c.res = append(c.res, pr)
			}
		}
		close(c.done)
	}
}
