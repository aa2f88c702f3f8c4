package webhook

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// BatchContentType is the Content-Type of a batch request: the CloudEvents HTTP protocol
// binding's batched content mode, a JSON array of events in the JSON event format.
const BatchContentType = "application/cloudevents-batch+json"

// AttrHeaders is the extension attribute of a structured-mode event (batch mode) that holds the
// event's other headers (all but content-type, traceparent and tracestate, which have
// attributes of their own): a JSON object of strings, itself written as a JSON string, since a
// CloudEvents attribute value may not be an object.
const AttrHeaders = "outboxheaders"

// batchIDPrefix starts the webhook-id of a batch request.
const batchIDPrefix = "batch_"

// structured is the CloudEvents binding of the JSON event format: attribute names without a
// prefix; the other headers are collected under headerMark and written as AttrHeaders.
var structured = ce.Binding{Prefix: "", ContentType: "datacontenttype", HeaderPrefix: headerMark}

// headerMark marks the other event headers in structured.Encode's calls (no attribute name
// starts with it).
const headerMark = "\x00"

// BatchID is the webhook-id of a batch request carrying the events ids, in order:
// "batch_" followed by the lowercase hex of the first 16 bytes of the SHA-256 of the ids, each
// followed by a newline. The same events in the same order always get the same id (a resend
// of a batch carries the id of its first attempt), and a batch of other events gets another
// one.
func BatchID(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	return batchIDPrefix + hex.EncodeToString(h.Sum(nil)[:16])
}

// encodeEvent writes m as one event in the JSON event format (structured content mode): the
// attributes of the package documentation as JSON strings, AttrHeaders when m has other
// headers, and data (a payload that is JSON, without leading or trailing whitespace, whose
// content type is absent or JSON) or data_base64 (any other non-empty payload).
func encodeEvent(buf *bytes.Buffer, m *core.Message, source, contentType string) {
	var other map[string]string
	dct := ""
	buf.WriteByte('{')
	first := true
	member := func(name string, v []byte) {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		writeString(buf, name)
		buf.WriteByte(':')
		buf.Write(v)
	}
	structured.Encode(m, source, contentType, func(name, v string) {
		if k, ok := strings.CutPrefix(name, headerMark); ok {
			if other == nil {
				other = map[string]string{}
			}
			other[k] = v
			return
		}
		if name == structured.ContentType {
			dct = v
		}
		member(name, quote(v))
	})
	if other != nil {
		b, _ := json.Marshal(other) // sorted keys: the same headers give the same bytes
		member(AttrHeaders, quote(string(b)))
	}
	p := m.Payload
	switch {
	case len(p) == 0:
	case isJSONType(dct) && embeddable(p):
		member("data", p)
	default:
		member("data_base64", quote(base64.StdEncoding.EncodeToString(p)))
	}
	buf.WriteByte('}')
}

// isJSONType reports whether a datacontenttype lets data be a JSON value: absent (JSON by the
// JSON event format's rule), application/json or a +json type.
func isJSONType(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "text/json"
}

// embeddable reports whether p can be embedded as a JSON value and read back byte for byte
// (as a json.RawMessage): valid JSON without leading or trailing whitespace.
func embeddable(p []byte) bool {
	if !json.Valid(p) {
		return false
	}
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
	return !isSpace(p[0]) && !isSpace(p[len(p)-1])
}

func quote(s string) []byte {
	var b bytes.Buffer
	writeString(&b, s)
	return b.Bytes()
}

// writeString writes s as a JSON string, without HTML escaping.
func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // the encoder's newline
}

// isBatch reports whether a request's Content-Type is BatchContentType.
func isBatch(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == BatchContentType
}

// decodedEvent is one event of a batch request.
type decodedEvent struct {
	ev      core.Event
	created time.Time
}

// decodeBatch reads a batch body: a JSON array of events in the JSON event format, as
// encodeEvent writes them. Attribute values may be JSON strings, numbers or booleans (read as
// their JSON text); data_base64 is standard base64.
func decodeBatch(body []byte) ([]decodedEvent, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("batch body is not a JSON array of objects: %v", err)
	}
	out := make([]decodedEvent, 0, len(raw))
	for i, obj := range raw {
		ev, created, err := decodeEvent(obj)
		if err != nil {
			return nil, fmt.Errorf("event %d of the batch: %w", i, err)
		}
		out = append(out, decodedEvent{ev, created})
	}
	return out, nil
}

func decodeEvent(obj map[string]json.RawMessage) (core.Event, time.Time, error) {
	d := structured.NewDecoder()
	var (
		payload  []byte
		fromData bool // payload is data's JSON text
		headers  map[string]string
	)
	for name, v := range obj {
		switch name {
		case "data":
			if !bytes.Equal(v, []byte("null")) {
				payload, fromData = v, true
			}
			continue
		case "data_base64":
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return core.Event{}, time.Time{}, fmt.Errorf("data_base64 is not a string")
			}
			p, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return core.Event{}, time.Time{}, fmt.Errorf("data_base64 is not base64: %v", err)
			}
			payload, fromData = p, false
			continue
		}
		s, ok := scalar(v)
		if !ok {
			return core.Event{}, time.Time{}, fmt.Errorf("attribute %q is not a string, number or boolean", name)
		}
		if name == AttrHeaders {
			if err := json.Unmarshal([]byte(s), &headers); err != nil {
				return core.Event{}, time.Time{}, fmt.Errorf("%s is not a JSON object of strings: %v", AttrHeaders, err)
			}
			continue
		}
		d.Add(name, s)
	}
	if fromData && payload[0] == '"' {
		// data holding a JSON string under a non-JSON content type (text, as the CloudEvents
		// SDKs write it) is that text.
		if ct, _ := scalar(obj["datacontenttype"]); !isJSONType(ct) {
			var s string
			if json.Unmarshal(payload, &s) == nil {
				payload = []byte(s)
			}
		}
	}
	ev, created, err := d.Event("", payload)
	if err != nil {
		return core.Event{}, time.Time{}, err
	}
	for k, v := range headers {
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		if _, own := ev.Headers[k]; !own { // content-type, traceparent, tracestate: their attributes win
			ev.Headers[k] = v
		}
	}
	return ev, created, nil
}

// scalar is the text of a JSON string, number or boolean.
func scalar(v json.RawMessage) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case '{', '[', 'n':
		return "", false
	}
	return string(v), true
}
