// Package ce is the one mapping between an outbox message and the CloudEvents attributes of a
// protocol binding in binary content mode, shared by every sink that carries an event as a
// body plus named metadata (Kafka record headers, HTTP headers, AMQP application properties,
// NATS headers, Redis stream fields) and by its consumer.
//
// Each broker's package names its Binding: the prefix of the CloudEvents attributes ("ce_" for
// Kafka, "ce-" for HTTP and NATS, "cloudEvents:" for AMQP), the name of the content-type
// metadata, and the prefix of the event's other headers. The attributes are the same for all:
//
//	specversion      "1.0"
//	id               the event ID
//	source           the sink's Source option
//	type             the event type
//	time             the outbox CreatedAt, RFC 3339 UTC with nanoseconds, when known
//	subject          AggregateType + "/" + AggregateID
//	aggregatetype    AggregateType (extension)
//	aggregateid      AggregateID (extension)
//	aggregateversion AggregateVersion, decimal, when > 0 (extension)
//	partitionkey     the partition key (extension, CloudEvents partitioning)
//	schemaid         SchemaID, when set (extension)
//	tenant           Tenant, when set (extension)
//	causationid      CausationID, when set (extension)
//	correlationid    CorrelationID, when set (extension)
//	traceparent      the event's traceparent header (extension, CloudEvents distributed tracing)
//	tracestate       the event's tracestate header (same)
//
// The event's content-type header (else the sink's default) travels as the binding's
// content-type metadata; every other event header k travels as HeaderPrefix+k.
package ce

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// SpecVersion is the CloudEvents version of the attributes.
const SpecVersion = "1.0"

// The attribute names, without a binding's prefix.
const (
	AttrSpecVersion      = "specversion"
	AttrID               = "id"
	AttrSource           = "source"
	AttrType             = "type"
	AttrTime             = "time"
	AttrSubject          = "subject"
	AttrAggregateType    = "aggregatetype"
	AttrAggregateID      = "aggregateid"
	AttrAggregateVersion = "aggregateversion"
	AttrPartitionKey     = "partitionkey"
	AttrSchemaID         = "schemaid"
	AttrTenant           = "tenant"
	AttrCausationID      = "causationid"
	AttrCorrelationID    = "correlationid"
	AttrTraceparent      = "traceparent"
	AttrTracestate       = "tracestate"
)

// The event headers that travel as metadata of their own rather than under HeaderPrefix.
const (
	EventHeaderContentType = "content-type"
	EventHeaderTraceparent = "traceparent"
	EventHeaderTracestate  = "tracestate"
)

// ErrMalformed is wrapped by every error of Decode: the metadata do not follow the mapping.
// Each broker's consumer wraps it in its own ErrUndecodable and dead-letters the message.
var ErrMalformed = errors.New("metadata do not follow the outboxkit CloudEvents mapping")

// Binding names the metadata of one protocol binding.
type Binding struct {
	// Prefix starts every CloudEvents attribute's name: "ce_" (Kafka), "ce-" (HTTP, NATS).
	Prefix string
	// ContentType is the name of the content-type metadata: "content-type" (Kafka, NATS),
	// "Content-Type" (HTTP).
	ContentType string
	// HeaderPrefix starts the name of every other event header: "outbox.h." (Kafka).
	HeaderPrefix string
	// Fold, when true, compares names case-insensitively on Decode (HTTP headers): the other
	// event headers' names come back lowercased.
	Fold bool
}

// Encode calls set once for each metadata entry of m, attributes first in the order of the
// package documentation, then the content type (the event's content-type header, else
// contentType; none when both are empty), then the other event headers (in map order). Empty
// values are left out.
func (b Binding) Encode(m *core.Message, source, contentType string, set func(name, value string)) {
	ev := &m.Event
	add := func(attr, v string) {
		if v != "" {
			set(b.Prefix+attr, v)
		}
	}
	add(AttrSpecVersion, SpecVersion)
	add(AttrID, ev.ID)
	add(AttrSource, source)
	add(AttrType, ev.Type)
	if !m.CreatedAt.IsZero() {
		add(AttrTime, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	add(AttrSubject, ev.AggregateType+"/"+ev.AggregateID)
	add(AttrAggregateType, ev.AggregateType)
	add(AttrAggregateID, ev.AggregateID)
	if ev.AggregateVersion > 0 {
		add(AttrAggregateVersion, strconv.FormatInt(ev.AggregateVersion, 10))
	}
	add(AttrPartitionKey, m.GroupID)
	add(AttrSchemaID, ev.SchemaID)
	add(AttrTenant, ev.Tenant)
	add(AttrCausationID, ev.CausationID)
	add(AttrCorrelationID, ev.CorrelationID)
	add(AttrTraceparent, ev.Headers[EventHeaderTraceparent])
	add(AttrTracestate, ev.Headers[EventHeaderTracestate])
	if ct := ev.Headers[EventHeaderContentType]; ct != "" {
		contentType = ct
	}
	if contentType != "" {
		set(b.ContentType, contentType)
	}
	for k, v := range ev.Headers {
		switch k {
		case EventHeaderContentType, EventHeaderTraceparent, EventHeaderTracestate:
		default:
			set(b.HeaderPrefix+k, v)
		}
	}
}

// Decoder rebuilds an event from its metadata, one entry at a time: call Add for each entry
// (unknown names are ignored), then Event.
type Decoder struct {
	b       Binding
	ev      core.Event
	created time.Time
	spec    string
	err     error
}

// NewDecoder returns an empty decoder of binding b.
func (b Binding) NewDecoder() *Decoder { return &Decoder{b: b} }

// Add takes one metadata entry.
func (d *Decoder) Add(name, v string) {
	if d.err != nil {
		return
	}
	b := d.b
	if b.Fold {
		// HTTP header names are case-insensitive: compare lowercased names and prefixes.
		name = strings.ToLower(name)
		b.Prefix, b.ContentType, b.HeaderPrefix = strings.ToLower(b.Prefix), strings.ToLower(b.ContentType), strings.ToLower(b.HeaderPrefix)
	}
	if name == b.ContentType {
		d.setHeader(EventHeaderContentType, v)
		return
	}
	attr, ok := strings.CutPrefix(name, b.Prefix)
	if !ok {
		if k, ok := strings.CutPrefix(name, b.HeaderPrefix); ok && k != "" {
			d.setHeader(k, v)
		}
		return
	}
	ev := &d.ev
	switch attr {
	case AttrSpecVersion:
		d.spec = v
	case AttrID:
		ev.ID = v
	case AttrType:
		ev.Type = v
	case AttrTime:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			d.err = fmt.Errorf("%w: %s%s %q", ErrMalformed, b.Prefix, AttrTime, v)
			return
		}
		d.created = t.UTC()
	case AttrAggregateType:
		ev.AggregateType = v
	case AttrAggregateID:
		ev.AggregateID = v
	case AttrAggregateVersion:
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			d.err = fmt.Errorf("%w: %s%s %q", ErrMalformed, b.Prefix, AttrAggregateVersion, v)
			return
		}
		ev.AggregateVersion = n
	case AttrPartitionKey:
		ev.PartitionKey = v
	case AttrSchemaID:
		ev.SchemaID = v
	case AttrTenant:
		ev.Tenant = v
	case AttrCausationID:
		ev.CausationID = v
	case AttrCorrelationID:
		ev.CorrelationID = v
	case AttrTraceparent:
		d.setHeader(EventHeaderTraceparent, v)
	case AttrTracestate:
		d.setHeader(EventHeaderTracestate, v)
	}
}

func (d *Decoder) setHeader(k, v string) {
	if d.ev.Headers == nil {
		d.ev.Headers = map[string]string{}
	}
	d.ev.Headers[k] = v
}

// Event returns the event with payload, and its outbox CreatedAt (zero when the metadata have
// no time). key, the broker's own partition key of the message (a Kafka record key), is the
// partition key when the metadata have none. An error wraps ErrMalformed.
func (d *Decoder) Event(key string, payload []byte) (core.Event, time.Time, error) {
	p := d.b.Prefix
	switch {
	case d.err != nil:
		return core.Event{}, time.Time{}, d.err
	case d.spec != SpecVersion:
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %s%s %q, want %q", ErrMalformed, p, AttrSpecVersion, d.spec, SpecVersion)
	case d.ev.ID == "" || d.ev.Type == "" || d.ev.AggregateType == "" || d.ev.AggregateID == "":
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %[2]sid, %[2]stype, %[2]saggregatetype and %[2]saggregateid are required", ErrMalformed, p)
	}
	ev := d.ev
	if ev.PartitionKey == "" {
		ev.PartitionKey = key
	}
	ev.Payload = payload
	return ev, d.created, nil
}
