package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// DefaultSource is the default ce_source.
const DefaultSource = "outboxkit"

// DefaultMaxMessageBytes is the default Options.MaxMessageBytes: 1 MiB.
const DefaultMaxMessageBytes = 1 << 20

// MaxMessageBytesLimit is the largest Options.MaxMessageBytes: Redis's default
// proto-max-bulk-len (512 MiB) bounds a single value.
const MaxMessageBytesLimit = 512 << 20

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// Source is the CloudEvents source (ce_source) of every entry, a URI reference. Default
	// DefaultSource.
	Source string
	// ContentType is the content-type field of entries whose event has no "content-type"
	// header. Default "": no content-type field.
	ContentType string
	// MaxLen trims each stream the sink writes to about this many entries (XADD MAXLEN ~
	// MaxLen: Redis trims whole radix-tree nodes, so the stream may hold somewhat more).
	// Trimming deletes entries whether a consumer group read them or not: size it well above
	// the consumers' backlog. Default 0: no trimming.
	MaxLen int64
	// MaxMessageBytes is the largest entry the sink writes, counting its field names and
	// values (the payload among them); a larger message gets a permanent ErrMessageTooLarge.
	// Default DefaultMaxMessageBytes (1 MiB), at most MaxMessageBytesLimit.
	MaxMessageBytes int
	// Concurrency is the most streams one Send call writes to at once (one pipeline each).
	// Default 8.
	Concurrency int
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Sink appends messages to Redis streams with XADD: core.Message.Destination is the stream key.
type Sink struct {
	client goredis.UniversalClient
	o      Options
	log    *slog.Logger
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink that writes with client (a *redis.Client, *redis.ClusterClient or any
// redis.UniversalClient the caller built and closes after the sink's last Send). opts may be
// nil. Bad options are a *core.OptionError naming the field.
func New(client goredis.UniversalClient, opts *Options) (*Sink, error) {
	if client == nil {
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	if o.MaxLen < 0 {
		return nil, &core.OptionError{Field: "MaxLen", Reason: "must not be negative (0 means no trimming)"}
	}
	switch {
	case o.MaxMessageBytes == 0:
		o.MaxMessageBytes = DefaultMaxMessageBytes
	case o.MaxMessageBytes < 0 || o.MaxMessageBytes > MaxMessageBytesLimit:
		return nil, &core.OptionError{Field: "MaxMessageBytes", Reason: fmt.Sprintf("must be between 1 and %d (0 means %d)", MaxMessageBytesLimit, DefaultMaxMessageBytes)}
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = 8
	case o.Concurrency < 0:
		return nil, &core.OptionError{Field: "Concurrency", Reason: "must not be negative"}
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sink{client: client, o: o, log: log}, nil
}

// Send implements core.Sink. The messages of one stream go in one pipeline of XADDs, in call
// order: Redis runs a pipeline's commands in order, so a key's entries land in its order.
// A message is acknowledged once its XADD replied with the entry ID. A failed XADD fails its
// message and every later message of its key in the call (the later ones with
// core.ErrNotAcknowledged, even if Redis appended them: the resend is a duplicate, never a
// loss). Streams are written Options.Concurrency at a time; a key that spans streams has its
// pipelines run one after the other.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	fields := make([][]any, len(msgs))
	items := make([]batcher.Item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		if m.Destination == "" {
			items[i].Err = core.Permanent(fmt.Errorf("redis: event %s: %w: empty stream key", m.ID, core.ErrUnknownDestination))
			continue
		}
		f, size := encodeFields(m, s.o.Source, s.o.ContentType)
		if size > s.o.MaxMessageBytes {
			items[i].Err = core.Permanent(fmt.Errorf("redis: event %s: %w: %d bytes, limit %d", m.ID, ErrMessageTooLarge, size, s.o.MaxMessageBytes))
			continue
		}
		fields[i] = f
		items[i].Size = size
	}
	return batcher.Run(ctx, items, batcher.Options{Concurrency: s.o.Concurrency}, func(ctx context.Context, stream string, idx []int) []error {
		pipe := s.client.Pipeline()
		cmds := make([]*goredis.StringCmd, len(idx))
		for k, i := range idx {
			cmds[k] = pipe.XAdd(ctx, &goredis.XAddArgs{Stream: stream, MaxLen: s.o.MaxLen, Approx: s.o.MaxLen > 0, Values: fields[i]})
		}
		_, _ = pipe.Exec(ctx) // each command carries its own outcome
		res := make([]error, len(idx))
		failed := 0
		var first error
		for k, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				res[k] = classify(msgs[idx[k]].ID, stream, err)
				if failed == 0 {
					first = res[k]
				}
				failed++
			}
		}
		if failed > 0 {
			s.log.Warn("redis_xadd_failed", "stream", stream, "entries", len(idx), "failed", failed,
				"permanent", core.IsPermanent(first), "error", first)
		}
		return res
	})
}

// classify wraps an XADD error: WRONGTYPE (the key holds another type than a stream) and
// NOPERM (the ACL user may not write the key) no retry can fix, so they are permanent; the
// rest (connection errors, timeouts, cancellation, LOADING, BUSY, OOM, READONLY, TRYAGAIN,
// cluster redirections, anything unknown) are retryable.
func classify(id, stream string, err error) error {
	wrapped := fmt.Errorf("redis: event %s: XADD %s: %w", id, stream, err)
	var re goredis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		if strings.HasPrefix(msg, "WRONGTYPE") || strings.HasPrefix(msg, "NOPERM") {
			return core.Permanent(wrapped)
		}
	}
	return wrapped
}
