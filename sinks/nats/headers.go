package nats

import (
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// Message header names: the CloudEvents NATS protocol binding, binary content mode.
const (
	HeaderSpecVersion      = "ce-specversion"      // "1.0"
	HeaderID               = "ce-id"               // event ID
	HeaderSource           = "ce-source"           // Options.Source
	HeaderType             = "ce-type"             // event Type
	HeaderTime             = "ce-time"             // outbox CreatedAt, RFC 3339 UTC, when known
	HeaderSubject          = "ce-subject"          // AggregateType + "/" + AggregateID
	HeaderContentType      = "content-type"        // the event's content-type header, or Options.ContentType
	HeaderAggregateType    = "ce-aggregatetype"    // extension: AggregateType
	HeaderAggregateID      = "ce-aggregateid"      // extension: AggregateID
	HeaderAggregateVersion = "ce-aggregateversion" // extension: AggregateVersion, decimal, when > 0
	HeaderPartitionKey     = "ce-partitionkey"     // extension (CloudEvents partitioning): the partition key
	HeaderSchemaID         = "ce-schemaid"         // extension: SchemaID, when set
	HeaderTenant           = "ce-tenant"           // extension: Tenant, when set
	HeaderCausationID      = "ce-causationid"      // extension: CausationID, when set
	HeaderCorrelationID    = "ce-correlationid"    // extension: CorrelationID, when set
	HeaderTraceparent      = "ce-traceparent"      // extension (CloudEvents distributed tracing): the event's traceparent header
	HeaderTracestate       = "ce-tracestate"       // extension (CloudEvents distributed tracing): the event's tracestate header
	// HeaderPrefix prefixes every other event header: Headers["k"] travels as "outbox-h-k".
	HeaderPrefix = "outbox-h-"
	// HeaderMsgID is JetStream's deduplication id header: the event ID (core.Message.DedupID).
	HeaderMsgID = nats.MsgIdHdr // "Nats-Msg-Id"
)

// SpecVersion is the CloudEvents version the headers follow.
const SpecVersion = ce.SpecVersion

// binding is the CloudEvents NATS protocol binding, binary content mode (package
// sinks/internal/ce holds the mapping every sink shares).
var binding = ce.Binding{Prefix: "ce-", ContentType: HeaderContentType, HeaderPrefix: HeaderPrefix}

// encode builds the NATS message of m (headers set as given: NATS header names are
// case-sensitive, nats.Header.Set would canonicalise them).
func encode(m *core.Message, source, contentType string) *nats.Msg {
	h := make(nats.Header, 14+len(m.Headers))
	binding.Encode(m, source, contentType, func(k, v string) { h[k] = []string{v} })
	id := m.DedupID
	if id == "" {
		id = m.ID
	}
	h[HeaderMsgID] = []string{id}
	return &nats.Msg{Subject: m.Destination, Data: m.Payload, Header: h}
}

// encodedSize is the bytes the server counts against max_payload: the header block
// ("NATS/1.0\r\n", a "Name: value\r\n" line per value, "\r\n") plus the payload.
func encodedSize(msg *nats.Msg) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range msg.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + len(msg.Data)
}

// validSubject reports whether s is a subject one can publish to: tokens separated by ".",
// none empty, no whitespace, no wildcard token.
func validSubject(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t\r\n\f\v") {
		return false
	}
	for _, tok := range strings.Split(s, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	return true
}

// decodeMsg rebuilds the event a message carries and its outbox CreatedAt (zero when the
// message has no ce-time).
func decodeMsg(subject string, h nats.Header, data []byte) (core.Event, time.Time, error) {
	d := binding.NewDecoder()
	for k, vs := range h {
		if len(vs) > 0 {
			d.Add(k, vs[0])
		}
	}
	ev, created, err := d.Event("", data)
	if err != nil {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: subject %s: %w", ErrUndecodable, subject, err)
	}
	return ev, created, nil
}
