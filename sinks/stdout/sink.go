// Package stdout is a sink that writes one JSON line per message to an io.Writer (standard
// output by default): a way to watch a relay publish on a laptop (`sink: stdout` in `outboxkit
// relay`), to pipe events into jq or another program, or to see in a test what was sent.
//
// Each line is a CloudEvents 1.0 event in structured content mode (the JSON event format), with
// the outbox's fields as extension attributes and the event headers in one extra member:
//
//	{"specversion":"1.0","id":"0190f7c4-...","source":"outboxkit","type":"order.placed",
//	 "subject":"order/42","time":"2026-12-05T08:04:06.001663Z","datacontenttype":"application/json",
//	 "destination":"orders","partitionkey":"order/42","aggregatetype":"order","aggregateid":"42",
//	 "aggregateversion":3,"headers":{"traceparent":"00-..."},"data":{"total":1250}}
//
// (one line in the output). A payload that is compact JSON (as json.Marshal writes it) is
// embedded as data, byte for byte; any other non-empty payload (binary, text, JSON with
// whitespace between tokens) is data_base64; an empty payload has neither. datacontenttype is
// the event's "content-type" header when set, else application/json for data, else absent.
// subject is AggregateType/AggregateID; time the outbox's CreatedAt (absent when unknown);
// destination the address the router chose; partitionkey the ordering key (core.Message.GroupID,
// the CloudEvents partitioning extension); aggregateversion, schemaid, tenant, causationid and
// correlationid are present when set. headers is not a CloudEvents attribute (a strict
// CloudEvents parser may refuse a map-valued member): it holds every event header as it was
// written, traceparent and content-type included. Line decodes a line back.
//
// A message is acknowledged once its whole line was written (the Writer returned); the sink
// does not sync the file. Lines of one Send are written with one Write call, in order, and
// concurrent Sends do not interleave: per partition key, lines appear in the order sent.
package stdout

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// SpecVersion is the CloudEvents version of the lines.
const SpecVersion = "1.0"

// DefaultSource is the CloudEvents source of the lines unless Options.Source is set.
const DefaultSource = "outboxkit"

// Options configure a Sink. The zero value is valid.
type Options struct {
	// Source is the CloudEvents source attribute of every line. Default DefaultSource.
	Source string
}

// Sink writes one JSON line per message. It is safe for concurrent use.
type Sink struct {
	mu     sync.Mutex
	w      io.Writer
	source string
}

// New returns a sink writing to w; nil w is os.Stdout. opts may be nil.
func New(w io.Writer, opts *Options) *Sink {
	if w == nil {
		w = os.Stdout
	}
	s := &Sink{w: w, source: DefaultSource}
	if opts != nil && opts.Source != "" {
		s.source = opts.Source
	}
	return s
}

// Line is one line of the sink's output, as encoding/json decodes it.
type Line struct {
	SpecVersion      string            `json:"specversion"`
	ID               string            `json:"id"`
	Source           string            `json:"source"`
	Type             string            `json:"type"`
	Subject          string            `json:"subject,omitempty"`
	Time             *time.Time        `json:"time,omitempty"`
	DataContentType  string            `json:"datacontenttype,omitempty"`
	Destination      string            `json:"destination"`
	PartitionKey     string            `json:"partitionkey"`
	AggregateType    string            `json:"aggregatetype"`
	AggregateID      string            `json:"aggregateid"`
	AggregateVersion int64             `json:"aggregateversion,omitempty"`
	SchemaID         string            `json:"schemaid,omitempty"`
	Tenant           string            `json:"tenant,omitempty"`
	CausationID      string            `json:"causationid,omitempty"`
	CorrelationID    string            `json:"correlationid,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	Data             json.RawMessage   `json:"data,omitempty"`
	DataBase64       []byte            `json:"data_base64,omitempty"`
}

// Payload returns the payload the line carries: data as it is, or data_base64 decoded.
func (l *Line) Payload() []byte {
	if len(l.Data) > 0 {
		return l.Data
	}
	return l.DataBase64
}

// ErrBadLine is wrapped by DecodeLine's errors.
var ErrBadLine = errors.New("stdout sink: not a line of the sink")

// DecodeLine decodes one line of the sink's output (with or without its newline).
func DecodeLine(b []byte) (Line, error) {
	var l Line
	if err := json.Unmarshal(b, &l); err != nil {
		return Line{}, fmt.Errorf("%w: %v", ErrBadLine, err)
	}
	if l.SpecVersion != SpecVersion || l.ID == "" {
		return Line{}, fmt.Errorf("%w: want specversion %q and an id", ErrBadLine, SpecVersion)
	}
	return l, nil
}

// line is m's line.
func (s *Sink) line(m *core.Message) Line {
	ev := &m.Event
	l := Line{SpecVersion: SpecVersion, ID: ev.ID, Source: s.source, Type: ev.Type, Subject: ev.AggregateType + "/" + ev.AggregateID,
		DataContentType: ev.Headers["content-type"], Destination: m.Destination, PartitionKey: m.GroupID,
		AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, AggregateVersion: ev.AggregateVersion,
		SchemaID: ev.SchemaID, Tenant: ev.Tenant, CausationID: ev.CausationID, CorrelationID: ev.CorrelationID, Headers: ev.Headers}
	if !m.CreatedAt.IsZero() {
		t := m.CreatedAt.UTC()
		l.Time = &t
	}
	switch {
	case len(ev.Payload) == 0:
	case isCompactJSON(ev.Payload):
		l.Data = ev.Payload
		if l.DataContentType == "" {
			l.DataContentType = "application/json"
		}
	default:
		l.DataBase64 = ev.Payload
	}
	return l
}

// isCompactJSON reports whether b is JSON without insignificant whitespace: encoding/json
// writes it unchanged as data (it compacts any other JSON).
func isCompactJSON(b []byte) bool {
	if !json.Valid(b) {
		return false
	}
	var c bytes.Buffer
	return json.Compact(&c, b) == nil && bytes.Equal(c.Bytes(), b)
}

// Send writes one line per message, all with one Write. A message is acknowledged when its line
// was written whole; the messages after a short write get the Writer's error (retryable), and
// all get ctx's error when it ended before the write.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	out := make([]error, len(msgs))
	if len(msgs) == 0 {
		return out
	}
	if err := ctx.Err(); err != nil {
		return core.Outcomes(len(msgs), err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	ends := make([]int, len(msgs))
	for i := range msgs {
		if err := enc.Encode(s.line(&msgs[i])); err != nil { // not reached: every field encodes
			return core.Outcomes(len(msgs), core.Permanent(fmt.Errorf("stdout sink: event %s: %w", msgs[i].ID, err)))
		}
		ends[i] = buf.Len()
	}
	s.mu.Lock()
	n, err := s.w.Write(buf.Bytes())
	s.mu.Unlock()
	if err == nil && n < buf.Len() {
		err = io.ErrShortWrite
	}
	if err != nil {
		err = fmt.Errorf("stdout sink: write: %w", err)
		for i, end := range ends {
			if n < end {
				out[i] = err
			}
		}
	}
	return out
}
