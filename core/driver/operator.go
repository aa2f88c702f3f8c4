package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The audited operator commands of outboxkit (replay, unpark, cleanup, lanes reset, lanes
// resize, inbox prune) and its status reads. core.Operator orchestrates each command once:
// argument checks, the refusal of a CDC publisher, the steps in one transaction of the store,
// the audit row written in that transaction, and waking the relays afterwards. An adapter
// supplies the steps (OperatorStore, OperatorTx: SQL and scanning) and the reads
// (StatusReader); `outboxkit replay|unpark|cleanup|lanes|inbox prune|audit|status` use it.

// Replay's refusals: each is wrapped by the error of a Replay that changed nothing.
var (
	// ErrReplayNotFound: an ID names no outbox row (never written, or already deleted by
	// cleanup or by a relay that deletes on publish), or --key/--since match no published row.
	ErrReplayNotFound = errors.New("outbox: replay: no such published event")
	// ErrReplayKeyPending: a partition key of the replay still has unpublished events (pending,
	// retrying or parked; an ID that is itself unpublished is one). Replaying then could put an
	// event behind a later event of its key that a relay holds in flight; wait until the key has
	// drained (unpark it if it is parked) and replay again.
	ErrReplayKeyPending = errors.New("outbox: replay: partition key has unpublished events")
	// ErrReplayCDC: the outbox's publisher generation is a CDC relay's. A CDC relay delivers
	// what the database log carries as inserted and does not see a row that becomes unpublished
	// again; stop it and run the polling relay to replay.
	ErrReplayCDC = errors.New("outbox: replay: the publisher is a CDC relay (replay needs the polling relay)")
	// ErrReplayTooMany: more than MaxReplay events match; narrow --since.
	ErrReplayTooMany = errors.New("outbox: replay: too many events")
)

// MaxReplay is the most events one Replay puts back (one transaction).
const MaxReplay = 10_000

// ReplayParams selects published events to put back to pending: IDs, or PartitionKey with
// Since (events of the key created at or after Since).
type ReplayParams struct {
	IDs          []string
	PartitionKey string
	Since        time.Time
	// Audit, when not nil, is written to the audit table in the replay's transaction with Rows
	// set to the number of events replayed.
	Audit *AuditEntry
}

// AuditEntry is one row of the outbox's audit table (Table+"_audit"): an operator change.
type AuditEntry struct {
	ID        int64     // assigned by the database
	At        time.Time // set by the database clock
	Actor     string    // who ran it (outboxkit --actor, default the OS user)
	Command   string    // "replay", "unpark", "cleanup", "cdc release", "lanes reset", "inbox prune"
	Arguments string    // the command's arguments as a JSON object
	// Rows is how many rows the change affected (set by core.Operator). An "inbox prune" row
	// holds -1 until its deletions finished (see core.Operator.PruneInbox).
	Rows int64
}

// AuditListParams selects audit rows: at or after Since (zero: all), the latest Limit
// (<= 0: DefaultListLimit), returned oldest first.
type AuditListParams struct {
	Since time.Time
	Limit int
}

// ResetLanesParams selects the lanes of a ResetLanes: exactly one of Lanes, Owner and All.
type ResetLanesParams struct {
	Lanes []int  // these lanes (0 to the lane count - 1)
	Owner string // every lane this owner holds
	All   bool   // every lane with an owner
}

// CheckResetLanes checks p against the outbox's lane count: exactly one selection, every lane
// in [0, lanes). It returns the lanes of p.Lanes sorted, once each: the adapters' shared
// argument check.
func CheckResetLanes(p ResetLanesParams, lanes int) ([]int, error) {
	n := 0
	for _, given := range []bool{len(p.Lanes) > 0, p.Owner != "", p.All} {
		if given {
			n++
		}
	}
	if n != 1 {
		return nil, &OptionError{Field: "ResetLanesParams", Reason: "give exactly one of Lanes, Owner and All"}
	}
	for _, l := range p.Lanes {
		if l < 0 || l >= lanes {
			return nil, &OptionError{Field: "ResetLanesParams.Lanes", Reason: fmt.Sprintf("lane %d is outside 0 to %d", l, lanes-1)}
		}
	}
	out := slices.Clone(p.Lanes)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// CheckReplay checks p's selection (IDs, or a PartitionKey) and returns its IDs deduplicated
// in their order: the adapters' shared argument check.
func CheckReplay(p ReplayParams) ([]string, error) {
	if (len(p.IDs) == 0) == (p.PartitionKey == "") {
		return nil, &OptionError{Field: "ReplayParams", Reason: "give IDs or a PartitionKey"}
	}
	if len(p.IDs) > MaxReplay {
		return nil, ErrReplayTooMany
	}
	seen := make(map[string]bool, len(p.IDs))
	var ids []string
	for _, id := range p.IDs {
		if id == "" {
			return nil, &OptionError{Field: "ReplayParams.IDs", Reason: "empty ID"}
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// ReplayTarget is one row a Replay selected (OperatorTx.ReplayTargets) and puts back to
// pending (OperatorTx.Requeue).
type ReplayTarget struct {
	Seq          int64
	ID           string
	PartitionKey string
	Published    bool
	// Lane is the lane the row is put back to pending in: LaneOf(PartitionKey, the lane count
	// OperatorTx.BeginReplay returned), set by core.Operator before Requeue (all unpublished
	// rows of a key share one lane, and a row published before a resize has its lane under the
	// old count). ReplayTargets leaves it as it likes.
	Lane int
}

// CheckReplayTargets applies Replay's refusals to the rows the adapter selected (in the
// replay's transaction): key (ReplayParams.PartitionKey) without unpublished events, every ID
// found and published, some row found, no more than MaxReplay, no key of a row with unpublished
// events. pendingKey reports whether a key has an unpublished event. It returns the seqs to
// replay.
func CheckReplayTargets(ids []string, key string, rows []ReplayTarget, pendingKey func(key string) (bool, error)) ([]int64, error) {
	if key != "" {
		pending, err := pendingKey(key)
		if err != nil {
			return nil, err
		}
		if pending {
			return nil, &ReplayError{Err: ErrReplayKeyPending, Detail: "key " + key}
		}
	}
	found := make(map[string]bool, len(rows))
	for _, r := range rows {
		found[r.ID] = true
	}
	var missing []string
	for _, id := range ids {
		if !found[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return nil, &ReplayError{Err: ErrReplayNotFound, Detail: "unknown or pruned: " + joinLimited(missing)}
	}
	if len(rows) == 0 {
		return nil, &ReplayError{Err: ErrReplayNotFound, Detail: "no published event of the key since then"}
	}
	if len(rows) > MaxReplay {
		return nil, &ReplayError{Err: ErrReplayTooMany, Detail: "more than 10000 match"}
	}
	var seqs []int64
	keys := map[string]bool{}
	for _, r := range rows {
		if !r.Published {
			return nil, &ReplayError{Err: ErrReplayKeyPending, Detail: "event " + r.ID + " is unpublished"}
		}
		seqs = append(seqs, r.Seq)
		if !keys[r.PartitionKey] && r.PartitionKey != key {
			keys[r.PartitionKey] = true
			pending, err := pendingKey(r.PartitionKey)
			if err != nil {
				return nil, err
			}
			if pending {
				return nil, &ReplayError{Err: ErrReplayKeyPending, Detail: "key " + r.PartitionKey}
			}
		}
	}
	return seqs, nil
}

// ReplayError is a Replay refusal: Err is one of the ErrReplay sentinels.
type ReplayError struct {
	Err    error
	Detail string
}

func (e *ReplayError) Error() string { return e.Err.Error() + ": " + e.Detail }
func (e *ReplayError) Unwrap() error { return e.Err }

func joinLimited(ids []string) string {
	const most = 10
	s := ""
	for i, id := range ids {
		if i == most {
			return s + ", ..."
		}
		if i > 0 {
			s += ", "
		}
		s += id
	}
	return s
}

// ErrPermissionDenied means the database refused a statement for the role's privileges
// (PostgreSQL SQLSTATE 42501, MySQL/MariaDB errors 1044, 1142, 1143 and 1227, a read-only
// SQLite file). Each SQL adapter maps its database's refusals to it in one place (its
// ClassifyError) and every error of its store wraps it, with the database's own error still
// reachable through errors.As. Nothing was changed.
var ErrPermissionDenied = errors.New("outbox: permission denied")

// StatusReader is the status reads of `outboxkit status` beyond Admin, each an indexed read or
// an estimate that operators may run often on a large outbox. Every adapter of this module
// implements it.
type StatusReader interface {
	Admin
	// Blocked returns how many pending (unpublished, not parked) records wait behind an
	// earlier parked record of their partition key (a SQL adapter may look at a bounded number
	// of pending records and return a lower bound beyond them).
	Blocked(ctx context.Context) (int64, error)
	// Lanes returns every lane's lease as the store holds it, in lane order: a free lane has
	// no Owner. TakenOver is never set.
	Lanes(ctx context.Context) ([]Lease, error)
	// PendingDestinations returns how many pending (unpublished, not parked) records each
	// destination (Event.Destination, "" when the router decides) has among the first limit
	// pending records in seq order: the whole backlog when it is smaller.
	PendingDestinations(ctx context.Context, limit int) (map[string]int64, error)
	// PublishRate returns the records published per second over the last window (by the
	// store's clock), from at most about limit of the most recently published records: when
	// more were published in the window, the rate of the last ones read over the time they
	// took. ok is false (rate 0, no error) when the store cannot tell (no index or log of
	// publication times: an outbox migrated by an older version). Records deleted on publish
	// are not counted.
	PublishRate(ctx context.Context, window time.Duration, limit int) (rate float64, ok bool, err error)
	// InboxConsumers returns the consumers of the store's inbox (those that hold records or
	// have a retention horizon) in name order, at most MaxInboxConsumers of them, each with its
	// horizon and its record count read up to limit records (More set when it holds more): an
	// indexed read whatever the inbox's size.
	InboxConsumers(ctx context.Context, limit int) ([]InboxConsumer, error)
}

// InboxConsumer is one consumer of an inbox as StatusReader.InboxConsumers reads it.
type InboxConsumer struct {
	Consumer string
	// Horizon is the consumer's retention horizon (Inbox.Prune); zero when never pruned.
	Horizon time.Time
	// Records is how many inbox records the consumer holds, counted up to the read's limit;
	// More is set when it holds more than Records.
	Records int64
	More    bool
}

// MaxInboxConsumers bounds how many consumers StatusReader.InboxConsumers returns.
const MaxInboxConsumers = 1000

// OperatorStore is what core.Operator needs from an adapter: the status reads, the lane count,
// the audit log and one read-write transaction in which core.Operator runs the steps of an
// operator command (OperatorTx). Every adapter of this module implements it.
type OperatorStore interface {
	StatusReader
	// LaneCount is as for RelayStore.
	LaneCount(ctx context.Context) (int, error)
	// InOperatorTx runs fn in one read-write transaction of the outbox's database: commit when
	// fn returns nil, roll back otherwise (and when fn panics). It returns fn's error as it is,
	// or the error of the begin or the commit. It may run fn again after a transient failure
	// (a deadlock victim): fn starts afresh each time. The OperatorTx is valid only inside fn.
	InOperatorTx(ctx context.Context, fn func(ctx context.Context, tx OperatorTx) error) error
	// ListAudit returns the latest p.Limit audit rows (p.Limit > 0, given by core.Operator) at
	// or after p.Since (zero: all), newest first.
	ListAudit(ctx context.Context, p AuditListParams) ([]AuditEntry, error)
}

// OperatorTx is the steps of the operator commands in one transaction of an OperatorStore:
// small statements with no policy of their own. core.Operator calls them in the order its
// commands document; each step returns the database's error (classified, as the store's
// other errors) and leaves refusals to core.
type OperatorTx interface {
	// BeginReplay is a replay's first step: it returns the lane count and holds back, until
	// the transaction ends, whatever would change the count (a resize) or delete the
	// outbox's published rows (a cleanup), so that the rows the replay selects stay and the
	// lanes it computes hold.
	BeginReplay(ctx context.Context) (lanes int, err error)
	// BeginResize is a resize's first step: it waits for the writer transactions in flight,
	// holds new ones back until the transaction ends (LaneInserter: their checked inserts see
	// the new count once it commits) and returns the lane count. An outbox not migrated for
	// resizes returns an error wrapping ErrSchemaMismatch.
	BeginResize(ctx context.Context) (lanes int, err error)
	// Publisher returns the outbox's publisher generation (as Admin.Generation), read in the
	// transaction (where the database can, so that an AcquireGeneration waits for it).
	Publisher(ctx context.Context) (Publisher, error)
	// ReplayTargets selects, and locks until the transaction ends, the rows of a replay: the
	// outbox rows whose ID is one of p.IDs (deduplicated, CheckReplay), or when p.IDs is empty
	// up to limit published rows of p.PartitionKey created at or after p.Since (zero: any
	// time), in seq order, each with whether it is published.
	ReplayTargets(ctx context.Context, p ReplayParams, limit int) ([]ReplayTarget, error)
	// KeyUnpublished reports whether key has an unpublished record (pending, retrying or
	// parked).
	KeyUnpublished(ctx context.Context, key string) (bool, error)
	// Requeue puts the published rows back to pending, each as never attempted (attempts,
	// next attempt, last error and parked cleared; its earlier publication forgotten, so that
	// cleanup keeps it) in its Lane, keeping its Seq, and returns how many it changed.
	Requeue(ctx context.Context, rows []ReplayTarget) (int64, error)
	// Unpark is Admin.Unpark of one key in the transaction.
	Unpark(ctx context.Context, key string) (int64, error)
	// PruneOutbox is Pruner.PruneOutbox of one batch (at most p.BatchSize() rows) in the
	// transaction. It deletes rows (a partitioned outbox's partitions are not dropped).
	PruneOutbox(ctx context.Context, p PruneParams) (int64, error)
	// ResetLanes ends the leases of the lanes p selects (checked: CheckResetLanes; Lanes empty
	// and Owner "" with All) that have an owner (a valid or an expired lease; free lanes are
	// left alone): owner and sign of life (Liveness) cleared, lease expired, generation
	// incremented. It returns how many lanes it changed.
	ResetLanes(ctx context.Context, p ResetLanesParams) (int64, error)
	// ResizeLanes, after BeginResize returned from, changes the lane count to to (from != to):
	// it locks every lane row in lane order and ends every lease as ResetLanes does, adds or
	// removes lane rows, sets the lane of every unpublished row (pending, retrying or parked)
	// to LaneOf(its partition key, to), records to as the lane count, and returns how many
	// rows it moved (rows whose lane changed).
	ResizeLanes(ctx context.Context, from, to int) (moved int64, err error)
	// RaiseHorizon raises the consumer's inbox retention horizon to before (never lowers it)
	// and returns the horizon in force.
	RaiseHorizon(ctx context.Context, consumer string, before time.Time) (time.Time, error)
	// PruneInbox deletes up to limit of the consumer's inbox records that occurred before
	// horizon and returns how many.
	PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error)
	// WriteAudit writes a to the audit table with its Rows as given (ID and At set by the
	// store's clock; Arguments "" stored as "{}") and returns its ID.
	WriteAudit(ctx context.Context, a AuditEntry) (id int64, err error)
	// SetAuditRows sets the Rows of audit row id, written with -1, to rows (a row whose Rows
	// is no longer -1 is left as it is).
	SetAuditRows(ctx context.Context, id, rows int64) error
}

// SingleWriter is an optional OperatorStore capability: the database runs one write
// transaction at a time (SQLite, the memory store), so no inbox transaction runs beside an
// operator transaction. core.Operator's PruneInbox then raises the horizon, deletes every
// record and writes its audit row in one transaction (InboxStore.PruneInbox's retention rule
// for a single writer), and the audit row never holds -1.
type SingleWriter interface {
	// SingleWriter reports whether the store's write transactions run one at a time.
	SingleWriter() bool
}

// CheckpointReleaser is the CDC adapters' (PostgreSQL, MySQL/MariaDB, memory) audited removal of the
// CDC checkpoint: `outboxkit cdc release`.
type CheckpointReleaser interface {
	// ReleaseCheckpoint deletes the CDC checkpoint and writes audit (Rows set to 1 when there
	// was a checkpoint, else 0) in one transaction, and reports whether there was one. The next
	// CDCRelay.Run then starts as on its first run: a backfill of every unpublished row, then
	// the head of the log. It is the recovery from a lost position (a dropped or invalidated
	// slot, purged binary logs) for a relay run by `outboxkit relay`. Stop the CDC relay first.
	ReleaseCheckpoint(ctx context.Context, audit AuditEntry) (bool, error)
}

// AuditWriter is the CDC adapters' (PostgreSQL, MySQL/MariaDB, memory) audit row written on its own,
// for an operator change that cannot share a transaction with its row: `outboxkit backfill`
// publishes over the network, then writes its row with the number of events published.
type AuditWriter interface {
	// WriteAudit writes audit to the audit table, with its Rows as given (ID and At are set by
	// the database), in a transaction of its own.
	WriteAudit(ctx context.Context, audit AuditEntry) error
	// CheckAudit writes a row in a transaction that it rolls back, and returns the database's
	// refusal (missing privileges, a missing table) if any: the check of a change that writes
	// its row afterwards, before it changes anything. It leaves no row (on PostgreSQL an audit
	// ID is used up).
	CheckAudit(ctx context.Context) error
}

// ErrAuditChecked ends the transaction of an adapter's CheckAudit: it rolls the row back.
var ErrAuditChecked = errors.New("outbox: audit check: rolled back")
