package core

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel/propagation"
)

// OutboxOptions configures an Outbox. The zero value is ready to use.
type OutboxOptions struct {
	// Limits bound each event; zero fields take the documented defaults, and values outside
	// their bounds make NewOutbox fail with an *OptionError.
	Limits Limits
	// Propagator writes the trace context of Write's ctx into each event's Headers (see
	// WithTraceContext); the W3C propagator writes "traceparent" and "tracestate", which count
	// towards Limits.MaxHeaders. Default nil: the global propagator (otel.GetTextMapPropagator),
	// which writes nothing until the application sets one.
	Propagator propagation.TextMapPropagator
	// Schemas, when set, checks every event's payload against the schema its Type and
	// SchemaID name, before anything of the Write call is written: a rejected event makes
	// Write return a *SchemaError (ErrSchemaRejected, ErrInvalidEvent) and write nothing. An
	// event without a SchemaID is checked too; the validator decides whether it passes.
	// Default nil: payloads are not checked.
	Schemas SchemaValidator
	// Encrypter, when set, replaces every event's payload by its ciphertext after validation
	// and the schema check (which see the plaintext), before anything is written: the outbox
	// row, every broker copy and claim-check object then hold only ciphertext. An error writes
	// nothing of the call. Limits.MaxPayloadBytes bounds the plaintext. Default nil: payloads
	// are stored and sent as given. Package encryption implements it (envelope encryption,
	// AES-256-GCM).
	Encrypter PayloadEncrypter
}

// PayloadEncrypter encrypts the payloads of events, in place, for Outbox.Write; the events
// are normalised (ID assigned) and belong to one Write call. Package encryption implements it.
type PayloadEncrypter interface {
	EncryptPayloads(ctx context.Context, events []Event) error
}

// Outbox appends events inside the caller's own transaction. TTx is the caller's transaction
// type (*sql.Tx, pgx.Tx, ...). It is safe for concurrent use.
type Outbox[TTx any] struct {
	store   driver.OutboxStore[TTx]
	lanes   atomic.Int64 // the lane count lanes are computed with (see Write)
	limits  Limits
	prop    propagation.TextMapPropagator
	schemas SchemaValidator
	enc     PayloadEncrypter
}

// NewOutbox reads the lane count recorded at migration and returns an Outbox writing to store.
// opts may be nil.
func NewOutbox[TTx any](ctx context.Context, store driver.OutboxStore[TTx], opts *OutboxOptions) (*Outbox[TTx], error) {
	if store == nil {
		return nil, &OptionError{Field: "store", Reason: "must not be nil"}
	}
	var o OutboxOptions
	if opts != nil {
		o = *opts
	}
	if err := o.Limits.Check(); err != nil {
		return nil, err
	}
	lanes, err := store.LaneCount(ctx)
	if err != nil {
		return nil, storeError("outbox: lane count", err)
	}
	if lanes < 1 || lanes > MaxLanes {
		return nil, fmt.Errorf("%w: lane count %d out of range", ErrSchemaMismatch, lanes)
	}
	ob := &Outbox[TTx]{store: store, limits: o.Limits.WithDefaults(), prop: o.Propagator, schemas: o.Schemas, enc: o.Encrypter}
	ob.lanes.Store(int64(lanes))
	return ob, nil
}

// Write validates every event, then appends them all in tx, in order. It returns the events as
// stored (ID and PartitionKey filled in). An invalid event returns a *ValidationError and
// writes nothing, and so does a payload that OutboxOptions.Schemas rejects (a *SchemaError);
// a database error writes nothing of this call either. The events become visible to relays when tx commits, and never if it rolls back. When ctx carries a span, its
// trace context is added to each event's Headers (OutboxOptions.Propagator), and every event
// carries its transaction group (HeaderTxID, HeaderTxIndex, HeaderTxCount; see WithTxGroup); the
// caller's maps are not modified. With OutboxOptions.Encrypter the events returned and stored
// carry the ciphertext.
//
// When the store is a LaneInserter (PostgreSQL, MySQL/MariaDB, SQLite), the insert is checked
// against the lane count the lanes were computed with; after a LaneResizer.ResizeLanes it is
// refused, and Write reads the new count, computes the lanes again and inserts again in the
// same tx. An
// error the database ended tx with (a serialization failure of a REPEATABLE READ or
// SERIALIZABLE transaction begun before the resize) is returned: roll back and retry.
func (o *Outbox[TTx]) Write(ctx context.Context, tx TTx, events ...Event) ([]Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	recs := make([]driver.Record, len(events))
	out := make([]Event, len(events))
	seen := make(map[string]int, len(events))
	for i, ev := range events {
		ev.Headers = WithTraceContext(ctx, o.prop, withoutTxHeaders(ev.Headers))
		n, err := driver.Normalize(i, ev, o.limits)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[n.ID]; dup {
			return nil, &ValidationError{Index: i, Field: "ID", Reason: fmt.Sprintf("same ID as event %d of this call", j)}
		}
		seen[n.ID] = i
		if err := checkSchema(ctx, o.schemas, true, i, n.ID, n.Type, n.SchemaID, n.Payload); err != nil {
			return nil, err
		}
		out[i] = n
	}
	if err := stampTxGroup(ctx, out); err != nil {
		return nil, err
	}
	if o.enc != nil {
		if err := o.enc.EncryptPayloads(ctx, out); err != nil {
			return nil, fmt.Errorf("outbox: encrypt payloads: %w", err)
		}
	}
	lanes := int(o.lanes.Load())
	checked, _ := o.store.(driver.LaneInserter[TTx])
	for try := 0; ; try++ {
		for i, n := range out {
			recs[i] = driver.Record{Event: n, Lane: driver.LaneOf(n.PartitionKey, lanes)}
		}
		if checked == nil {
			if err := o.store.Insert(ctx, tx, recs); err != nil {
				return nil, err
			}
			return out, nil
		}
		err := checked.InsertLanes(ctx, tx, lanes, recs)
		if err == nil {
			return out, nil
		}
		if !errors.Is(err, ErrLaneCountChanged) || try == maxLaneRetries {
			return nil, err
		}
		n, cerr := o.store.LaneCount(ctx)
		if cerr != nil {
			return nil, errors.Join(err, fmt.Errorf("outbox: lane count: %w", cerr))
		}
		if n < 1 || n > MaxLanes || n == lanes {
			return nil, err
		}
		o.lanes.CompareAndSwap(int64(lanes), int64(n))
		lanes = n
	}
}

// Lanes returns the lane count Write computes lanes with: the outbox's, as read by NewOutbox or
// by the last Write that found it changed (LaneInserter).
func (o *Outbox[TTx]) Lanes() int { return int(o.lanes.Load()) }

// Notify wakes relays after the caller's transaction committed, when the store supports it
// (Notifier); otherwise it does nothing. Call it after Commit, never inside the transaction:
// a notification sent from inside every producer transaction serialises commits. A lost
// notification only delays delivery until the relay's next poll.
func (o *Outbox[TTx]) Notify(ctx context.Context) error {
	if n, ok := o.store.(driver.Notifier); ok {
		return n.Notify(ctx)
	}
	return nil
}

// Flush waits until the notifications that Notify accepted have been sent, when the store
// sends them in the background (Flusher); otherwise it returns nil at once. Call it before
// closing the database pool, so that the last Notify is not lost. It returns ctx's error when
// ctx ends first.
func (o *Outbox[TTx]) Flush(ctx context.Context) error {
	if f, ok := o.store.(driver.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// maxLaneRetries bounds Outbox.Write's retries after ErrLaneCountChanged (each one follows a
// resize that committed meanwhile).
const maxLaneRetries = 3

// storeError prefixes err, a store's error, with op, unless it is a
// *NotMigratedError: that one says once what is missing and what to do, and another prefix
// would only repeat the adapter's.
func storeError(op string, err error) error {
	if _, ok := errors.AsType[*NotMigratedError](err); ok {
		return err
	}
	return fmt.Errorf("%s: %w", op, err)
}
