// Package core is what applications call: the transactional outbox writer (Outbox), the
// polling relay (Relay), the change-data-capture relay (CDCRelay), the transactional inbox
// (Inbox) and outbox cleanup, with their options, results and errors. It imports no database
// driver, adapter, sink or broker SDK.
//
// What adapters and sinks implement or use — the store interfaces, their parameters and row
// types, leases, change sources and streams, optional capabilities and the Check helpers — is
// in package [github.com/outboxkit/outbox/core/driver]. An application passes an adapter's
// store (for example postgres.New's) to NewOutbox, NewRelay or NewInbox and never names those
// interfaces; the few driver types an application does use (Event, the errors, Outcome, ...)
// are repeated here under the same names.
//
// # Guarantees
//
//   - Atomic append: Outbox.Write appends events inside the caller's own transaction (TTx is the
//     caller's transaction type). They are published if and only if that transaction commits.
//     An invalid event (a *ValidationError, errors.Is ErrInvalidEvent) writes nothing, and so
//     does a payload that the opt-in schema check rejects (OutboxOptions.Schemas, a
//     SchemaValidator such as package schema/jsonschema: a *SchemaError, ErrSchemaRejected).
//   - At-least-once delivery: a record is marked published only after the sink acknowledged it,
//     and no database transaction is held open while a sink call is in flight. A crash between
//     send and mark produces a duplicate, never a loss. Messages carry the event ID as their
//     deduplication id.
//   - Order per partition key: records of one key are sent in write (Seq) order; a failed record
//     holds back only the later records of its key. No order is promised across keys.
//   - Fenced leases: the outbox is split into lanes (LaneOf: FNV-1a of the partition key modulo
//     the lane count). A relay worker leases lanes; each lease has a generation that increases
//     whenever the lane changes hands, and every mark is checked against (owner, generation,
//     unexpired) in the same database transaction: a stale worker's mark fails with
//     ErrClaimLost and changes nothing. Each worker holds at most ceil(lanes / live workers).
//   - Retries: exponential backoff with jitter per record, up to a retry budget; then the record
//     (and so its key) is parked until Admin.Unpark. Permanent errors park at once. A circuit
//     breaker pauses fetching while every send fails.
//   - Inbox: Inbox.Process records (consumer, source, tenant, event id, payload SHA-256),
//     checks the entity version and applies the handler's effect in one local transaction. A
//     redelivery is a no-op (Duplicate); the same id with another payload is
//     ErrDigestMismatch; concurrent deliveries of one id apply the effect once. One tenant's
//     (or source's) message never passes for another's (InboxOptions.Source, Tenants).
//   - Retention: CleanupOutbox deletes only published rows older than the retention window and
//     below the lowest unpublished Seq. Inbox.Prune raises a horizon before deleting records;
//     messages older than the horizon are rejected with ErrBeyondRetention, never reapplied.
//
// # Input rules and errors
//
// Every text field of the API follows one rule (CheckText): valid UTF-8 without control or
// noncharacter code points, stricter than any sink's wire format, so an event Write accepts is
// never refused by a sink. Times are bounded by MinTime and MaxTime, sizes and counts by
// documented maxima (MaxBatchSize, MaxLimitPayloadBytes, MaxPruneLimit, ...), and retry delays
// saturate instead of overflowing. Every documented failure is matched with errors.Is or
// errors.As: *ValidationError (ErrInvalidEvent), *OptionError (ErrInvalidOptions),
// *MessageError (ErrInvalidMessage), *SchemaError (ErrSchemaRejected: a payload its schema
// rejects), ErrInvalidHorizon, ErrInvalidTx (a nil, ended or foreign transaction) and
// ErrSchemaMismatch (an unmigrated database: the database schema, not a payload's).
//
// # Not guaranteed
//
//   - Exactly-once delivery to the broker: consumers deduplicate (use Inbox).
//   - Order across partition keys, or across lanes.
//   - Delivery of a parked key before an operator unparks it.
package core
