package core

import (
	"context"
	"errors"
	"fmt"
)

// SchemaValidator checks a payload against the schema that an event type and schema id name.
// It is the opt-in schema check of OutboxOptions.Schemas (Outbox.Write refuses an event it
// rejects) and InboxOptions.Schemas (the inbox refuses such a message before its handler);
// package schema/jsonschema implements it with JSON Schema.
//
// Validate returns nil to accept the payload and an error, the reason, to reject it. A
// rejection is permanent: the same arguments must always get the same answer, so a validator
// checks against schemas it holds (compiled at start-up) and does not fail for a passing
// reason (a network call). schemaID is "" for an event that names no schema: the validator
// decides whether that passes (jsonschema.Options.RequireSchemaID). It must be safe for
// concurrent use.
type SchemaValidator interface {
	Validate(ctx context.Context, eventType, schemaID string, payload []byte) error
}

// ErrSchemaRejected is wrapped by every *SchemaError: a SchemaValidator rejected an event's
// payload.
var ErrSchemaRejected = errors.New("outbox: payload rejected by its schema")

// SchemaError is a payload that the SchemaValidator of OutboxOptions.Schemas or
// InboxOptions.Schemas rejected. errors.Is(err, ErrSchemaRejected) holds, and so does
// errors.Is (and errors.As) to the validator's reason, Err. It is permanent (IsPermanent):
// the same payload is rejected every time.
//
// From Outbox.Write it also matches ErrInvalidEvent (like a *ValidationError), and nothing
// of the call was written. From Inbox.Process (as is) or ProcessBatch and ProcessSet (inside a
// *BatchError) nothing was recorded and the handler did not run; the consumers of sinks send
// the message to their dead-letter path at once.
type SchemaError struct {
	// Index is the event's index in the Write call, or the message's in the batch (0 for
	// Process).
	Index int
	// EventID is the event's ID (as Write assigned it when the caller left it empty).
	EventID string
	// Type and SchemaID are what the validator was asked about.
	Type, SchemaID string
	// Err is the validator's reason.
	Err error

	write bool // from Outbox.Write: also ErrInvalidEvent
}

func (e *SchemaError) Error() string {
	where := "inbox message"
	if e.write {
		where = "event"
	}
	return fmt.Sprintf("%s: %s %d (id %s, type %q, schema id %q): %v", ErrSchemaRejected, where, e.Index, e.EventID, e.Type, e.SchemaID, e.Err)
}

// Unwrap makes errors.Is(err, ErrSchemaRejected) hold, errors.Is(err, ErrInvalidEvent) for an
// error of Outbox.Write, and errors.Is and errors.As see the validator's reason.
func (e *SchemaError) Unwrap() []error {
	if e.write {
		return []error{ErrSchemaRejected, ErrInvalidEvent, e.Err}
	}
	return []error{ErrSchemaRejected, e.Err}
}

// Permanent reports true: IsPermanent(err) holds for a *SchemaError.
func (e *SchemaError) Permanent() bool { return true }

// checkSchema is the one schema rule of the outbox and the inbox: with a validator set, every
// payload is checked (its schema id may be "") before anything of it is written or recorded.
func checkSchema(ctx context.Context, v SchemaValidator, write bool, i int, id, typ, schemaID string, payload []byte) error {
	if v == nil {
		return nil
	}
	if err := v.Validate(ctx, typ, schemaID, payload); err != nil {
		return &SchemaError{Index: i, EventID: id, Type: typ, SchemaID: schemaID, Err: err, write: write}
	}
	return nil
}

// checkSchemas checks msgs, an inbox batch, with the inbox's validator (InboxOptions.Schemas):
// the first rejection is a *SchemaError, in a *BatchError naming its index.
func checkSchemas(ctx context.Context, v SchemaValidator, msgs []InboxMessage) error {
	for i := range msgs {
		m := &msgs[i]
		if err := checkSchema(ctx, v, false, i, m.EventID, m.Type, m.SchemaID, m.Payload); err != nil {
			return &BatchError{Index: i, Err: err}
		}
	}
	return nil
}
