package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// DefaultSource is the default ce-source.
const DefaultSource = "outboxkit"

// JetStream API error codes the sink classifies.
const (
	errCodeMessageTooLarge = 10054 // JSStreamMessageExceedsMaximumErr: larger than the stream's max_msg_size
)

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// Source is the CloudEvents source (ce-source) of every message, a URI reference. Default
	// DefaultSource.
	Source string
	// ContentType is the content-type header of messages whose event has no "content-type"
	// header. Default "": no content-type header (the CloudEvent has no datacontenttype).
	ContentType string
	// Concurrency is the most publish rounds of one Send in flight at once. A round publishes
	// at most one message of each partition key (see MaxInFlight). Default 4.
	Concurrency int
	// MaxInFlight is the most messages of one round, published at once before their PubAcks
	// are awaited; each message of a round has another partition key. Default 256.
	MaxInFlight int
	// AckTimeout bounds the wait for a message's PubAck; past it the message's outcome is
	// retryable (its resend is deduplicated by Nats-Msg-Id if the stream stored it).
	// Default 5s.
	AckTimeout time.Duration
	// Domain is the JetStream domain to publish to. Default "": the account's own JetStream.
	Domain string
	// AtomicBatch publishes the messages of a Send that share a subject as JetStream atomic
	// batches where the subject's stream allows them (nats-server 2.12 or later, a stream
	// created with AllowAtomicPublish): the server stores a batch of up to MaxAtomicBatch
	// messages whole, in order, or not at all, so the messages of a partition key no longer
	// wait for each other's PubAck: one round trip per batch instead of one per message of a
	// key. The batches of one Send go out Concurrency at a time, whole keys together (package
	// sinks/batcher). The messages of a subject whose stream does not allow atomic publishes
	// (or whose stream the sink may not look up: it reads the stream's configuration, cached
	// for a minute, and logs nats_atomic_unavailable once per subject), and those of a batch
	// the server refused (one of them already stored within the duplicate window, as after a
	// lost acknowledgement; a full stream; a message over the stream's max_msg_size; no answer
	// within AckTimeout), are published as without AtomicBatch, one message per key at a time,
	// each with its own outcome. Stored messages carry the server's Nats-Batch-Id and
	// Nats-Batch-Sequence headers besides this package's. Default false.
	AtomicBatch bool
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Sink publishes messages to JetStream: core.Message.Destination is the subject, which a
// stream must cover.
type Sink struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	o      Options
	log    *slog.Logger
	atomic atomicStreams // AtomicBatch's view of the streams
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink that publishes on nc, which the caller connected (servers, TLS,
// credentials, reconnect policy) and closes after the sink's last Send. opts may be nil.
func New(nc *nats.Conn, opts *Options) (*Sink, error) {
	if nc == nil {
		return nil, &core.OptionError{Field: "nc", Reason: "must not be nil"}
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
		o.Concurrency = 4
	case o.Concurrency < 0:
		return nil, &core.OptionError{Field: "Concurrency", Reason: "must not be negative (0: default 4)"}
	}
	switch {
	case o.MaxInFlight == 0:
		o.MaxInFlight = 256
	case o.MaxInFlight < 0:
		return nil, &core.OptionError{Field: "MaxInFlight", Reason: "must not be negative (0: default 256)"}
	}
	switch {
	case o.AckTimeout == 0:
		o.AckTimeout = 5 * time.Second
	case o.AckTimeout < 0:
		return nil, &core.OptionError{Field: "AckTimeout", Reason: "must not be negative (0: default 5s)"}
	}
	jsOpts := []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncTimeout(o.AckTimeout),
		// Room for every round in flight, so that a publish never stalls on the limit.
		jetstream.WithPublishAsyncMaxPending(max(o.Concurrency*o.MaxInFlight, 4000)),
	}
	var js jetstream.JetStream
	var err error
	if o.Domain != "" {
		js, err = jetstream.NewWithDomain(nc, o.Domain, jsOpts...)
	} else {
		js, err = jetstream.New(nc, jsOpts...)
	}
	if err != nil {
		return nil, fmt.Errorf("nats: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sink{nc: nc, js: js, o: o, log: log, atomic: atomicStreams{m: map[string]atomicStream{}}}, nil
}

// Send implements core.Sink. It publishes every message to its subject with the event ID as
// Nats-Msg-Id and waits for the stream's PubAck of each (of each batch with
// Options.AtomicBatch). Per partition key, one message is in flight at a time: a round
// publishes at most one message of each key at once (package sinks/batcher, rounds of one
// subject), and a key's next message waits for the PubAck of its previous one; once one
// fails, the key's later messages are not published. With Options.AtomicBatch, where the
// stream allows it, a key's messages go in one atomic batch instead (see Options).
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	limit := int(s.nc.MaxPayload()) // the server's max_payload, from its INFO
	out := make([]*nats.Msg, len(msgs))
	items := make([]batcher.Item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		if !validSubject(m.Destination) {
			items[i].Err = core.Permanent(fmt.Errorf("nats: event %s: %w: %q", m.ID, ErrInvalidSubject, m.Destination))
			continue
		}
		msg := encode(m, s.o.Source, s.o.ContentType)
		if size := encodedSize(msg); limit > 0 && size > limit {
			items[i].Err = core.Permanent(fmt.Errorf("nats: event %s: %w: %d bytes with headers, server max_payload %d", m.ID, ErrMessageTooLarge, size, limit))
			continue
		}
		out[i] = msg
	}
	if s.o.AtomicBatch {
		return batcher.Run(ctx, items, batcher.Options{Concurrency: s.o.Concurrency, MaxEntries: MaxAtomicBatch},
			func(ctx context.Context, subject string, idx []int) []error {
				if res, ok := s.publishAtomic(ctx, subject, msgs, out, idx); ok {
					return res
				}
				return s.perKey(ctx, msgs, out, items, idx)
			})
	}
	all := make([]int, len(msgs))
	for i := range all {
		all[i] = i
	}
	return s.perKey(ctx, msgs, out, items, all)
}

// perKey publishes the messages idx in rounds of at most one message per key, a key's next
// message waiting for the PubAck of its previous one.
func (s *Sink) perKey(ctx context.Context, msgs []core.Message, out []*nats.Msg, items []batcher.Item, idx []int) []error {
	sub := make([]batcher.Item, len(idx))
	for k, i := range idx {
		sub[k] = items[i]
	}
	return batcher.Run(ctx, sub, batcher.Options{Concurrency: s.o.Concurrency, MaxEntries: s.o.MaxInFlight, OnePerGroup: true},
		func(ctx context.Context, subject string, ks []int) []error {
			round := make([]int, len(ks))
			for j, k := range ks {
				round[j] = idx[k]
			}
			res := s.round(ctx, msgs, out, round)
			for j, err := range res {
				if err != nil {
					s.log.Warn("nats_publish_failed", "subject", subject, "messages", len(round), "event_id", msgs[round[j]].ID,
						"permanent", core.IsPermanent(err), "error", err)
					break
				}
			}
			return res
		})
}

// round publishes the messages idx (each of another key) at once and waits for their PubAcks.
func (s *Sink) round(ctx context.Context, msgs []core.Message, out []*nats.Msg, idx []int) []error {
	res := make([]error, len(idx))
	futs := make([]jetstream.PubAckFuture, len(idx))
	for k, i := range idx {
		if err := ctx.Err(); err != nil {
			res[k] = err
			continue
		}
		f, err := s.js.PublishMsgAsync(out[i])
		if err != nil {
			res[k] = classify(msgs[i].ID, err)
			continue
		}
		futs[k] = f
	}
	// The publisher times every PubAck out after AckTimeout; the timer is a backstop.
	timer := time.NewTimer(s.o.AckTimeout + time.Second)
	defer timer.Stop()
	for k, f := range futs {
		if f == nil {
			continue
		}
		id := msgs[idx[k]].ID
		select {
		case <-f.Ok():
			// Acknowledged; PubAck.Duplicate means the stream stored this event ID within
			// its duplicate window already: acknowledged as well.
		case err := <-f.Err():
			res[k] = classify(id, err)
		case <-ctx.Done():
			res[k] = fmt.Errorf("nats: event %s: %w: %w", id, core.ErrNotAcknowledged, ctx.Err())
		case <-timer.C:
			res[k] = fmt.Errorf("nats: event %s: %w: no PubAck within %s", id, core.ErrNotAcknowledged, s.o.AckTimeout)
			timer.Reset(0)
		}
	}
	return res
}

// classify wraps a publish error: no stream covering the subject (no responders), a message
// larger than the server's or the stream's limit, and an invalid subject are permanent;
// everything else (timeouts, disconnects, a stream full with the discard-new policy, any
// other JetStream error) is retryable.
func classify(id string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return core.Permanent(fmt.Errorf("nats: event %s: %w: %w", id, ErrNoStream, err))
	case errors.Is(err, nats.ErrMaxPayload):
		return core.Permanent(fmt.Errorf("nats: event %s: %w: %w", id, ErrMessageTooLarge, err))
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeMessageTooLarge:
		return core.Permanent(fmt.Errorf("nats: event %s: %w: %w", id, ErrMessageTooLarge, err))
	case errors.Is(err, nats.ErrBadSubject):
		return core.Permanent(fmt.Errorf("nats: event %s: %w: %w", id, ErrInvalidSubject, err))
	}
	return fmt.Errorf("nats: event %s: %w", id, err)
}
