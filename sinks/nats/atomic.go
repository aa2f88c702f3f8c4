package nats

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/outboxkit/outbox/core"
)

// MaxAtomicBatch is the most messages of one atomic batch (Options.AtomicBatch): the default
// of the server's jetstream.limits.batch.max_msgs.
const MaxAtomicBatch = 1000

// atomicRecheck is how long the sink trusts what it read of a subject's stream.
const atomicRecheck = time.Minute

// atomicStreams remembers, per subject, whether its stream allows atomic publishes.
type atomicStreams struct {
	mu sync.Mutex
	m  map[string]atomicStream
}

type atomicStream struct {
	allowed bool
	at      time.Time
	warned  bool // nats_atomic_unavailable was logged for this subject
}

// publishAtomic publishes the messages idx of subject as one atomic batch. ok is false when
// it did not (the stream does not allow atomic publishes, or the server refused the batch,
// which it then did not store): the caller publishes them one per key at a time.
func (s *Sink) publishAtomic(ctx context.Context, subject string, msgs []core.Message, out []*nats.Msg, idx []int) ([]error, bool) {
	if !s.atomicAllowed(ctx, subject) {
		return nil, false
	}
	batch := make([]*nats.Msg, len(idx))
	for k, i := range idx {
		batch[k] = out[i]
	}
	actx, cancel := context.WithTimeout(ctx, s.o.AckTimeout)
	defer cancel()
	// No acknowledgement of the first message: the commit's PubAck (or error) answers for
	// the whole batch, one round trip.
	_, err := jetstreamext.PublishMsgBatch(actx, s.js, batch,
		jetstreamext.BatchFlowControl{AckFirst: false, AckTimeout: s.o.AckTimeout})
	if err == nil {
		return make([]error, len(idx)), true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishNotEnabled {
		s.atomicForget(subject) // the stream changed: look again
	}
	s.log.Debug("nats_atomic_refused", "subject", subject, "messages", len(idx), "error", err)
	return nil, false
}

// atomicAllowed reports whether the stream of subject allows atomic publishes, from its
// configuration (read at most once per atomicRecheck).
func (s *Sink) atomicAllowed(ctx context.Context, subject string) bool {
	s.atomic.mu.Lock()
	st, ok := s.atomic.m[subject]
	s.atomic.mu.Unlock()
	if ok && time.Since(st.at) < atomicRecheck {
		return st.allowed
	}
	lctx, cancel := context.WithTimeout(ctx, s.o.AckTimeout)
	defer cancel()
	reason := ""
	name, err := s.js.StreamNameBySubject(lctx, subject)
	var stream jetstream.Stream
	if err == nil {
		stream, err = s.js.Stream(lctx, name)
	}
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return false // not cached: the rounds report ErrNoStream; a stream may be created later
	case err != nil:
		reason = "cannot read the stream's configuration: " + err.Error()
	case !stream.CachedInfo().Config.AllowAtomicPublish:
		reason = "stream " + name + " was not created with AllowAtomicPublish (allow_atomic; nats-server 2.12 or later)"
	}
	s.atomic.mu.Lock()
	defer s.atomic.mu.Unlock()
	st = s.atomic.m[subject]
	st.allowed, st.at = reason == "", time.Now()
	if reason != "" && !st.warned {
		st.warned = true
		s.log.Warn("nats_atomic_unavailable", "subject", subject, "reason", reason,
			"effect", "messages of this subject are published one per partition key at a time")
	}
	s.atomic.m[subject] = st
	return st.allowed
}

// atomicForget drops what the sink knew of subject's stream.
func (s *Sink) atomicForget(subject string) {
	s.atomic.mu.Lock()
	defer s.atomic.mu.Unlock()
	st := s.atomic.m[subject]
	st.at = time.Time{}
	s.atomic.m[subject] = st
}
