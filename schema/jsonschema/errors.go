package jsonschema

import (
	"errors"
	"fmt"
	"strings"

	js "github.com/santhosh-tekuri/jsonschema/v6"
)

// Sentinel errors, matched with errors.Is. Validate's rejections are *PayloadError, Add's and
// AddFS's refusals *RegistrationError; each wraps one of these as its Reason.
var (
	// ErrUnknownSchema: no schema is registered for the event's type and schema id, and
	// Options.AllowUnknown is false.
	ErrUnknownSchema = errors.New("jsonschema: no schema registered for this event type and schema id")
	// ErrNoSchemaID: the event names no schema id and Options.RequireSchemaID is true.
	ErrNoSchemaID = errors.New("jsonschema: the event names no schema id")
	// ErrNotJSON: the payload is not one JSON value.
	ErrNotJSON = errors.New("jsonschema: payload is not JSON")
	// ErrInvalidPayload: the payload is JSON that its schema does not accept.
	ErrInvalidPayload = errors.New("jsonschema: payload does not match its schema")

	// ErrInvalidSchema: a schema document given to Add or AddFS is not JSON, not a valid JSON
	// Schema, or refers ($ref) to a document outside itself; or the type or schema id is empty.
	ErrInvalidSchema = errors.New("jsonschema: invalid schema")
	// ErrDuplicateSchema: a schema is already registered for this event type and schema id.
	ErrDuplicateSchema = errors.New("jsonschema: schema already registered")
)

// PayloadError is a payload that Registry.Validate rejected. errors.Is(err, Reason) holds, and
// errors.As reaches Err: the JSON decoder's error under ErrNotJSON, the library's
// *jsonschema.ValidationError (with the payload's offending values) under ErrInvalidPayload.
// Its text names the locations in the payload and the schema keywords that failed, never the
// payload's values, because it reaches logs and the producer's callers.
type PayloadError struct {
	Type, SchemaID string
	// Reason is ErrUnknownSchema, ErrNoSchemaID, ErrNotJSON or ErrInvalidPayload.
	Reason error
	// Err is the cause, or nil (ErrUnknownSchema, ErrNoSchemaID).
	Err error
}

func (e *PayloadError) Error() string {
	s := fmt.Sprintf("%v (type %q, schema id %q)", e.Reason, e.Type, e.SchemaID)
	var ve *js.ValidationError
	switch {
	case errors.As(e.Err, &ve):
		s += ": " + failures(ve)
	case e.Err != nil:
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap makes errors.Is(err, e.Reason) hold and errors.As reach e.Err.
func (e *PayloadError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// RegistrationError is a schema that Registry.Add or AddFS refused. errors.Is(err, Reason)
// holds, and errors.As reaches Err, the cause (the JSON decoder's or the compiler's error).
type RegistrationError struct {
	Type, SchemaID string
	// Path is the file in AddFS's file system ("" for Add).
	Path string
	// Reason is ErrInvalidSchema or ErrDuplicateSchema.
	Reason error
	// Err is the cause, or nil.
	Err error
}

func (e *RegistrationError) Error() string {
	s := fmt.Sprintf("%v (type %q, schema id %q", e.Reason, e.Type, e.SchemaID)
	if e.Path != "" {
		s += ", file " + e.Path
	}
	s += ")"
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap makes errors.Is(err, e.Reason) hold and errors.As reach e.Err.
func (e *RegistrationError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Reason}
	}
	return []error{e.Reason, e.Err}
}

// maxFailures bounds the failures a PayloadError's text lists.
const maxFailures = 5

// failures lists where ve's leaf failures are, as "at /path: keyword", without the values.
func failures(ve *js.ValidationError) string {
	var out []string
	n := 0
	var walk func(*js.ValidationError)
	walk = func(e *js.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		n++
		if len(out) < maxFailures {
			out = append(out, fmt.Sprintf("at %q: %s", "/"+strings.Join(e.InstanceLocation, "/"), keyword(e)))
		}
	}
	walk(ve)
	s := strings.Join(out, "; ")
	if n > len(out) {
		s += fmt.Sprintf("; and %d more", n-len(out))
	}
	return s
}

// keyword names the schema keyword of e ("schema" when it has no path: false schemas).
func keyword(e *js.ValidationError) string {
	if e.ErrorKind == nil {
		return "schema"
	}
	p := e.ErrorKind.KeywordPath()
	if len(p) == 0 {
		return "schema"
	}
	return "keyword " + strings.Join(p, "/")
}
