package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/outboxkit/outbox/core"
)

// errInjected is the retryable error the sink reports for an injected failure.
var errInjected = errors.New("conformance: injected delivery failure")

// Sink is the suite's recording, fault-injecting core.Sink. It records every acknowledged
// message (a delivery) in Send order, and fails chosen event IDs or partition keys, or
// everything, retryably or permanently. By default it keeps the sink contract's prefix rule:
// after a failed message of a group, the later messages of that group in the same call are
// reported ErrNotAcknowledged.
type Sink struct {
	mu         sync.Mutex
	deliveries []core.Message
	acks       map[string]int
	sends      int
	seen       int            // messages given to Send
	sent       map[string]int // messages given to Send, by event ID
	failOnce   map[string]bool
	failID     map[string]error
	failKey    map[string]error
	failAll    error
	violate    map[string]bool
	crash      func()
}

// NewSink returns an empty recording sink.
func NewSink() *Sink {
	return &Sink{acks: map[string]int{}, sent: map[string]int{}, failOnce: map[string]bool{}, failID: map[string]error{}, failKey: map[string]error{}, violate: map[string]bool{}}
}

// FailID makes every send of event id fail with err (nil clears).
func (s *Sink) FailID(id string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failID, id)
	} else {
		s.failID[id] = err
	}
}

// FailOnce makes the next send of event id fail retryably, once.
func (s *Sink) FailOnce(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failOnce[id] = true
}

// FailKey makes every send of partition key fail with err (nil clears).
func (s *Sink) FailKey(key string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.failKey, key)
	} else {
		s.failKey[key] = err
	}
}

// FailAll makes every send fail with err (nil clears).
func (s *Sink) FailAll(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failAll = err
}

// ViolatePrefix makes the sink acknowledge the later messages of key after one failed, which
// the sink contract forbids (a broken sink).
func (s *Sink) ViolatePrefix(key string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.violate[key] = on
}

// CrashAfterSend arms a crash: the next Send that acknowledges at least one message records
// its deliveries, then calls crash (which cancels the relay's context and cuts its store) before
// returning, so the relay cannot settle what was sent.
func (s *Sink) CrashAfterSend(crash func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.crash = crash
}

// Send implements core.Sink.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sends++
	s.seen += len(msgs)
	out := make([]error, len(msgs))
	failed := map[string]bool{}
	acked := 0
	for i, m := range msgs {
		s.sent[m.ID]++
		var err error
		switch {
		case failed[m.GroupID] && !s.violate[m.GroupID]:
			err = fmt.Errorf("%w: held back behind an earlier failure of group %s", core.ErrNotAcknowledged, m.GroupID)
		case s.failAll != nil:
			err = s.failAll
		case s.failOnce[m.ID]:
			delete(s.failOnce, m.ID)
			err = errInjected
		case s.failID[m.ID] != nil:
			err = s.failID[m.ID]
		case s.failKey[m.PartitionKey] != nil:
			err = s.failKey[m.PartitionKey]
		}
		if err != nil {
			failed[m.GroupID] = true
			out[i] = err
			continue
		}
		s.deliveries = append(s.deliveries, m)
		s.acks[m.ID]++
		acked++
	}
	if s.crash != nil && acked > 0 {
		crash := s.crash
		s.crash = nil
		crash()
	}
	return out
}

// Acks returns how many times event id was acknowledged.
func (s *Sink) Acks(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[id]
}

// Sent returns how many times event id was given to Send (acknowledged or not).
func (s *Sink) Sent(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[id]
}

// Sends returns how many Send calls the sink got.
func (s *Sink) Sends() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sends
}

// Seen returns how many messages were given to Send.
func (s *Sink) Seen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen
}

// Deliveries returns a copy of the acknowledged messages in Send order.
func (s *Sink) Deliveries() []core.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]core.Message(nil), s.deliveries...)
}

// AllAcked reports whether every id was acknowledged at least once.
func (s *Sink) AllAcked(ids []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if s.acks[id] == 0 {
			return false
		}
	}
	return true
}

// CheckOrder checks the deliveries against want (partition key -> event IDs in write order):
// per key, the first deliveries follow write order and no event is delivered before every
// earlier event of its key was delivered at least once; no event outside want is delivered.
// It returns one error per violation (at most 20).
func (s *Sink) CheckOrder(want map[string][]string) []error {
	pos := map[string]int{}
	keyOf := map[string]string{}
	for key, list := range want {
		for i, id := range list {
			pos[id] = i
			keyOf[id] = key
		}
	}
	next := map[string]int{} // key -> count of distinct events delivered, in order
	var errs []error
	for _, m := range s.Deliveries() {
		i, ok := pos[m.ID]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("event %s (key %s, seq %d) was delivered but never committed by the suite", m.ID, m.PartitionKey, m.Seq))
		case keyOf[m.ID] != m.PartitionKey:
			errs = append(errs, fmt.Errorf("event %s delivered with partition key %q", m.ID, m.PartitionKey))
		case i > next[m.PartitionKey]:
			errs = append(errs, fmt.Errorf("key %s: event %s (#%d, seq %d) delivered before event %s (#%d) was ever delivered",
				m.PartitionKey, m.ID, i, m.Seq, want[m.PartitionKey][next[m.PartitionKey]], next[m.PartitionKey]))
		case i == next[m.PartitionKey]:
			next[m.PartitionKey]++
		}
		if len(errs) >= 20 {
			break
		}
	}
	return errs
}
