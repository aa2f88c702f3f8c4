package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The audited operator capability of the SQL adapters (PostgreSQL, MySQL/MariaDB, SQLite):
// replay, unpark, prune, lane reset and inbox prune, each writing its AuditEntry in the
// transaction of the change, and the audit log. `outboxkit replay|unpark|cleanup|lanes
// reset|inbox prune|audit` use it.

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
	// Rows is how many rows the change affected (set by the adapter). An "inbox prune" row
	// holds -1 until its deletions finished (see Operator.PruneInboxAudited).
	Rows int64
}

// AuditListParams selects audit rows: at or after Since (zero: all), the latest Limit
// (<= 0: DefaultListLimit), returned oldest first.
type AuditListParams struct {
	Since time.Time
	Limit int
}

// Operator is the SQL adapters' audited operator capability.
type Operator interface {
	// Replay puts the published events of p back to pending (published_at, attempts,
	// next_attempt_at, last_error and parked_at cleared) in one transaction, and returns how
	// many. Replayed rows keep their Seq, so a polling relay delivers them again in their
	// original order and cleanup's watermark (the lowest unpublished Seq) holds back behind them
	// until they are published again. Replay changes nothing and returns an error wrapping
	// ErrReplayNotFound, ErrReplayKeyPending, ErrReplayCDC or ErrReplayTooMany when p selects
	// an unknown or pruned ID, a key with unpublished events, a CDC-published outbox, or too
	// many events; p must give IDs or a PartitionKey (an *OptionError otherwise).
	Replay(ctx context.Context, p ReplayParams) (int, error)
	// UnparkKeys unparks the keys (as Admin.Unpark) in one transaction, writes audit (when not
	// nil, Rows set) in it, and returns how many records changed.
	UnparkKeys(ctx context.Context, keys []string, audit *AuditEntry) (int, error)
	// PruneAudited deletes, in one transaction, every row PruneOutbox would delete under p
	// (batches of p.BatchSize()), writes audit (Rows set) in it, and returns how many.
	PruneAudited(ctx context.Context, p PruneParams, audit AuditEntry) (int, error)
	// ResetLanes ends, in one transaction with audit (Rows set to the lanes changed), the
	// leases of the lanes p selects that have an owner (a valid or an expired lease; free
	// lanes are left alone): owner and sign of life (driver.Liveness) cleared, lease expired,
	// generation incremented. Whatever the old owner settles or renews afterwards is refused
	// (its lease no longer matches: RelayStore.Settle's fencing) and any relay may claim the
	// lanes at its next claim. It returns how many lanes it changed. p is checked first
	// (CheckResetLanes): a bad selection returns an *OptionError and changes nothing.
	ResetLanes(ctx context.Context, p ResetLanesParams, audit AuditEntry) (int, error)
	// PruneInboxAudited is Inbox.Prune of the consumer's records older than before (the same
	// checks: CheckInboxPrune; the same retention rule: InboxStore.PruneInbox), audited. The
	// audit row is written in the transaction that raises the horizon, with Rows -1, and its
	// Rows set to the records deleted in the transaction of the last deletion: the horizon
	// never moves without its audit row, and a row left at -1 says the horizon was raised but
	// the deletions did not finish (a later prune deletes the rest). On a single-writer
	// database (SQLite) all of it may run in one transaction, Rows set at once. It returns how
	// many records it deleted.
	PruneInboxAudited(ctx context.Context, consumer string, before time.Time, limit int, audit AuditEntry) (int, error)
	// AuditLog returns the audit rows of p.
	AuditLog(ctx context.Context, p AuditListParams) ([]AuditEntry, error)
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

// ReplayTarget is one row a Replay selected (the adapters' shared check input).
type ReplayTarget struct {
	Seq          int64
	ID           string
	PartitionKey string
	Published    bool
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

// CheckpointReleaser is the CDC adapters' (PostgreSQL, MySQL/MariaDB) audited removal of the
// CDC checkpoint: `outboxkit cdc release`.
type CheckpointReleaser interface {
	// ReleaseCheckpoint deletes the CDC checkpoint and writes audit (Rows set to 1 when there
	// was a checkpoint, else 0) in one transaction, and reports whether there was one. The next
	// CDCRelay.Run then starts as on its first run: a backfill of every unpublished row, then
	// the head of the log. It is the recovery from a lost position (a dropped or invalidated
	// slot, purged binary logs) for a relay run by `outboxkit relay`. Stop the CDC relay first.
	ReleaseCheckpoint(ctx context.Context, audit AuditEntry) (bool, error)
}

// AuditWriter is the CDC adapters' (PostgreSQL, MySQL/MariaDB) audit row written on its own,
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
