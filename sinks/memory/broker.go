// Package memory is an in-process broker that implements core.Sink, for tests, examples and the
// demo. It delivers every accepted message to one channel, in the order accepted, and can inject
// the faults a real broker shows: rejected messages, lost acknowledgements (delivered but
// reported as failed, so the relay resends: a duplicate) and duplicate deliveries.
//
// It keeps the sink contract of core.Sink: one outcome per message and, per group, acknowledged
// messages form a prefix; once one message of a group fails in a call, the later messages of that
// group in the same call are neither delivered nor acknowledged (core.ErrNotAcknowledged).
package memory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/outboxkit/outbox/core"
)

// ErrRejected is the retryable error of an injected rejection.
var ErrRejected = errors.New("memory broker: message rejected")

// ErrAckLost is the retryable error of an injected lost acknowledgement: the message WAS
// delivered.
var ErrAckLost = errors.New("memory broker: acknowledgement lost")

// Options configures a Broker. The zero value is a perfect broker with a 1024-message buffer.
type Options struct {
	// RejectRate is the probability that a message is rejected (not delivered, retryable error).
	RejectRate float64
	// AckLossRate is the probability that a delivered message is reported as failed.
	AckLossRate float64
	// DuplicateRate is the probability that a delivered message is delivered a second time.
	DuplicateRate float64
	// Seed seeds the fault injection; 0 picks a random seed.
	Seed uint64
	// Buffer is the capacity of the delivery channel; Send blocks (until its ctx ends) while it is
	// full. Default 1024; at most MaxBuffer.
	Buffer int
}

// MaxBuffer bounds Options.Buffer (the channel is allocated at once).
const MaxBuffer = 1 << 20

// Stats counts what a Broker did.
type Stats struct {
	Accepted   uint64 // messages delivered (each Send that delivered a message counts once)
	Rejected   uint64 // injected rejections and explicit Reject rules
	AckLost    uint64 // delivered but reported as failed
	Duplicated uint64 // extra deliveries
	HeldBack   uint64 // not sent because an earlier message of the group failed
}

// Broker is an in-process message broker and a core.Sink.
type Broker struct {
	o   Options
	out chan core.Message

	mu     sync.Mutex
	rnd    *rand.Rand
	reject map[string]error // event ID -> error to return instead of delivering

	accepted, rejected, ackLost, duplicated, heldBack atomic.Uint64
}

// NewBroker returns a broker. opts may be nil.
func NewBroker(opts *Options) (*Broker, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"RejectRate", o.RejectRate}, {"AckLossRate", o.AckLossRate}, {"DuplicateRate", o.DuplicateRate}} {
		if f.v < 0 || f.v > 1 {
			return nil, &core.OptionError{Field: f.name, Reason: "must be between 0 and 1"}
		}
	}
	if o.Buffer < 0 || o.Buffer > MaxBuffer {
		return nil, &core.OptionError{Field: "Buffer", Reason: fmt.Sprintf("must be between 0 (default) and %d", MaxBuffer)}
	}
	if o.Buffer == 0 {
		o.Buffer = 1024
	}
	seed := o.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	return &Broker{
		o:      o,
		out:    make(chan core.Message, o.Buffer),
		rnd:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		reject: map[string]error{},
	}, nil
}

// Deliveries is the channel consumers read delivered messages from.
func (b *Broker) Deliveries() <-chan core.Message { return b.out }

// Reject makes every Send of the event with this ID fail with err instead of delivering it,
// until Reject is called again with a nil err. Wrap err with core.Permanent for a permanent
// rejection.
func (b *Broker) Reject(eventID string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.reject, eventID)
		return
	}
	b.reject[eventID] = err
}

// Stats returns the broker's counters.
func (b *Broker) Stats() Stats {
	return Stats{
		Accepted: b.accepted.Load(), Rejected: b.rejected.Load(), AckLost: b.ackLost.Load(),
		Duplicated: b.duplicated.Load(), HeldBack: b.heldBack.Load(),
	}
}

// fate decides what happens to one message.
type fate int

const (
	deliver fate = iota
	rejectIt
	loseAck
)

func (b *Broker) decide(id string) (fate, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err, ok := b.reject[id]; ok {
		return rejectIt, false, err
	}
	switch {
	case b.o.RejectRate > 0 && b.rnd.Float64() < b.o.RejectRate:
		return rejectIt, false, ErrRejected
	case b.o.AckLossRate > 0 && b.rnd.Float64() < b.o.AckLossRate:
		return loseAck, false, nil
	}
	dup := b.o.DuplicateRate > 0 && b.rnd.Float64() < b.o.DuplicateRate
	return deliver, dup, nil
}

// Send implements core.Sink.
func (b *Broker) Send(ctx context.Context, msgs []core.Message) []error {
	out := make([]error, len(msgs))
	failed := map[string]bool{}
	for i, m := range msgs {
		if failed[m.GroupID] {
			out[i] = core.ErrNotAcknowledged
			b.heldBack.Add(1)
			continue
		}
		if err := ctx.Err(); err != nil {
			out[i] = err
			failed[m.GroupID] = true
			continue
		}
		f, dup, err := b.decide(m.ID)
		if f == rejectIt {
			out[i] = fmt.Errorf("event %s: %w", m.ID, err)
			failed[m.GroupID] = true
			b.rejected.Add(1)
			continue
		}
		if err := b.put(ctx, m); err != nil {
			out[i] = err
			failed[m.GroupID] = true
			continue
		}
		b.accepted.Add(1)
		if dup && b.put(ctx, m) == nil {
			b.duplicated.Add(1)
		}
		if f == loseAck {
			out[i] = fmt.Errorf("event %s: %w", m.ID, ErrAckLost)
			failed[m.GroupID] = true
			b.ackLost.Add(1)
		}
	}
	return out
}

func (b *Broker) put(ctx context.Context, m core.Message) error {
	select {
	case b.out <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
