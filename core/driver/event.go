package driver

import (
	"fmt"
	"hash/fnv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Event is what a producer appends to the outbox inside its own transaction.
type Event struct {
	// ID identifies the event everywhere (outbox row, sink deduplication id, inbox record).
	// Empty means a new UUIDv7 is assigned at write time. At most 128 printable ASCII characters,
	// no spaces.
	//
	// "Text" fields below follow one rule (see CheckText): valid UTF-8 of at most 255 bytes
	// without control characters (C0, DEL and C1: U+0000-U+001F, U+007F-U+009F) or Unicode
	// noncharacters (U+FDD0-U+FDEF and every code point ending in FFFE or FFFF). Every sink's
	// wire format carries such text unchanged.
	ID string
	// AggregateType and AggregateID name the entity that changed. Required.
	// AggregateType uses [A-Za-z0-9._-]; AggregateID is text.
	AggregateType string
	AggregateID   string
	// AggregateVersion is the entity version this event produces; 0 means unversioned.
	AggregateVersion int64
	// Type is the event type, e.g. "order.created". Required; [A-Za-z0-9._-].
	Type string
	// SchemaID optionally names the payload schema; [A-Za-z0-9._-].
	SchemaID string
	// PartitionKey orders events: events of one key are published in write order, the order in
	// which their rows got sequence numbers (not commit order), so writers of one key must be
	// serialised (docs/guarantees.md). Empty means
	// AggregateType + "/" + AggregateID.
	PartitionKey string
	// Destination is the logical destination a Router maps to a sink address; [A-Za-z0-9._-].
	// Empty means the router decides by Type; a set Destination is never routed by Type (see
	// StaticRouter).
	Destination string
	// Payload is opaque bytes (JSON, protobuf, ...). At most Limits.MaxPayloadBytes.
	Payload []byte
	// Headers are string metadata, bounded by Limits.MaxHeaders and Limits.MaxHeaderBytes.
	// Keys use [A-Za-z0-9._-]; values are text.
	Headers map[string]string
	// Tenant, CausationID and CorrelationID are optional text. PartitionKey is text too.
	Tenant        string
	CausationID   string
	CorrelationID string
}

// Record is an event as stored in the outbox, with the relay's bookkeeping.
// Zero times mean NULL.
type Record struct {
	Event
	Seq           int64     // insertion order, assigned by the database
	Lane          int       // LaneOf(PartitionKey, lanes), computed at write time
	CreatedAt     time.Time // database clock at insert
	PublishedAt   time.Time // set when the sink acknowledged it (mark mode "set")
	Attempts      int       // failed delivery attempts so far
	NextAttemptAt time.Time // not delivered before this time (after a failure)
	LastError     string    // the last delivery error, truncated
	ParkedAt      time.Time // set when retries are exhausted or the error was permanent
}

// Limits bound what one event may carry. The zero value of a field means its default; a value
// above its maximum (MaxLimitPayloadBytes, MaxLimitHeaders, MaxLimitHeaderBytes) or below zero is
// refused by NewOutbox with an *OptionError.
type Limits struct {
	MaxPayloadBytes int // default 1 MiB, at most 64 MiB
	MaxHeaders      int // default 32, at most 1024
	MaxHeaderBytes  int // total bytes of keys and values; default 16 KiB, at most 1 MiB
}

// Upper bounds of Limits.
const (
	MaxLimitPayloadBytes = 64 << 20
	MaxLimitHeaders      = 1024
	MaxLimitHeaderBytes  = 1 << 20
)

// Default limits.
const (
	DefaultMaxPayloadBytes = 1 << 20
	DefaultMaxHeaders      = 32
	DefaultMaxHeaderBytes  = 16 << 10
	MaxNameLen             = 255
	maxIDLen               = 128
	maxErrorLen            = 1024
)

// check refuses limits outside their bounds.
func (l Limits) Check() error {
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"Limits.MaxPayloadBytes", l.MaxPayloadBytes, MaxLimitPayloadBytes},
		{"Limits.MaxHeaders", l.MaxHeaders, MaxLimitHeaders},
		{"Limits.MaxHeaderBytes", l.MaxHeaderBytes, MaxLimitHeaderBytes},
	} {
		if err := CheckCount(f.name, f.v, f.max); err != nil {
			return err
		}
	}
	return nil
}

// CheckCount refuses a size or count option below zero or above max (0 means its default).
func CheckCount(field string, v, max int) error {
	if v < 0 || v > max {
		return &OptionError{Field: field, Reason: fmt.Sprintf("must be between 0 (default) and %d", max)}
	}
	return nil
}

func (l Limits) WithDefaults() Limits {
	if l.MaxPayloadBytes <= 0 {
		l.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l
}

// Normalize validates ev against limits and returns the copy that is stored: ID and
// PartitionKey filled in when empty. index is reported in a *ValidationError.
func Normalize(index int, ev Event, limits Limits) (Event, error) {
	limits = limits.WithDefaults()
	bad := func(field, reason string) (Event, error) {
		return Event{}, &ValidationError{Index: index, Field: field, Reason: reason}
	}
	if ev.ID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return Event{}, err
		}
		ev.ID = id.String()
	} else if r := CheckID(ev.ID); r != "" {
		return bad("ID", r)
	}
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"AggregateType", ev.AggregateType, true},
		{"Type", ev.Type, true},
		{"SchemaID", ev.SchemaID, false},
		{"Destination", ev.Destination, false},
	} {
		if r := checkName(f.v, f.required); r != "" {
			return bad(f.name, r)
		}
	}
	for _, f := range []struct {
		name, v  string
		required bool
	}{
		{"AggregateID", ev.AggregateID, true},
		{"PartitionKey", ev.PartitionKey, false},
		{"Tenant", ev.Tenant, false},
		{"CausationID", ev.CausationID, false},
		{"CorrelationID", ev.CorrelationID, false},
	} {
		if r := CheckTextLen(f.v, MaxNameLen, f.required); r != "" {
			return bad(f.name, r)
		}
	}
	if ev.AggregateVersion < 0 {
		return bad("AggregateVersion", "must not be negative")
	}
	if len(ev.Payload) > limits.MaxPayloadBytes {
		return bad("Payload", fmt.Sprintf("%d bytes, over the limit of %d (Limits.MaxPayloadBytes, at most %d)", len(ev.Payload), limits.MaxPayloadBytes, MaxLimitPayloadBytes))
	}
	if len(ev.Headers) > limits.MaxHeaders {
		return bad("Headers", fmt.Sprintf("%d headers, over the limit of %d (Limits.MaxHeaders, at most %d)", len(ev.Headers), limits.MaxHeaders, MaxLimitHeaders))
	}
	size := 0
	for k, v := range ev.Headers {
		if r := checkName(k, true); r != "" {
			return bad("Headers", "key "+r)
		}
		if r := CheckTextLen(v, MaxNameLen, false); r != "" {
			return bad("Headers", "value of "+k+" "+r)
		}
		size += len(k) + len(v)
	}
	if size > limits.MaxHeaderBytes {
		return bad("Headers", fmt.Sprintf("%d bytes of keys and values, over the limit of %d (Limits.MaxHeaderBytes, at most %d)", size, limits.MaxHeaderBytes, MaxLimitHeaderBytes))
	}
	if ev.PartitionKey == "" {
		ev.PartitionKey = ev.AggregateType + "/" + ev.AggregateID
		if len(ev.PartitionKey) > MaxNameLen {
			return bad("PartitionKey", "default (AggregateType/AggregateID) is longer than 255 bytes")
		}
	}
	return ev, nil
}

func CheckID(s string) string {
	if len(s) > maxIDLen {
		return "longer than 128 bytes"
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}

func checkName(s string, required bool) string {
	if s == "" {
		if required {
			return "required"
		}
		return ""
	}
	if len(s) > MaxNameLen {
		return "longer than 255 bytes"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "may contain only A-Z a-z 0-9 . _ -"
		}
	}
	return ""
}

// CheckText reports why s is not text, or "" when it is: valid UTF-8 without control
// characters (C0, DEL, C1) or Unicode noncharacters. It is the one text rule of every text field
// of the public API (event fields, header values, inbox consumer names, entities and source
// positions); it is stricter than the XML 1.0 character set that SQS and SNS accept, so every
// sink carries text that passed it unchanged. Length limits are checked by the callers.
func CheckText(s string) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validRuneError(s[i:]):
			return "is not valid UTF-8"
		case r < 0x20 || r >= 0x7f && r <= 0x9f:
			return "contains a control character"
		case r >= 0xfdd0 && r <= 0xfdef || r&0xfffe == 0xfffe:
			return "contains a Unicode noncharacter"
		}
	}
	return ""
}

// validRuneError reports whether s starts with an encoded U+FFFD rather than an invalid byte.
func validRuneError(s string) bool {
	_, n := utf8.DecodeRuneInString(s)
	return n == 3
}

func CheckTextLen(s string, maxLen int, required bool) string {
	if s == "" {
		if required {
			return "required"
		}
		return ""
	}
	if len(s) > maxLen {
		return fmt.Sprintf("longer than %d bytes", maxLen)
	}
	return CheckText(s)
}

// DefaultLanes is the lane count a migration records when none is configured.
const DefaultLanes = 64

// MaxLanes bounds the lane count.
const MaxLanes = 4096

// LanesOption returns the lane count an adapter's Options.Lanes asks for: DefaultLanes when n
// is 0, n when it is between 1 and MaxLanes, else an *OptionError naming the field Lanes. Every
// adapter resolves its option with it.
func LanesOption(n int) (int, error) {
	if n == 0 {
		return DefaultLanes, nil
	}
	if n < 1 || n > MaxLanes {
		return 0, &OptionError{Field: "Lanes", Reason: fmt.Sprintf("must be between 1 and %d", MaxLanes)}
	}
	return n, nil
}

// LaneOf returns the lane of a partition key: FNV-1a (32 bit) of the key's bytes modulo lanes.
// Every adapter stores this value, so the mapping is identical across databases.
func LaneOf(partitionKey string, lanes int) int {
	h := fnv.New32a()
	h.Write([]byte(partitionKey))
	return int(h.Sum32() % uint32(lanes))
}

// TruncateError shortens a delivery error message to what an outbox row stores (1 KiB).
func TruncateError(msg string) string {
	if len(msg) <= maxErrorLen {
		return msg
	}
	cut := maxErrorLen
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut]
}
