package core

import (
	"context"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
)

// Message is one event on its way to a sink.
type Message struct {
	driver.Record

	// Destination is the sink address the Router chose (queue URL, topic ARN, ...).
	Destination string
	// DedupID is the deduplication id a broker should use: the event ID.
	DedupID string
	// GroupID is the ordering group: the partition key.
	GroupID string
}

// Sink delivers messages to a broker.
//
// Send returns exactly one outcome per message, in order: nil means the broker durably
// acknowledged that message; an error means it did not (IsPermanent tells whether a retry can
// help). Sinks never retry on their own; the relay owns retries, backoff and batching.
//
// Order under partial failure: per GroupID, the acknowledged messages must form a prefix of
// the messages given. Once one message of a group fails, no later message of that group in the
// same call may be acknowledged: a sink does not send it once the failure is known, and reports
// ErrNotAcknowledged for it even when it was already part of the same broker request (brokers
// such as SQS handle the entries of one request independently, so such a message may arrive as
// a duplicate later). The relay resends from the first unacknowledged message of each group.
//
// Send must be safe for concurrent use: a Relay calls it from up to RelayOptions.InFlight
// goroutines at once (never with two calls holding messages of one group), and several relays
// may share one Sink.
type Sink interface {
	Send(ctx context.Context, msgs []Message) []error
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, msgs []Message) []error

// Send calls f.
func (f SinkFunc) Send(ctx context.Context, msgs []Message) []error { return f(ctx, msgs) }

// Outcomes returns n copies of err: the outcome of a call that failed as a whole.
func Outcomes(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// Router maps an event to a sink address from trusted configuration, never from the payload.
// An event it cannot route gets an error wrapping ErrUnknownDestination (permanent).
type Router interface {
	Route(ev *Event) (string, error)
}

// StaticRouter routes an event with a Destination by ByDestination alone, and an event without
// one by ByType alone; an event its map does not cover goes to Default. A Destination that
// ByDestination does not map never falls through to ByType: a Destination names where the
// producer meant the event to go, so a typo must not route it by its Type instead. Without a
// Default such an event fails with ErrUnknownDestination (permanent).
type StaticRouter struct {
	ByDestination map[string]string
	ByType        map[string]string
	Default       string // empty: unrouted events are an error
}

// Route implements Router.
func (r StaticRouter) Route(ev *Event) (string, error) {
	if ev.Destination != "" {
		if d, ok := r.ByDestination[ev.Destination]; ok {
			return d, nil
		}
	} else if d, ok := r.ByType[ev.Type]; ok {
		return d, nil
	}
	if r.Default != "" {
		return r.Default, nil
	}
	if ev.Destination != "" {
		return "", fmt.Errorf("%w: event %s has Destination %q, which is not a key of StaticRouter.ByDestination, and there is no Default (an event with a Destination is routed by ByDestination alone, never by its Type %q): add ByDestination[%q]",
			ErrUnknownDestination, ev.ID, ev.Destination, ev.Type, ev.Destination)
	}
	return "", fmt.Errorf("%w: event %s has no Destination and its Type %q is not a key of StaticRouter.ByType, and there is no Default: add ByType[%q], or give the event a Destination that ByDestination maps",
		ErrUnknownDestination, ev.ID, ev.Type, ev.Type)
}

// checkRouter refuses a router that can route nothing: a nil one, and a StaticRouter with no
// Default and empty maps (every event would be parked with ErrUnknownDestination).
func checkRouter(router Router) error {
	var sr *StaticRouter
	switch r := router.(type) {
	case nil:
		return &OptionError{Field: "router", Reason: "must not be nil"}
	case StaticRouter:
		sr = &r
	case *StaticRouter:
		if r == nil {
			return &OptionError{Field: "router", Reason: "must not be nil"}
		}
		sr = r
	}
	if sr != nil && sr.Default == "" && len(sr.ByDestination) == 0 && len(sr.ByType) == 0 {
		return &OptionError{Field: "router", Reason: "the StaticRouter routes nothing: set Default, ByDestination or ByType"}
	}
	return nil
}

// CheckOutcomes verifies a sink's answer against the sink contract: one outcome per message
// and, per group, acknowledged messages forming a prefix. It returns the first violation.
// The relay applies it to every Send; sink conformance tests use it too.
func CheckOutcomes(msgs []Message, outcomes []error) error {
	if len(outcomes) != len(msgs) {
		return fmt.Errorf("outbox: sink returned %d outcomes for %d messages", len(outcomes), len(msgs))
	}
	failed := map[string]string{}
	for i, m := range msgs {
		if outcomes[i] != nil {
			if _, ok := failed[m.GroupID]; !ok {
				failed[m.GroupID] = m.ID
			}
			continue
		}
		if first, ok := failed[m.GroupID]; ok {
			return fmt.Errorf("outbox: sink acknowledged event %s of group %q after event %s of that group failed", m.ID, m.GroupID, first)
		}
	}
	return nil
}
