package kafka

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// Record header names: the CloudEvents Kafka protocol binding, binary content mode.
const (
	HeaderSpecVersion      = "ce_specversion"      // "1.0"
	HeaderID               = "ce_id"               // event ID
	HeaderSource           = "ce_source"           // Options.Source
	HeaderType             = "ce_type"             // event Type
	HeaderTime             = "ce_time"             // outbox CreatedAt, RFC 3339 UTC, when known
	HeaderSubject          = "ce_subject"          // AggregateType + "/" + AggregateID
	HeaderContentType      = "content-type"        // the event's content-type header, or Options.ContentType
	HeaderAggregateType    = "ce_aggregatetype"    // extension: AggregateType
	HeaderAggregateID      = "ce_aggregateid"      // extension: AggregateID
	HeaderAggregateVersion = "ce_aggregateversion" // extension: AggregateVersion, decimal, when > 0
	HeaderPartitionKey     = "ce_partitionkey"     // extension (CloudEvents partitioning): the partition key
	HeaderSchemaID         = "ce_schemaid"         // extension: SchemaID, when set
	HeaderTenant           = "ce_tenant"           // extension: Tenant, when set
	HeaderCausationID      = "ce_causationid"      // extension: CausationID, when set
	HeaderCorrelationID    = "ce_correlationid"    // extension: CorrelationID, when set
	HeaderTraceparent      = "ce_traceparent"      // extension (CloudEvents distributed tracing): the event's traceparent header
	HeaderTracestate       = "ce_tracestate"       // extension (CloudEvents distributed tracing): the event's tracestate header
	// HeaderPrefix prefixes every other event header: Headers["k"] travels as "outbox.h.k".
	HeaderPrefix = "outbox.h."
)

// SpecVersion is the CloudEvents version the headers follow.
const SpecVersion = ce.SpecVersion

// binding is the CloudEvents Kafka protocol binding, binary content mode (package
// sinks/internal/ce holds the mapping every sink shares).
var binding = ce.Binding{Prefix: "ce_", ContentType: HeaderContentType, HeaderPrefix: HeaderPrefix}

func encodeHeaders(m *core.Message, source, contentType string) []kgo.RecordHeader {
	h := make([]kgo.RecordHeader, 0, 12+len(m.Headers))
	binding.Encode(m, source, contentType, func(k, v string) {
		h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
	})
	return h
}

// decodeRecord rebuilds the event a record carries and its outbox CreatedAt (zero when the
// record has no ce_time).
func decodeRecord(r *kgo.Record) (core.Event, time.Time, error) {
	d := binding.NewDecoder()
	for _, h := range r.Headers {
		d.Add(h.Key, string(h.Value))
	}
	ev, created, err := d.Event(string(r.Key), r.Value)
	if err != nil {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %s/%d@%d: %w", ErrUndecodable, r.Topic, r.Partition, r.Offset, err)
	}
	return ev, created, nil
}
