package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
	return &Sink{client: client, o: o, maxBytes: int(maxBytes), log: log}, nil
}

// Send implements core.Sink. It produces every message as one record (key = the partition key,
// so one key stays in one partition) and waits for the broker's acknowledgement of each.
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
		// ProduceSync, not Produce: it stops the client's linger for these partitions, since
		// the relay waits for the outcome anyway.
		batch := make([]*kgo.Record, len(idx))
		pos := make(map[*kgo.Record]int, len(idx))
		for k, i := range idx {
			batch[k] = recs[i]
			pos[recs[i]] = k
		}
		res := core.Outcomes(len(idx), core.ErrNotAcknowledged)
		for _, pr := range s.client.ProduceSync(ctx, batch...) {
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
