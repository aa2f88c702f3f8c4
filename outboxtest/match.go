package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Source is what a check reads: the events a transaction, a database or a sink holds, in the
// order they were written (or sent).
type Source interface {
	Records(ctx context.Context) ([]driver.Record, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context) ([]driver.Record, error)

// Records calls f.
func (f SourceFunc) Records(ctx context.Context) ([]driver.Record, error) { return f(ctx) }

// Match selects events. A zero field matches anything; the zero Match matches every event.
type Match struct {
	ID            string
	Type          string
	AggregateType string
	AggregateID   string
	Destination   string
	// Payload, when not nil, must return true for the event's payload.
	Payload func(payload []byte) bool
	// PayloadDesc describes Payload in failure messages. Default "a predicate".
	PayloadDesc string
}

// Matches reports whether ev matches m.
func (m Match) Matches(ev core.Event) bool {
	for _, f := range [][2]string{
		{m.ID, ev.ID}, {m.Type, ev.Type}, {m.AggregateType, ev.AggregateType},
		{m.AggregateID, ev.AggregateID}, {m.Destination, ev.Destination},
	} {
		if f[0] != "" && f[0] != f[1] {
			return false
		}
	}
	return m.Payload == nil || m.Payload(ev.Payload)
}

// String describes m, e.g. `type=order.placed aggregate_id=42`.
func (m Match) String() string {
	var parts []string
	for _, f := range []struct{ k, v string }{
		{"id", m.ID}, {"type", m.Type}, {"aggregate_type", m.AggregateType},
		{"aggregate_id", m.AggregateID}, {"destination", m.Destination},
	} {
		if f.v != "" {
			parts = append(parts, f.k+"="+f.v)
		}
	}
	if m.Payload != nil {
		d := m.PayloadDesc
		if d == "" {
			d = "a predicate"
		}
		parts = append(parts, "payload matching "+d)
	}
	if len(parts) == 0 {
		return "any event"
	}
	return strings.Join(parts, " ")
}

// ErrMismatch is wrapped by the errors of Written and NotWritten when the events are not as
// expected (as opposed to an error reading the Source).
var ErrMismatch = errors.New("outboxtest: events do not match")

// MismatchError says what was expected and lists every event the Source held.
type MismatchError struct {
	Match   Match
	Want    string // "written" or "not written"
	Records []driver.Record
	Matched []driver.Record
}

func (e *MismatchError) Error() string {
	var b strings.Builder
	if e.Want == "written" {
		fmt.Fprintf(&b, "outboxtest: no event matching %s was written", e.Match)
		if len(e.Records) == 0 {
			b.WriteString("; nothing was written")
			return b.String()
		}
		fmt.Fprintf(&b, "; written instead (%d):", len(e.Records))
		for _, r := range e.Records {
			b.WriteString("\n\t" + Describe(r.Event))
		}
		return b.String()
	}
	fmt.Fprintf(&b, "outboxtest: %d event(s) matching %s were written, want none:", len(e.Matched), e.Match)
	for _, r := range e.Matched {
		b.WriteString("\n\t" + Describe(r.Event))
	}
	return b.String()
}

// Unwrap returns ErrMismatch.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// maxShownPayload is how many payload bytes Describe shows.
const maxShownPayload = 120

// Describe renders an event on one line: id, type, aggregate, version, destination and the
// start of the payload.
func Describe(ev core.Event) string {
	p := ev.Payload
	more := ""
	if len(p) > maxShownPayload {
		p, more = p[:maxShownPayload], fmt.Sprintf("... (%d bytes)", len(ev.Payload))
	}
	dest := ev.Destination
	if dest == "" {
		dest = "-"
	}
	return fmt.Sprintf("id=%s type=%s aggregate=%s/%s version=%d destination=%s payload=%q%s",
		ev.ID, ev.Type, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, dest, p, more)
}

// Written returns the events of src that match m, in order. When none does it returns a
// *MismatchError (wrapping ErrMismatch) listing every event src holds.
func Written(ctx context.Context, src Source, m Match) ([]driver.Record, error) {
	all, err := src.Records(ctx)
	if err != nil {
		return nil, fmt.Errorf("outboxtest: read events: %w", err)
	}
	matched := filter(all, m)
	if len(matched) == 0 {
		return nil, &MismatchError{Match: m, Want: "written", Records: all}
	}
	return matched, nil
}

// NotWritten returns nil when no event of src matches m, else a *MismatchError (wrapping
// ErrMismatch) listing the events that do.
func NotWritten(ctx context.Context, src Source, m Match) error {
	all, err := src.Records(ctx)
	if err != nil {
		return fmt.Errorf("outboxtest: read events: %w", err)
	}
	if matched := filter(all, m); len(matched) > 0 {
		return &MismatchError{Match: m, Want: "not written", Records: all, Matched: matched}
	}
	return nil
}

// RequireWritten fails tb (Fatal) unless an event of src matches m, listing what src holds
// instead; it returns the matching events in order.
func RequireWritten(tb testing.TB, src Source, m Match) []driver.Record {
	tb.Helper()
	recs, err := Written(tb.Context(), src, m)
	if err != nil {
		tb.Fatal(err)
	}
	return recs
}

// RequireNotWritten fails tb (Fatal) when an event of src matches m, listing those events.
func RequireNotWritten(tb testing.TB, src Source, m Match) {
	tb.Helper()
	if err := NotWritten(tb.Context(), src, m); err != nil {
		tb.Fatal(err)
	}
}

func filter(all []driver.Record, m Match) []driver.Record {
	var out []driver.Record
	for _, r := range all {
		if m.Matches(r.Event) {
			out = append(out, r)
		}
	}
	return out
}
