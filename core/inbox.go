package core

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel/metric"
)

// InboxMessage is one delivery handed to Inbox.Process.
type InboxMessage struct {
	// EventID is the producer's event ID. Required; the rule of Event.ID.
	EventID string
	// Payload is the event's payload bytes; their SHA-256 is recorded and compared on redelivery.
	Payload []byte
	// Entity and Version, when Version > 0, gate the message by entity version (usually the
	// aggregate type/id and aggregate version). Entity is required when Version > 0; it is text
	// (driver.CheckText) of at most 255 bytes.
	Entity  string
	Version int64
	// OccurredAt is when the event was written (the outbox CreatedAt). It is compared against the
	// retention horizon. It must be zero or between MinTime and MaxTime. The zero time is older
	// than any horizon: once the consumer has a horizon (after its first Prune), a message with a
	// zero OccurredAt is refused with a *MessageError (ErrInvalidMessage), since it could never
	// be told apart from a pruned duplicate. Consumers that prune must set it.
	OccurredAt time.Time
	// SourcePosition says where the message came from (queue and receipt, offset, ...). Recorded.
	// Optional text (driver.CheckText) of at most 1024 bytes.
	SourcePosition string
	// Type and SchemaID are the event's, for InboxOptions.Schemas (InboxMessageOf sets them);
	// the inbox neither checks nor records them otherwise.
	Type, SchemaID string
	// Tenant is the event's tenant (InboxMessageOf sets it). It is part of the message's key
	// (consumer, InboxOptions.Source, Tenant, EventID), so that one tenant's message cannot
	// pass for another tenant's message of the same event ID. It must be one that
	// InboxOptions.Tenants accepts. InboxOptions.Decrypter authenticates it with the payload.
	// Optional text (driver.CheckText) of at most 255 bytes; "" means no tenant.
	Tenant string
}

// InboxMessageOf is the one mapping of a delivered event to the InboxMessage that
// Inbox.Process takes; the SQS and Kafka consumers use it. EventID, Payload, Type and SchemaID
// are the event's,
// Entity and Version its version gate (EventEntity), OccurredAt is createdAt, the outbox's
// CreatedAt as the sink sent it (zero when unknown: see InboxMessage.OccurredAt), and
// SourcePosition is position, where the broker holds the message (queue and message id,
// topic/partition@offset, ...). A consumer with another version gate sets Entity and Version
// afterwards.
func InboxMessageOf(ev *Event, createdAt time.Time, position string) InboxMessage {
	entity, version := EventEntity(ev)
	return InboxMessage{EventID: ev.ID, Payload: ev.Payload, Entity: entity, Version: version,
		OccurredAt: createdAt, SourcePosition: position, Type: ev.Type, SchemaID: ev.SchemaID, Tenant: ev.Tenant}
}

// EventEntity is an event's inbox version gate: the entity AggregateType + "/" + AggregateID
// at version AggregateVersion, and no gate ("", 0) for an event without an AggregateVersion.
func EventEntity(ev *Event) (entity string, version int64) {
	if ev.AggregateVersion <= 0 {
		return "", 0
	}
	return ev.AggregateType + "/" + ev.AggregateID, ev.AggregateVersion
}

// GapPolicy says what to do when a version skips ahead of the next expected one.
type GapPolicy int

const (
	// GapAllow applies a newer version even if versions in between were never seen (default).
	GapAllow GapPolicy = iota
	// GapReject returns ErrVersionGap and records nothing, so the message can be retried after
	// the missing versions arrived. The first version seen of an entity is accepted when
	// InboxOptions.FirstVersion is 0 (any first version); otherwise a first version above
	// FirstVersion is a gap.
	GapReject
)

// InboxOptions configures an Inbox. The zero value is ready to use.
type InboxOptions struct {
	// Gap is the version gap policy. Default GapAllow.
	Gap GapPolicy
	// MeterProvider receives the inbox's instruments: outboxkit.inbox.messages ({message},
	// attributes outboxkit.consumer and outboxkit.outcome = applied | duplicate | stale |
	// digest_conflict | beyond_retention | version_gap | failed) and
	// outboxkit.inbox.process.duration (seconds per Process transaction, attribute
	// outboxkit.consumer), outboxkit.inbox.retention.horizon (the consumer's horizon as a Unix
	// time in seconds, set by Prune and whenever Process reads one) and outboxkit.inbox.pruned
	// ({record}, deleted by Prune), both with the attribute outboxkit.consumer. Never an event
	// id. Default nil: the global provider
	// (otel.GetMeterProvider), a no-op until set.
	MeterProvider metric.MeterProvider
	// FirstVersion, under GapReject, is the version an entity's first message must not skip
	// past: with FirstVersion 1 ("versions start at 1") a first message of version 3 returns
	// ErrVersionGap until versions 1 and 2 were applied. Default 0: the first version seen is
	// accepted whatever it is. Must not be negative; ignored under GapAllow.
	FirstVersion int64
	// Schemas, when set, checks every message's payload against the schema its Type and
	// SchemaID name, before the transaction: a rejected message fails with a *SchemaError
	// (ErrSchemaRejected, permanent: IsPermanent), nothing is recorded and the handler does
	// not run. A message without a SchemaID is checked too; the validator decides. Default
	// nil: payloads are not checked.
	Schemas SchemaValidator
	// Decrypter, when set, replaces every message's payload by its plaintext before anything
	// else (the schema check, the digest, the handler): the digest recorded is the
	// plaintext's. A message that cannot be decrypted fails with the Decrypter's error
	// (package encryption: ErrUndecryptable and permanent for a destroyed key, a tampered or
	// moved ciphertext), nothing is recorded and the handler does not run. Default nil:
	// payloads are handed over as delivered. Package encryption implements it.
	Decrypter PayloadDecrypter
	// Source names where this inbox's messages come from, as the consumer knows it from its
	// own configuration and credentials (a queue URL, a topic, a subscription), never from a
	// message. It is part of every record's key, (consumer, Source, tenant, event ID), so
	// messages that arrive from one source can never suppress another source's effects by
	// reusing its event IDs. Use one Inbox per source. Text (driver.CheckText) of at most 255
	// bytes. Default "": a key of consumer, tenant and event ID only, which is also the key
	// of every record written before Source existed (migrate before setting it; a record
	// keeps its source for good, so setting or changing Source makes redeliveries of
	// earlier messages look new).
	Source string
	// Tenants, when set, lists the only tenants (InboxMessage.Tenant) this inbox accepts; ""
	// stands for messages without a tenant. A message of any other tenant fails with a
	// *TenantError (ErrTenantRefused, permanent: IsPermanent) before anything is recorded.
	// Default nil: every tenant is accepted, each keyed apart from the others.
	Tenants []string
}

// ErrTenantRefused is wrapped by every *TenantError.
var ErrTenantRefused = errors.New("inbox: tenant refused")

// TenantError is a message whose tenant is not among InboxOptions.Tenants. errors.Is(err,
// ErrTenantRefused) holds. It is permanent (IsPermanent): the consumers of sinks send the
// message to their dead-letter path. Nothing was recorded and the handler did not run.
type TenantError struct {
	EventID, Tenant string
	// Source is the inbox's InboxOptions.Source.
	Source string
}

func (e *TenantError) Error() string {
	return fmt.Sprintf("%s: event %s has tenant %q, not one that this inbox (source %q) accepts: add it to InboxOptions.Tenants if that source may carry it",
		ErrTenantRefused, e.EventID, e.Tenant, e.Source)
}

// Unwrap makes errors.Is(err, ErrTenantRefused) hold.
func (e *TenantError) Unwrap() error { return ErrTenantRefused }

// Permanent reports true: IsPermanent(err) holds for a *TenantError.
func (e *TenantError) Permanent() bool { return true }

// checkTenant refuses msg when its tenant is not one the inbox accepts.
func (in *Inbox[TTx]) checkTenant(msg *InboxMessage) error {
	if in.o.Tenants == nil || slices.Contains(in.o.Tenants, msg.Tenant) {
		return nil
	}
	return &TenantError{EventID: msg.EventID, Tenant: msg.Tenant, Source: in.o.Source}
}

// scopeSep joins a record's source, tenant and entity in an entity key (driver.InboxStore's
// LockVersion): a control character, which none of them may contain (driver.CheckText), so
// no message can name another scope's entity.
const scopeSep = "\x1f"

// entityKey is the version gate key of entity for a message of tenant: entity alone when the
// inbox has no source and the message no tenant (the key before sources and tenants), else
// source, tenant and entity joined by scopeSep.
func (in *Inbox[TTx]) entityKey(tenant, entity string) string {
	if in.o.Source == "" && tenant == "" {
		return entity
	}
	return in.o.Source + scopeSep + tenant + scopeSep + entity
}

// PayloadDecrypter decrypts a delivered message's payload in place, for the Inbox (the
// counterpart of PayloadEncrypter). Package encryption implements it.
type PayloadDecrypter interface {
	DecryptPayload(ctx context.Context, msg *InboxMessage) error
}

// ErrUndecryptable marks a payload that no attempt can decrypt: its key was destroyed, or it
// was tampered with or moved to another event or tenant (InboxOptions.Decrypter). The
// consumers of package sinks dead-letter it.
var ErrUndecryptable = errors.New("outbox: payload cannot be decrypted")

// decrypt returns msgs with their payloads decrypted (InboxOptions.Decrypter), the caller's
// slice unchanged; the error of message i is a *BatchError.
func (in *Inbox[TTx]) decrypt(ctx context.Context, msgs []InboxMessage) ([]InboxMessage, error) {
	if in.o.Decrypter == nil {
		return msgs, nil
	}
	out := slices.Clone(msgs)
	for i := range out {
		if err := in.o.Decrypter.DecryptPayload(ctx, &out[i]); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
	}
	return out, nil
}

// check validates msg as Process takes it.
func (msg *InboxMessage) check() error {
	bad := func(field, reason string) error { return &MessageError{Field: field, Reason: reason} }
	if msg.EventID == "" {
		return bad("EventID", "required")
	}
	if r := driver.CheckID(msg.EventID); r != "" {
		return bad("EventID", r)
	}
	if msg.Version < 0 {
		return bad("Version", "must not be negative")
	}
	if r := driver.CheckTextLen(msg.Entity, driver.MaxNameLen, msg.Version > 0); r != "" {
		return bad("Entity", r)
	}
	if r := driver.CheckTextLen(msg.SourcePosition, driver.MaxPositionLen, false); r != "" {
		return bad("SourcePosition", r)
	}
	if r := driver.CheckTextLen(msg.Tenant, driver.MaxNameLen, false); r != "" {
		return bad("Tenant", r)
	}
	if !msg.OccurredAt.IsZero() {
		if r := driver.CheckTime(msg.OccurredAt); r != "" {
			return bad("OccurredAt", r)
		}
	}
	return nil
}

// InboxResult is what Process reports.
type InboxResult struct {
	Outcome Outcome
	// Prior is the recorded outcome (Applied or Stale) when Outcome is Duplicate.
	Prior Outcome
}

// Handler applies a message's effect in tx, the same transaction that records it.
type Handler[TTx any] func(ctx context.Context, tx TTx, msg InboxMessage) error

// Inbox processes each message of a consumer at most once, with its effect, in one local
// transaction. TTx is the adapter's transaction type.
type Inbox[TTx any] struct {
	store driver.InboxStore[TTx]
	o     InboxOptions
	inst  *inboxInstruments
}

// NewInbox checks that store's inbox tables exist (driver.InboxStore.CheckInbox) and returns an
// Inbox on store. opts may be nil. An unmigrated store returns a *NotMigratedError
// (ErrSchemaMismatch) that names the remedy.
func NewInbox[TTx any](ctx context.Context, store driver.InboxStore[TTx], opts *InboxOptions) (*Inbox[TTx], error) {
	if store == nil {
		return nil, &OptionError{Field: "store", Reason: "must not be nil"}
	}
	var o InboxOptions
	if opts != nil {
		o = *opts
	}
	if o.Gap != GapAllow && o.Gap != GapReject {
		return nil, &OptionError{Field: "Gap", Reason: "unknown gap policy"}
	}
	if o.FirstVersion < 0 {
		return nil, &OptionError{Field: "FirstVersion", Reason: "must not be negative"}
	}
	if r := driver.CheckTextLen(o.Source, driver.MaxNameLen, false); r != "" {
		return nil, &OptionError{Field: "Source", Reason: r}
	}
	for i, t := range o.Tenants {
		if r := driver.CheckTextLen(t, driver.MaxNameLen, false); r != "" {
			return nil, &OptionError{Field: fmt.Sprintf("Tenants[%d]", i), Reason: r}
		}
	}
	o.Tenants = slices.Clone(o.Tenants)
	if err := store.CheckInbox(ctx); err != nil {
		return nil, storeError("inbox: check schema", err)
	}
	inst, err := newInboxInstruments(o.MeterProvider)
	if err != nil {
		return nil, err
	}
	return &Inbox[TTx]{store: store, o: o, inst: inst}, nil
}

// Process runs, in ONE transaction: the version check, recording (consumer, source, tenant,
// event id, payload digest, position, outcome), the retention check, and handler when the
// outcome is Applied; then it commits. A message older than the consumer's horizon returns
// ErrBeyondRetention (and records nothing) whether or not its record was pruned yet. A
// redelivery with the same digest runs nothing and returns Duplicate with the prior outcome.
// The same key with another digest returns ErrDigestMismatch. The key is (consumer,
// InboxOptions.Source, msg.Tenant, msg.EventID): one tenant's (or source's) message never
// passes for another's, and entity versions are kept per source and tenant alike.
// A handler error rolls everything back (nothing is recorded) and is returned as is. A handler
// that panics is treated the same way: the transaction is rolled back (nothing is recorded) and
// the panic propagates to Process's caller unchanged; recover it there to go on.
// A message or consumer name that breaks a documented rule returns a *MessageError
// (ErrInvalidMessage) before anything runs, a tenant that InboxOptions.Tenants does not list a
// *TenantError (ErrTenantRefused, permanent), and a payload that InboxOptions.Schemas rejects a
// *SchemaError (ErrSchemaRejected, permanent).
// Concurrent deliveries of one key apply the effect once: the adapter's unique key makes the
// later ones wait and then see the record.
func (in *Inbox[TTx]) Process(ctx context.Context, consumer string, msg InboxMessage, handler Handler[TTx]) (_ InboxResult, err error) {
	if err := driver.CheckConsumer(consumer); err != nil {
		return InboxResult{}, err
	}
	if err := msg.check(); err != nil {
		return InboxResult{}, err
	}
	if err := in.checkTenant(&msg); err != nil {
		return InboxResult{}, err
	}
	if handler == nil {
		return InboxResult{}, &MessageError{Field: "handler", Reason: "must not be nil"}
	}
	res := make([]InboxResult, 1)
	began := time.Now()
	defer func() {
		in.inst.processed(ctx, consumer, res[0], err)
		in.inst.recordTx(ctx, consumer, time.Since(began))
	}()
	msgs, err := in.decrypt(ctx, []InboxMessage{msg})
	if err == nil {
		err = checkSchemas(ctx, in.o.Schemas, msgs)
	}
	if err == nil {
		err = in.run(ctx, consumer, msgs, handlers[TTx]{each: func(ctx context.Context, tx TTx, _ int, msg InboxMessage) error {
			return handler(ctx, tx, msg)
		}}, res)
	}
	if be, ok := err.(*BatchError); ok {
		err = be.Err // the error of the one message, as is
	}
	if err != nil {
		res[0] = InboxResult{}
		return InboxResult{}, err
	}
	return res[0], nil
}

// BatchHandler applies the effect of msgs[i], the message ProcessBatch hands it, in tx.
type BatchHandler[TTx any] func(ctx context.Context, tx TTx, i int, msg InboxMessage) error

// ProcessBatch processes msgs in order, each exactly as Process does (the version check, the
// record, the retention check and, when Applied, handler), all in ONE transaction that commits
// once: it is all or nothing. It returns one result per message. When a message fails (a
// *MessageError, *TenantError or *SchemaError before anything runs, ErrDigestMismatch, ErrBeyondRetention,
// ErrVersionGap, a handler error or panic), the whole transaction rolls back, nothing of the
// batch is recorded,
// and the error is a *BatchError naming the message's index that wraps the error Process
// would have returned (errors.Is and errors.As see through it). An error of the transaction
// itself (begin, commit, a cancelled ctx) is returned as is, and so may be a database error
// of a step that serves the whole batch (InboxBatchStore). Later messages see the effects of
// earlier ones: a second delivery of an event ID in one batch is a Duplicate, and versions of
// one entity must ascend within the batch as they would across calls.
//
// A batch amortises the transaction's begin and commit over its messages; it also holds the
// version locks of all its entities until it commits, so keep batches small where many
// consumers share entities. An empty batch returns nil, nil.
func (in *Inbox[TTx]) ProcessBatch(ctx context.Context, consumer string, msgs []InboxMessage, handler BatchHandler[TTx]) ([]InboxResult, error) {
	return in.processBatch(ctx, consumer, msgs, handlers[TTx]{each: handler})
}

// SetHandler applies, in tx, the effects of the Applied messages of a ProcessSet batch, in
// batch order: one call for the whole batch, so that it can write all their effects in one
// statement.
type SetHandler[TTx any] func(ctx context.Context, tx TTx, applied []InboxMessage) error

// ProcessSet is ProcessBatch with one handler call for the batch instead of one per message:
// every message is checked and recorded as ProcessBatch does, then handler receives the
// messages whose outcome is Applied (not the Duplicate or Stale ones), in batch order, once,
// in the same transaction; it is not called when none is Applied. A handler error (or panic)
// rolls the whole batch back, nothing of it is recorded, and the error is returned wrapped
// (errors.Is sees it), not as a *BatchError: it belongs to no one message. Everything else
// (results, errors, an empty batch) is as ProcessBatch. Use it where the effects of many
// messages can be written at once (one INSERT … SELECT of all of them): the per-message
// round trips of ProcessBatch's handler then go.
func (in *Inbox[TTx]) ProcessSet(ctx context.Context, consumer string, msgs []InboxMessage, handler SetHandler[TTx]) ([]InboxResult, error) {
	return in.processBatch(ctx, consumer, msgs, handlers[TTx]{set: handler})
}

// handlers is the handler of a batch: each, called per Applied message, or set, called once
// with all of them. Neither is set when the caller passed a nil one (processBatch refuses that).
type handlers[TTx any] struct {
	each BatchHandler[TTx]
	set  SetHandler[TTx]
}

// processBatch is ProcessBatch and ProcessSet.
func (in *Inbox[TTx]) processBatch(ctx context.Context, consumer string, msgs []InboxMessage, handler handlers[TTx]) (_ []InboxResult, err error) {
	if err := driver.CheckConsumer(consumer); err != nil {
		return nil, err
	}
	for i := range msgs {
		if err := msgs[i].check(); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
		if err := in.checkTenant(&msgs[i]); err != nil {
			return nil, &BatchError{Index: i, Err: err}
		}
	}
	if handler.each == nil && handler.set == nil {
		return nil, &MessageError{Field: "handler", Reason: "must not be nil"}
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	res := make([]InboxResult, len(msgs))
	began, returned := time.Now(), false
	defer func() {
		var be *BatchError
		switch {
		case returned && err == nil:
			for i := range res {
				in.inst.processed(ctx, consumer, res[i], nil)
			}
		case errors.As(err, &be):
			// The others were rolled back unprocessed: they are processed again later.
			in.inst.processed(ctx, consumer, InboxResult{}, be.Err)
		default: // the transaction failed, or a handler panicked
			in.inst.processed(ctx, consumer, InboxResult{}, errBatchFailed)
		}
		in.inst.recordTx(ctx, consumer, time.Since(began))
	}()
	if msgs, err = in.decrypt(ctx, msgs); err == nil {
		if err = checkSchemas(ctx, in.o.Schemas, msgs); err == nil {
			err = in.run(ctx, consumer, msgs, handler, res)
		}
	}
	returned = true
	if err != nil {
		return nil, err
	}
	return res, nil
}

// run processes msgs in one transaction (applyBatch), on the adapter's InboxBatchStore or,
// without one, on its InboxStore one call per message; when the records found already
// recorded were not the ones the outcomes assumed, it runs again, knowing them (by recordKey).
func (in *Inbox[TTx]) run(ctx context.Context, consumer string, msgs []InboxMessage, handler handlers[TTx], res []InboxResult) error {
	bs, ok := in.store.(driver.InboxBatchStore[TTx])
	if !ok {
		bs = oneByOne[TTx]{in.store}
	}
	var recorded map[string]bool
	for attempt := 1; ; attempt++ {
		err := in.store.InTx(ctx, func(ctx context.Context, tx TTx) error {
			return in.applyBatch(ctx, tx, bs, consumer, msgs, handler, res, recorded)
		})
		var replay *replayError
		if !errors.As(err, &replay) {
			return err
		}
		if attempt == 3 {
			return fmt.Errorf("inbox: the records of the batch kept changing under it (%d tries)", attempt)
		}
		recorded = replay.recorded
	}
}

// replayError makes run roll back applyBatch and run it again, knowing which records (by
// recordKey) were recorded.
type replayError struct{ recorded map[string]bool }

func (*replayError) Error() string { return "inbox: batch outcomes replayed" }

// oneByOne is an InboxStore's InboxBatchStore: one call per entity or record.
type oneByOne[TTx any] struct{ s driver.InboxStore[TTx] }

func (o oneByOne[TTx]) LockVersions(ctx context.Context, tx TTx, consumer string, entities []string) (map[string]int64, error) {
	out := make(map[string]int64, len(entities))
	for _, e := range entities {
		v, ok, err := o.s.LockVersion(ctx, tx, consumer, e)
		if err != nil {
			return nil, err
		}
		if ok {
			out[e] = v
		}
	}
	return out, nil
}

func (o oneByOne[TTx]) InsertRecords(ctx context.Context, tx TTx, recs []driver.InboxRecord) ([]driver.InboxRecord, []bool, error) {
	existing, inserted := make([]driver.InboxRecord, len(recs)), make([]bool, len(recs))
	for i, rec := range recs {
		var err error
		if existing[i], inserted[i], err = o.s.InsertRecord(ctx, tx, rec); err != nil {
			return nil, nil, err
		}
	}
	return existing, inserted, nil
}

func (o oneByOne[TTx]) SetVersions(ctx context.Context, tx TTx, consumer string, versions map[string]int64) error {
	for _, e := range slices.Sorted(maps.Keys(versions)) {
		if err := o.s.SetVersion(ctx, tx, consumer, e, versions[e]); err != nil {
			return err
		}
	}
	return nil
}

// applyBatch is the inbox's one rule, for one message (Process) or many (ProcessBatch), in tx,
// giving each message the outcome it would get processed alone after the earlier ones: the
// versions of the messages' entities are locked first; each message's outcome follows from
// them and from the earlier messages (a message of an event ID in recorded, or repeated in
// msgs, changes no version); the records are inserted; the horizon is read once, after every
// insert (the retention rule needs a read after the message's insert, before anything else
// of tx could have taken a snapshot); then each message in order is checked (retention,
// digest, gap) and, when Applied, handed to handler; the new versions are stored at the end.
// When the records found already there are not those of recorded (a redelivery the outcomes
// took as new, or the reverse) the outcomes may be wrong: it returns a *replayError.
func (in *Inbox[TTx]) applyBatch(ctx context.Context, tx TTx, bs driver.InboxBatchStore[TTx], consumer string, msgs []InboxMessage, handler handlers[TTx], res []InboxResult, recorded map[string]bool) error {
	seen := map[string]bool{}
	var entities []string
	keys, ents := make([]string, len(msgs)), make([]string, len(msgs)) // recordKey, entityKey
	for i := range msgs {
		keys[i] = recordKey(&msgs[i])
		if msgs[i].Version > 0 {
			ents[i] = in.entityKey(msgs[i].Tenant, msgs[i].Entity)
			if !seen[ents[i]] {
				seen[ents[i]] = true
				entities = append(entities, ents[i])
			}
		}
	}
	slices.Sort(entities)
	last := map[string]int64{}
	if len(entities) > 0 {
		var err error
		if last, err = bs.LockVersions(ctx, tx, consumer, entities); err != nil {
			return fmt.Errorf("inbox: lock versions: %w", err)
		}
	}
	type plan struct {
		digest   [32]byte
		first    int // index of the first message of this event ID in the batch
		rec      int // index into recs (first occurrences)
		outcome  Outcome
		gap, set bool // set: the outcome raised the entity's version
	}
	plans := make([]plan, len(msgs))
	firsts := map[string]int{}
	recs := make([]driver.InboxRecord, 0, len(msgs))
	for i := range msgs {
		m, p := &msgs[i], &plans[i]
		p.digest = sha256.Sum256(m.Payload)
		if j, ok := firsts[keys[i]]; ok {
			p.first, p.rec = j, plans[j].rec
			continue
		}
		firsts[keys[i]] = i
		p.first, p.rec, p.outcome = i, len(recs), Applied
		if m.Version > 0 && !recorded[keys[i]] {
			v, ok := last[ents[i]]
			switch {
			case ok && m.Version <= v:
				p.outcome = Stale
			case ok && in.o.Gap == GapReject && m.Version > v+1:
				p.gap = true
			case !ok && in.o.Gap == GapReject && in.o.FirstVersion > 0 && m.Version > in.o.FirstVersion:
				p.gap = true
			}
			if p.outcome == Applied && !p.gap {
				last[ents[i]], p.set = m.Version, true
			}
		}
		recs = append(recs, driver.InboxRecord{Consumer: consumer, Source: in.o.Source, Tenant: m.Tenant, EventID: m.EventID, Digest: p.digest,
			SourcePosition: m.SourcePosition, Outcome: p.outcome, OccurredAt: m.OccurredAt})
	}
	existing, inserted, err := bs.InsertRecords(ctx, tx, recs)
	if err != nil {
		return fmt.Errorf("inbox: records: %w", err)
	}
	found, replay := map[string]bool{}, false
	for i := range plans {
		if p := &plans[i]; p.first == i {
			if !inserted[p.rec] {
				found[keys[i]] = true
			}
			// A message taken as recorded that was not changes no outcome unless it has a version.
			if (p.set && !inserted[p.rec]) || (recorded[keys[i]] && inserted[p.rec] && msgs[i].Version > 0) {
				replay = true
			}
		}
	}
	if replay {
		return &replayError{recorded: found}
	}
	horizon, err := in.store.Horizon(ctx, tx, consumer)
	if err != nil {
		return fmt.Errorf("inbox: horizon: %w", err)
	}
	in.inst.horizonSeen(ctx, consumer, horizon)
	versions := map[string]int64{}
	var applied []InboxMessage // for handler.set
	for i := range msgs {
		m, p := &msgs[i], &plans[i]
		if err := checkHorizon(consumer, m, horizon); err != nil {
			return &BatchError{Index: i, Err: err}
		}
		prior := existing[p.rec]
		if inserted[p.rec] {
			first := &plans[p.first]
			prior = driver.InboxRecord{Digest: first.digest, Outcome: first.outcome}
		}
		if p.first != i || !inserted[p.rec] {
			if prior.Digest != p.digest {
				return &BatchError{Index: i, Err: fmt.Errorf("%w: consumer %q event %s%s", ErrDigestMismatch, consumer, m.EventID, in.scopeText(m.Tenant))}
			}
			res[i] = InboxResult{Outcome: Duplicate, Prior: prior.Outcome}
			continue
		}
		if p.gap {
			return &BatchError{Index: i, Err: fmt.Errorf("%w: consumer %q entity %q version %d%s", ErrVersionGap, consumer, m.Entity, m.Version, in.scopeText(m.Tenant))}
		}
		res[i] = InboxResult{Outcome: p.outcome}
		if p.outcome == Stale {
			continue
		}
		if handler.set != nil {
			applied = append(applied, *m)
		} else if err := handler.each(ctx, tx, i, *m); err != nil {
			return &BatchError{Index: i, Err: err}
		}
		if m.Version > 0 {
			versions[ents[i]] = m.Version
		}
	}
	if len(applied) > 0 {
		if err := handler.set(ctx, tx, applied); err != nil {
			return fmt.Errorf("inbox: handler: %w", err)
		}
	}
	if len(versions) > 0 {
		if err := bs.SetVersions(ctx, tx, consumer, versions); err != nil {
			return fmt.Errorf("inbox: set versions: %w", err)
		}
	}
	return nil
}

// recordKey tells msg's record apart from the others of a batch: its tenant and event ID
// (the consumer and source are the batch's).
func recordKey(msg *InboxMessage) string { return msg.Tenant + scopeSep + msg.EventID }

// scopeText names the source and tenant of a message for an error, "" when neither is set.
func (in *Inbox[TTx]) scopeText(tenant string) string {
	if in.o.Source == "" && tenant == "" {
		return ""
	}
	return fmt.Sprintf(" (source %q, tenant %q)", in.o.Source, tenant)
}

// checkHorizon is the retention check of msg against consumer's horizon.
func checkHorizon(consumer string, msg *InboxMessage, horizon time.Time) error {
	if !horizon.IsZero() && msg.OccurredAt.IsZero() {
		return &MessageError{Field: "OccurredAt", Reason: "required: consumer " + consumer + " prunes its inbox (it has a retention horizon)"}
	}
	if !horizon.IsZero() && msg.OccurredAt.Before(horizon) {
		return fmt.Errorf("%w: event %s occurred at %s, horizon %s", ErrBeyondRetention, msg.EventID,
			msg.OccurredAt.UTC().Format(time.RFC3339Nano), horizon.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// errBatchFailed stands, in the metrics (outcome failed), for a batch whose transaction failed
// or whose handler panicked.
var errBatchFailed = errors.New("inbox: batch failed")

// Prune raises consumer's retention horizon to before and deletes its records of messages that
// occurred earlier, limit at a time, until none is left. Messages older than the horizon are
// rejected afterwards with ErrBeyondRetention. It returns how many records it deleted.
// before must lie between MinTime and now plus MaxClockSkew (a future horizon would reject every
// message for good): otherwise Prune returns an error wrapping ErrInvalidHorizon and changes
// nothing. limit <= 0 means 1000; at most MaxPruneLimit.
func (in *Inbox[TTx]) Prune(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	limit, err := driver.CheckInboxPrune(consumer, before, limit)
	if err != nil {
		return 0, err
	}
	total := 0
	defer func() { in.inst.prunedRecords(ctx, consumer, total) }()
	for {
		n, err := in.store.PruneInbox(ctx, consumer, before, limit)
		total += n
		if err != nil {
			return total, fmt.Errorf("inbox: prune: %w", err)
		}
		in.inst.horizonSeen(ctx, consumer, before) // raised (never lowered) to before
		if n < limit {
			return total, nil
		}
	}
}
