package outboxtest

import (
	"context"
	"slices"
	"sync"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Sink is a recording core.Sink: it acknowledges every message (unless Fail says otherwise)
// and keeps the acknowledged ones in send order. As a Source it returns their records. It keeps
// the sink contract's prefix rule: after a failed message of a group, the later messages of
// that group in the same call are reported core.ErrNotAcknowledged. The zero value is ready
// to use and safe for concurrent use.
type Sink struct {
	// Fail, when set, returns the outcome of each message (nil acknowledges it). Set it
	// before the sink is used.
	Fail func(m core.Message) error

	mu   sync.Mutex
	msgs []core.Message
}

// NewSink returns an empty Sink that acknowledges everything.
func NewSink() *Sink { return &Sink{} }

// Send implements core.Sink.
func (s *Sink) Send(_ context.Context, msgs []core.Message) []error {
	out := make([]error, len(msgs))
	failed := map[string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, m := range msgs {
		switch {
		case failed[m.GroupID]:
			out[i] = core.ErrNotAcknowledged
		case s.Fail != nil:
			out[i] = s.Fail(m)
		}
		if out[i] != nil {
			failed[m.GroupID] = true
			continue
		}
		s.msgs = append(s.msgs, m)
	}
	return out
}

// Messages returns the acknowledged messages, in send order (a message acknowledged twice
// appears twice).
func (s *Sink) Messages() []core.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.msgs)
}

// Records implements Source: the records of the acknowledged messages, in send order.
func (s *Sink) Records(context.Context) ([]driver.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]driver.Record, len(s.msgs))
	for i, m := range s.msgs {
		out[i] = m.Record
	}
	return out, nil
}

// Reset forgets the recorded messages.
func (s *Sink) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = nil
}
