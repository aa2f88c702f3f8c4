package redis

import (
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// Stream entry field names: the CloudEvents attributes of package sinks/internal/ce with the
// prefix "ce_" (as in the CloudEvents Kafka binding), the content type, the other event
// headers, and the payload.
const (
	FieldSpecVersion = "ce_specversion" // "1.0"
	FieldID          = "ce_id"          // event ID
	FieldType        = "ce_type"        // event Type
	FieldContentType = "content-type"   // the event's content-type header, or Options.ContentType
	// FieldHeaderPrefix prefixes every other event header: Headers["k"] travels as the field
	// "outbox.h.k".
	FieldHeaderPrefix = "outbox.h."
	// FieldPayload is the payload, byte for byte (an empty string for an empty payload).
	FieldPayload = "payload"
)

// binding is the mapping of package sinks/internal/ce onto stream entry fields.
var binding = ce.Binding{Prefix: "ce_", ContentType: FieldContentType, HeaderPrefix: FieldHeaderPrefix}

// encodeFields returns the XADD field-value list of m (attributes first, the payload last)
// and its size in bytes (names and values).
func encodeFields(m *core.Message, source, contentType string) ([]any, int) {
	fields := make([]any, 0, 2*(14+len(m.Headers)))
	size := 0
	binding.Encode(m, source, contentType, func(k, v string) {
		fields = append(fields, k, v)
		size += len(k) + len(v)
	})
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	fields = append(fields, FieldPayload, payload)
	size += len(FieldPayload) + len(payload)
	return fields, size
}

// decodeEntry rebuilds the event a stream entry carries and its outbox CreatedAt (zero when
// the entry has no ce_time).
func decodeEntry(stream, id string, values map[string]any) (core.Event, time.Time, error) {
	d := binding.NewDecoder()
	var payload []byte
	havePayload := false
	for k, v := range values {
		s, ok := v.(string)
		if !ok {
			return core.Event{}, time.Time{}, fmt.Errorf("%w: %s %s: field %q is not a string", ErrUndecodable, stream, id, k)
		}
		if k == FieldPayload {
			payload, havePayload = []byte(s), true
			continue
		}
		d.Add(k, s)
	}
	if !havePayload {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %s %s: no %q field", ErrUndecodable, stream, id, FieldPayload)
	}
	ev, created, err := d.Event("", payload)
	if err != nil {
		return core.Event{}, time.Time{}, fmt.Errorf("%w: %s %s: %w", ErrUndecodable, stream, id, err)
	}
	return ev, created, nil
}
