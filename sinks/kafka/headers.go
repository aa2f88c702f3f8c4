package kafka

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
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
const SpecVersion = "1.0"

// The event headers that travel as their own CloudEvents attribute.
const (
	eventHeaderContentType = "content-type"
	eventHeaderTraceparent = "traceparent"
	eventHeaderTracestate  = "tracestate"
)

func encodeHeaders(m *core.Message, source, contentType string) []kgo.RecordHeader {
	ev := &m.Event
	h := make([]kgo.RecordHeader, 0, 12+len(ev.Headers))
	add := func(k, v string) {
		if v != "" {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderSpecVersion, SpecVersion)
	add(HeaderID, ev.ID)
	add(HeaderSource, source)
	add(HeaderType, ev.Type)
	if !m.CreatedAt.IsZero() {
		add(HeaderTime, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	add(HeaderSubject, ev.AggregateType+"/"+ev.AggregateID)
	if ct := ev.Headers[eventHeaderContentType]; ct != "" {
		contentType = ct
	}
	add(HeaderContentType, contentType)
	add(HeaderAggregateType, ev.AggregateType)
	add(HeaderAggregateID, ev.AggregateID)
	if ev.AggregateVersion > 0 {
		add(HeaderAggregateVersion, strconv.FormatInt(ev.AggregateVersion, 10))
	}
	add(HeaderPartitionKey, m.GroupID)
	add(HeaderSchemaID, ev.SchemaID)
	add(HeaderTenant, ev.Tenant)
	add(HeaderCausationID, ev.CausationID)
	add(HeaderCorrelationID, ev.CorrelationID)
	add(HeaderTraceparent, ev.Headers[eventHeaderTraceparent])
	add(HeaderTracestate, ev.Headers[eventHeaderTracestate])
	for k, v := range ev.Headers {
		switch k {
		case eventHeaderContentType, eventHeaderTraceparent, eventHeaderTracestate:
		default:
			h = append(h, kgo.RecordHeader{Key: HeaderPrefix + k, Value: []byte(v)})
		}
	}
	return h
}

// decodeRecord rebuilds the event a record carries and its outbox CreatedAt (zero when the
// record has no ce_time).
func decodeRecord(r *kgo.Record) (core.Event, time.Time, error) {
	var ev core.Event
	var created time.Time
	bad := func(format string, args ...any) (core.Event, time.Time, error) {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %s/%d@%d: %s", ErrUndecodable, r.Topic, r.Partition, r.Offset, fmt.Sprintf(format, args...))
	}
	var spec string
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderSpecVersion:
			spec = v
		case HeaderID:
			ev.ID = v
		case HeaderType:
			ev.Type = v
		case HeaderTime:
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return bad("ce_time %q", v)
			}
			created = t.UTC()
		case HeaderAggregateType:
			ev.AggregateType = v
		case HeaderAggregateID:
			ev.AggregateID = v
		case HeaderAggregateVersion:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return bad("ce_aggregateversion %q", v)
			}
			ev.AggregateVersion = n
		case HeaderPartitionKey:
			ev.PartitionKey = v
		case HeaderSchemaID:
			ev.SchemaID = v
		case HeaderTenant:
			ev.Tenant = v
		case HeaderCausationID:
			ev.CausationID = v
		case HeaderCorrelationID:
			ev.CorrelationID = v
		case HeaderContentType:
			setHeader(&ev, eventHeaderContentType, v)
		case HeaderTraceparent:
			setHeader(&ev, eventHeaderTraceparent, v)
		case HeaderTracestate:
			setHeader(&ev, eventHeaderTracestate, v)
		default:
			if k, ok := strings.CutPrefix(h.Key, HeaderPrefix); ok && k != "" {
				setHeader(&ev, k, v)
			}
		}
	}
	switch {
	case spec != SpecVersion:
		return bad("ce_specversion %q, want %q", spec, SpecVersion)
	case ev.ID == "" || ev.Type == "" || ev.AggregateType == "" || ev.AggregateID == "":
		return bad("ce_id, ce_type, ce_aggregatetype and ce_aggregateid are required")
	}
	if ev.PartitionKey == "" {
		ev.PartitionKey = string(r.Key)
	}
	ev.Payload = r.Value
	return ev, created, nil
}

func setHeader(ev *core.Event, k, v string) {
	if ev.Headers == nil {
		ev.Headers = map[string]string{}
	}
	ev.Headers[k] = v
}
