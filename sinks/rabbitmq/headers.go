package rabbitmq

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// Header names (AMQP 0-9-1 message headers, the application properties): the CloudEvents
// AMQP binding's "cloudEvents:" prefix, binary content mode.
const (
	HeaderSpecVersion      = "cloudEvents:specversion"      // "1.0"
	HeaderID               = "cloudEvents:id"               // event ID (also the message-id property)
	HeaderSource           = "cloudEvents:source"           // Options.Source
	HeaderType             = "cloudEvents:type"             // event Type
	HeaderTime             = "cloudEvents:time"             // outbox CreatedAt, RFC 3339 UTC, when known
	HeaderSubject          = "cloudEvents:subject"          // AggregateType + "/" + AggregateID
	HeaderAggregateType    = "cloudEvents:aggregatetype"    // extension: AggregateType
	HeaderAggregateID      = "cloudEvents:aggregateid"      // extension: AggregateID
	HeaderAggregateVersion = "cloudEvents:aggregateversion" // extension: AggregateVersion, decimal, when > 0
	HeaderPartitionKey     = "cloudEvents:partitionkey"     // extension (CloudEvents partitioning): the partition key
	HeaderSchemaID         = "cloudEvents:schemaid"         // extension: SchemaID, when set
	HeaderTenant           = "cloudEvents:tenant"           // extension: Tenant, when set
	HeaderCausationID      = "cloudEvents:causationid"      // extension: CausationID, when set
	HeaderCorrelationID    = "cloudEvents:correlationid"    // extension: CorrelationID, when set
	HeaderTraceparent      = "cloudEvents:traceparent"      // extension (distributed tracing): the event's traceparent header
	HeaderTracestate       = "cloudEvents:tracestate"       // extension (distributed tracing): the event's tracestate header
	// HeaderPrefix prefixes every other event header: Headers["k"] travels as "outbox.h.k".
	HeaderPrefix = "outbox.h."
)

// SpecVersion is the CloudEvents version the headers follow.
const SpecVersion = ce.SpecVersion

// contentTypeName is the binding's name of the content type: Encode's entry of that name
// becomes the AMQP content-type property, never a header.
const contentTypeName = "content-type"

var binding = ce.Binding{Prefix: "cloudEvents:", ContentType: contentTypeName, HeaderPrefix: HeaderPrefix}

// publishing builds the AMQP message of m: the payload as the body, the event ID as the
// message-id, persistent delivery, the outbox CreatedAt as the timestamp, the content type as
// the content-type property and the CloudEvents attributes and other event headers as
// headers. size approximates its bytes on the wire (body, headers and properties).
func publishing(m *core.Message, source, contentType string) (p amqp.Publishing, size int) {
	p = amqp.Publishing{Headers: make(amqp.Table, 12+len(m.Headers)), DeliveryMode: amqp.Persistent,
		MessageId: m.ID, Body: m.Payload}
	if !m.CreatedAt.IsZero() {
		p.Timestamp = m.CreatedAt
	}
	size = len(m.Payload) + len(m.ID) + 64
	binding.Encode(m, source, contentType, func(k, v string) {
		if k == contentTypeName {
			p.ContentType = v
			size += len(v)
			return
		}
		p.Headers[k] = v
		size += len(k) + len(v) + 6
	})
	return p, size
}

// decodeDelivery rebuilds the event a delivery carries and its outbox CreatedAt (zero when
// the message has no cloudEvents:time).
func decodeDelivery(d *amqp.Delivery) (core.Event, time.Time, error) {
	dec := binding.NewDecoder()
	for k, v := range d.Headers {
		switch v := v.(type) {
		case string:
			dec.Add(k, v)
		case []byte:
			dec.Add(k, string(v))
		}
	}
	if d.ContentType != "" {
		dec.Add(contentTypeName, d.ContentType)
	}
	ev, created, err := dec.Event("", d.Body)
	if err != nil {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: delivery %d (message-id %q): %w", ErrUndecodable, d.DeliveryTag, d.MessageId, err)
	}
	return ev, created, nil
}
