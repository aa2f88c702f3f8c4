// Package wire is the message format shared by the SQS and SNS sinks and the SQS consumer:
// which event fields travel as message attributes, the one JSON attribute that carries the
// rest, how a payload becomes a message body, and the claim-check reference. The format is
// documented for users in package sinks/sqs (doc.go); this package is its only implementation.
package wire

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Message attribute names. At most ten attributes travel with a message (the SQS limit, which
// SNS raw delivery inherits); empty optional fields are left out.
const (
	AttrID               = "outbox.id"                // String: event ID (always)
	AttrType             = "outbox.type"              // String: event type (always)
	AttrAggregate        = "outbox.aggregate"         // String: AggregateType + "/" + AggregateID (always)
	AttrAggregateVersion = "outbox.aggregate_version" // Number: when > 0
	AttrSchemaID         = "outbox.schema_id"         // String: when set
	AttrTenant           = "outbox.tenant"            // String: when set
	AttrCausationID      = "outbox.causation_id"      // String: when set
	AttrCorrelationID    = "outbox.correlation_id"    // String: when set
	AttrTraceparent      = "traceparent"              // String: the W3C traceparent header, when present
	AttrMeta             = "outbox.meta"              // String: JSON object Meta (always)
)

// HeaderTraceparent is the event header that travels as the traceparent attribute.
const HeaderTraceparent = "traceparent"

// Version is the value of Meta.V this package writes and the only one it reads.
const Version = 1

// Body encodings (Meta.Encoding).
const (
	EncodingRaw    = ""       // the body is the payload, byte for byte
	EncodingBase64 = "base64" // the body is the standard base64 (with padding) of the payload
	EncodingEmpty  = "empty"  // the payload is empty; the body is a placeholder to ignore
	EncodingS3     = "s3"     // the payload is in S3 (Meta.ClaimCheck); the body repeats the reference
)

// EmptyBody is the placeholder body of an empty payload (SQS and SNS refuse empty bodies).
const EmptyBody = "-"

// Meta is the JSON object in the outbox.meta attribute.
type Meta struct {
	V            int               `json:"v"`
	CreatedAt    string            `json:"created_at,omitempty"` // RFC 3339, UTC, microseconds
	PartitionKey string            `json:"partition_key,omitempty"`
	Headers      map[string]string `json:"headers,omitempty"` // every header but traceparent
	Encoding     string            `json:"encoding,omitempty"`
	ClaimCheck   *ClaimCheck       `json:"claim_check,omitempty"`
}

// ClaimCheck locates a payload stored in S3 under the hex SHA-256 of its bytes.
type ClaimCheck struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	SHA256 string `json:"sha256"` // lowercase hex digest of the payload
	Size   int64  `json:"size"`
}

// Attr is one message attribute.
type Attr struct {
	Name     string
	DataType string // "String" or "Number"
	Value    string
}

// Encoded is a message ready to be sent.
type Encoded struct {
	Body  string
	Attrs []Attr
}

// Size is the message size as SQS and SNS count it: body plus, per attribute, name, data type
// and value.
func (e *Encoded) Size() int {
	n := len(e.Body)
	for _, a := range e.Attrs {
		n += len(a.Name) + len(a.DataType) + len(a.Value)
	}
	return n
}

// Errors.
var (
	// ErrMessageTooLarge: the encoded message exceeds the sink's size limit and no claim check
	// is configured (or even the claim-check reference does not fit). Permanent.
	ErrMessageTooLarge = errors.New("message larger than the size limit")
	// ErrUndecodable: a received message does not follow this wire format.
	ErrUndecodable = errors.New("message does not follow the outboxkit wire format")
	// ErrClaimCheckDigest: a claim-checked payload fetched from S3 does not match its recorded
	// SHA-256 digest or size.
	ErrClaimCheckDigest = errors.New("claim-checked payload does not match its digest")
	// ErrClaimCheckTooLarge: a claim-check reference claims more bytes than the reader accepts.
	ErrClaimCheckTooLarge = errors.New("claim-checked payload larger than the limit")
)

// Encode encodes m with its payload in the body. ref, when not nil, replaces the payload by a
// claim-check reference.
func Encode(m *core.Message, ref *ClaimCheck) (Encoded, error) {
	ev := &m.Event
	trace := ev.Headers[HeaderTraceparent]
	var e Encoded
	var encoding string
	var refJSON []byte
	switch {
	case ref != nil:
		encoding = EncodingS3
		b, err := json.Marshal(ref)
		if err != nil {
			return Encoded{}, err
		}
		refJSON = b
		e.Body = string(b)
	case len(ev.Payload) == 0:
		encoding = EncodingEmpty
		e.Body = EmptyBody
	case IsSafeText(ev.Payload):
		e.Body = string(ev.Payload)
	default:
		encoding = EncodingBase64
		e.Body = base64.StdEncoding.EncodeToString(ev.Payload)
	}
	if ev.ID == "" || ev.Type == "" || ev.AggregateType == "" || ev.AggregateID == "" {
		return Encoded{}, fmt.Errorf("event %q: ID, Type, AggregateType and AggregateID are required", ev.ID)
	}
	e.Attrs = make([]Attr, 0, 10)
	add := func(name, typ, v string) {
		if v != "" {
			e.Attrs = append(e.Attrs, Attr{Name: name, DataType: typ, Value: v})
		}
	}
	add(AttrID, "String", ev.ID)
	add(AttrType, "String", ev.Type)
	add(AttrAggregate, "String", ev.AggregateType+"/"+ev.AggregateID)
	if ev.AggregateVersion > 0 {
		add(AttrAggregateVersion, "Number", strconv.FormatInt(ev.AggregateVersion, 10))
	}
	add(AttrSchemaID, "String", ev.SchemaID)
	add(AttrTenant, "String", ev.Tenant)
	add(AttrCausationID, "String", ev.CausationID)
	add(AttrCorrelationID, "String", ev.CorrelationID)
	add(AttrTraceparent, "String", trace)
	add(AttrMeta, "String", string(appendMeta(make([]byte, 0, 128), m, encoding, refJSON)))
	for _, a := range e.Attrs {
		if !isSafeText(a.Value) {
			return Encoded{}, fmt.Errorf("event %s: attribute %s holds characters SQS does not accept", ev.ID, a.Name)
		}
	}
	return e, nil
}

const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// appendMeta appends the JSON of m's Meta (with the given encoding and, for EncodingS3, the
// reference's JSON) to b: the bytes json.Marshal(Meta{...}) gives, built without reflection,
// the intermediate Headers map or its sorting allocations.
func appendMeta(b []byte, m *core.Message, encoding string, refJSON []byte) []byte {
	ev := &m.Event
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, Version, 10)
	if !m.CreatedAt.IsZero() {
		b = append(b, `,"created_at":"`...)
		b = m.CreatedAt.UTC().AppendFormat(b, timeLayout) // digits and -:.TZ+ only: nothing to escape
		b = append(b, '"')
	}
	if ev.PartitionKey != "" {
		b = append(b, `,"partition_key":`...)
		b = appendJSONString(b, ev.PartitionKey)
	}
	n := len(ev.Headers)
	if v, ok := ev.Headers[HeaderTraceparent]; ok && v != "" {
		n--
	}
	if n > 0 {
		var buf [8]string
		keys := buf[:0]
		for k, v := range ev.Headers {
			if k != HeaderTraceparent || v == "" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys) // encoding/json writes map keys in this order
		b = append(b, `,"headers":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, ev.Headers[k])
		}
		b = append(b, '}')
	}
	if encoding != "" {
		b = append(b, `,"encoding":`...)
		b = appendJSONString(b, encoding)
	}
	if refJSON != nil {
		b = append(b, `,"claim_check":`...)
		b = append(b, refJSON...)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string: quoted as is when it holds only
// printable ASCII that needs no escape (encoding/json also escapes <, > and &), else as
// json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// NewClaimCheck returns the reference of payload stored in bucket under prefix + hex SHA-256.
func NewClaimCheck(bucket, prefix string, payload []byte) ClaimCheck {
	sum := sha256.Sum256(payload)
	h := hex.EncodeToString(sum[:])
	return ClaimCheck{Bucket: bucket, Key: prefix + h, SHA256: h, Size: int64(len(payload))}
}

// Validate checks a received reference: a bucket name (3 to 63 of a-z 0-9 . -), a key of 1 to
// 1024 bytes of text, a 64-digit hex SHA-256 and a size that is not negative.
func (c *ClaimCheck) Validate() error {
	if n := len(c.Bucket); n < 3 || n > 63 || strings.Trim(c.Bucket, "abcdefghijklmnopqrstuvwxyz0123456789.-") != "" {
		return fmt.Errorf("claim_check bucket %q is not a bucket name", c.Bucket)
	}
	if c.Key == "" || len(c.Key) > 1024 || driver.CheckText(c.Key) != "" {
		return fmt.Errorf("claim_check key is not 1 to 1024 bytes of text")
	}
	if len(c.SHA256) != 64 {
		return fmt.Errorf("claim_check sha256 is not 64 hex digits")
	}
	if _, err := hex.DecodeString(c.SHA256); err != nil {
		return fmt.Errorf("claim_check sha256 is not hex")
	}
	if c.Size < 0 {
		return fmt.Errorf("claim_check size is negative")
	}
	return nil
}

// Verify checks payload against the reference's size and digest.
func (c *ClaimCheck) Verify(payload []byte) error {
	if int64(len(payload)) != c.Size {
		return fmt.Errorf("%w: s3://%s/%s has %d bytes, want %d", ErrClaimCheckDigest, c.Bucket, c.Key, len(payload), c.Size)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != strings.ToLower(c.SHA256) {
		return fmt.Errorf("%w: s3://%s/%s", ErrClaimCheckDigest, c.Bucket, c.Key)
	}
	return nil
}

// IsSafeText reports whether b can be a message body or attribute value as is: valid UTF-8 made
// only of XML 1.0 characters (#x9, #xA, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF). Carriage
// returns are excluded too, so that no XML end-of-line normalisation can alter a payload.
func IsSafeText(b []byte) bool {
	// The string views b only for the duration of the check; nothing keeps it.
	return isSafeText(unsafe.String(unsafe.SliceData(b), len(b)))
}

func isSafeText(b string) bool {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\t' && c != '\n' {
				return false
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(b[i:])
		if r == utf8.RuneError && n == 1 {
			return false
		}
		if r >= 0xD800 && r <= 0xDFFF || r == 0xFFFE || r == 0xFFFF {
			return false
		}
		i += n
	}
	return true
}

// GroupID returns the FIFO MessageGroupId of a group: the group itself when it is a valid
// MessageGroupId (1 to 128 characters from ASCII 0x21-0x7E), else "sha256-" + the hex SHA-256 of
// the group (so every partition key maps to one stable group).
func GroupID(group string) string { return fifoID(group) }

// DedupID returns the FIFO MessageDeduplicationId of a message: its DedupID (the event ID) under
// the same rule as GroupID.
func DedupID(m *core.Message) string {
	id := m.DedupID
	if id == "" {
		id = m.ID
	}
	return fifoID(id)
}

func fifoID(s string) string {
	ok := len(s) > 0 && len(s) <= 128
	for i := 0; ok && i < len(s); i++ {
		ok = s[i] >= 0x21 && s[i] <= 0x7e
	}
	if ok {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256-" + hex.EncodeToString(sum[:])
}

// Decoded is a received message.
type Decoded struct {
	// Event is the event as the producer wrote it; Payload is nil when ClaimCheck is set (fetch
	// it and call ClaimCheck.Verify).
	Event      core.Event
	CreatedAt  time.Time
	ClaimCheck *ClaimCheck
}

// Decode parses a received message. attr returns a message attribute's string value.
func Decode(body string, attr func(name string) (string, bool)) (Decoded, error) {
	bad := func(format string, args ...any) (Decoded, error) {
		return Decoded{}, fmt.Errorf("%w: %s", ErrUndecodable, fmt.Sprintf(format, args...))
	}
	get := func(name string) string { v, _ := attr(name); return v }
	var d Decoded
	ev := &d.Event
	ev.ID = get(AttrID)
	ev.Type = get(AttrType)
	agg := get(AttrAggregate)
	rawMeta, ok := attr(AttrMeta)
	if ev.ID == "" || ev.Type == "" || agg == "" || !ok {
		return bad("attributes %s, %s, %s and %s are required", AttrID, AttrType, AttrAggregate, AttrMeta)
	}
	slash := strings.IndexByte(agg, '/')
	if slash <= 0 || slash == len(agg)-1 {
		return bad("attribute %s is not TYPE/ID", AttrAggregate)
	}
	ev.AggregateType, ev.AggregateID = agg[:slash], agg[slash+1:]
	if v := get(AttrAggregateVersion); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return bad("attribute %s is not a positive integer", AttrAggregateVersion)
		}
		ev.AggregateVersion = n
	}
	ev.SchemaID = get(AttrSchemaID)
	ev.Tenant = get(AttrTenant)
	ev.CausationID = get(AttrCausationID)
	ev.CorrelationID = get(AttrCorrelationID)
	var meta Meta
	if err := json.Unmarshal([]byte(rawMeta), &meta); err != nil {
		return bad("attribute %s: %v", AttrMeta, err)
	}
	if meta.V != Version {
		return bad("attribute %s: unsupported version %d", AttrMeta, meta.V)
	}
	ev.PartitionKey = meta.PartitionKey
	if len(meta.Headers) > 0 {
		ev.Headers = meta.Headers
	}
	if tp := get(AttrTraceparent); tp != "" {
		if ev.Headers == nil {
			ev.Headers = map[string]string{}
		}
		ev.Headers[HeaderTraceparent] = tp
	}
	if meta.CreatedAt != "" {
		t, err := time.Parse(time.RFC3339Nano, meta.CreatedAt)
		if err != nil {
			return bad("attribute %s: created_at: %v", AttrMeta, err)
		}
		d.CreatedAt = t.UTC()
	}
	switch meta.Encoding {
	case EncodingRaw:
		ev.Payload = []byte(body)
	case EncodingBase64:
		p, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return bad("body is not base64: %v", err)
		}
		ev.Payload = p
	case EncodingEmpty:
		ev.Payload = []byte{}
	case EncodingS3:
		c := meta.ClaimCheck
		if c == nil {
			return bad("attribute %s: encoding s3 without claim_check", AttrMeta)
		}
		if err := c.Validate(); err != nil {
			return bad("attribute %s: %v", AttrMeta, err)
		}
		d.ClaimCheck = c
	default:
		return bad("attribute %s: unknown encoding %q", AttrMeta, meta.Encoding)
	}
	return d, nil
}
