package driver

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The interfaces in this file are what a database adapter implements. Each is sized for its one
// caller in package core: OutboxStore for Outbox, RelayStore for Relay, InboxStore for Inbox,
// Pruner for CleanupOutbox. Admin and Notifier are optional capabilities.
//
// Time: every call that compares against "now" takes a Now field. The zero value means the
// database clock (the default and what production uses); a non-zero value is used instead, so
// tests can move time without sleeping (River's coalesce(@now, now()) pattern).

// Transactor runs fn in one local transaction of the adapter's database: commit when fn returns
// nil, roll back otherwise (and when fn panics). It returns fn's error, or the commit error.
type Transactor[TTx any] interface {
	InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
}

// OutboxStore appends records inside the caller's transaction.
type OutboxStore[TTx any] interface {
	// LaneCount returns the number of lanes recorded when the outbox was migrated.
	LaneCount(ctx context.Context) (int, error)
	// Insert appends the records (Event and Lane filled in; the adapter assigns Seq and
	// CreatedAt) in tx. It is all or nothing: on error none of them is written. A duplicate ID
	// returns an error wrapping ErrDuplicateEvent. On some databases (PostgreSQL) any failed
	// statement aborts the caller's transaction, so after an error roll tx back.
	Insert(ctx context.Context, tx TTx, records []Record) error
}

// Lease is a worker's hold on one lane. Generation increases every time the lane changes hands;
// (Lane, Owner, Generation) is the fencing token of every mark.
type Lease struct {
	Lane       int
	Owner      string
	Generation int64
	Until      time.Time // lease expiry, by the clock that made it
	// TakenOver is set by ClaimLanes on a lease whose lane still had an owner: that owner's
	// lease ran out (or its sign of life was gone) instead of being released. Relays count
	// these as lease expiries. It is informational and no part of the fencing token.
	TakenOver bool
}

// HeldAt reports whether l is still held at now when its lane's lease, as the store reads it
// in the settling (or renewing) transaction, is cur: the same non-empty owner, the same
// generation, and cur.Until after now. It is the fencing rule of RelayStore.Settle and
// RenewLanes; adapters that check leases in Go call it, so that they share one rule.
func (l Lease) HeldAt(cur Lease, now time.Time) bool {
	return cur.Owner != "" && cur.Owner == l.Owner && cur.Generation == l.Generation && cur.Until.After(now)
}

// CheckLeases returns a *LanesLostError naming, sorted and once each, the lanes of the leases
// for which held returns false, or nil when held returns true for every lease.
func CheckLeases(leases []Lease, held func(Lease) bool) error {
	var lost []int
	for _, l := range leases {
		if !held(l) {
			lost = append(lost, l.Lane)
		}
	}
	if len(lost) == 0 {
		return nil
	}
	slices.Sort(lost)
	return &LanesLostError{Lanes: slices.Compact(lost)}
}

// HeartbeatParams registers a relay worker as live.
type HeartbeatParams struct {
	Owner string
	TTL   time.Duration // live until now+TTL; TTL <= 0 deregisters the owner
	Now   time.Time
}

// ClaimParams asks for free or expired lanes.
type ClaimParams struct {
	// Generation is the caller's publisher generation (AcquireGeneration). When the outbox's
	// current generation differs, ClaimLanes claims nothing and returns an error wrapping ErrFenced.
	Generation int64
	Owner      string
	Max        int           // claim at most this many lanes
	TTL        time.Duration // lease length
	Now        time.Time
}

// RenewParams extends leases the owner still holds.
type RenewParams struct {
	// Generation is as for ClaimParams: a stale generation renews nothing and gets ErrFenced.
	Generation int64
	Leases     []Lease
	TTL        time.Duration
	Now        time.Time
}

// FetchParams reads deliverable records of held lanes.
type FetchParams struct {
	Leases []Lease
	Limit  int
	Now    time.Time
}

// Failure records a failed delivery attempt of one record.
type Failure struct {
	Seq   int64
	Lane  int
	Error string        // stored in LastError (already truncated)
	Delay time.Duration // NextAttemptAt = now + Delay
	Park  bool          // set ParkedAt = now: the key stops until Unpark
}

// SettleParams records the result of one send. Every Published seq and Failure must belong to
// one of Leases' lanes.
type SettleParams struct {
	Leases    []Lease
	Published []int64 // seqs the sink acknowledged
	Failed    []Failure
	Delete    bool // delete published rows instead of setting PublishedAt
	Now       time.Time
}

// Publisher kinds.
const (
	KindPolling = "polling"
	KindCDC     = "cdc"
)

// AcquireParams asks for the outbox's publisher generation.
type AcquireParams struct {
	Kind   string // KindPolling or KindCDC
	Holder string // who asks (a relay owner), informational
	// Join, when true and the current generation has the same Kind, returns it unchanged: the
	// workers of one polling fleet share a generation. Otherwise the generation is incremented.
	Join bool
	Now  time.Time
}

// CheckKind returns an *OptionError naming the field Kind unless p.Kind is KindPolling or
// KindCDC. Every adapter's AcquireGeneration calls it before it changes anything.
func (p AcquireParams) CheckKind() error {
	if p.Kind != KindPolling && p.Kind != KindCDC {
		return &OptionError{Field: "Kind", Reason: fmt.Sprintf("unknown publisher kind %q", p.Kind)}
	}
	return nil
}

// Publisher is the outbox's current publisher generation. A fresh outbox has generation 0, kind
// "" and no holder.
type Publisher struct {
	Generation int64
	Kind       string
	Holder     string
	Since      time.Time // when the generation was taken
}

// RelayStore is what the polling relay needs from an adapter.
type RelayStore interface {
	// AcquireGeneration makes the caller the outbox's publisher. An unknown p.Kind returns the
	// error of p.CheckKind and changes nothing. Unless p.Join applies, it
	// increments the generation and records p.Kind, p.Holder and now as Since, in one
	// transaction, and returns the result. From then on ClaimLanes and RenewLanes of any older
	// generation fail with ErrFenced, so the previous publisher stops at its next renewal and its
	// lanes come free (released or expired) for the new one. Leases already held stay valid until
	// then: the old publisher may finish the batch it is sending, so lanes never have two
	// publishers at once.
	AcquireGeneration(ctx context.Context, p AcquireParams) (Publisher, error)
	// LaneCount is as for OutboxStore.
	LaneCount(ctx context.Context) (int, error)
	// Heartbeat registers p.Owner as live until now+TTL (TTL <= 0 removes it) and returns the
	// number of live workers, the caller included when TTL > 0.
	Heartbeat(ctx context.Context, p HeartbeatParams) (live int, err error)
	// ClaimLanes takes up to p.Max lanes whose lease is free or expired at now, lowest lane first,
	// for p.Owner: each taken lane's generation is incremented and its lease runs until now+TTL.
	// A lease taken from a lane that still had an owner (its lease expired; ReleaseLanes frees a
	// lane of its owner) has TakenOver set. Two concurrent callers never get the same lane. A p.Generation other than the current one
	// claims nothing and returns an error wrapping ErrFenced.
	ClaimLanes(ctx context.Context, p ClaimParams) ([]Lease, error)
	// RenewLanes extends, to now+TTL, each given lease whose lane still has the same owner and
	// generation and has not expired at now. It returns the renewed leases; lost ones are omitted.
	// A p.Generation other than the current one renews nothing and returns an error wrapping
	// ErrFenced.
	RenewLanes(ctx context.Context, p RenewParams) ([]Lease, error)
	// ReleaseLanes frees each given lease that is still held (same owner and generation) so that
	// another worker may claim it at once. Leases no longer held are ignored.
	ReleaseLanes(ctx context.Context, leases []Lease) error
	// Fetch returns up to p.Limit records of the leased lanes, in Seq order, that are
	// unpublished, not parked and due (NextAttemptAt empty or <= now), and whose partition key has
	// no earlier unpublished record that is parked or not yet due. Leases are not checked here
	// (Settle is fenced) and p.Now is used for the due test only: CDC backfill passes a far
	// future Now to ignore retry schedules.
	Fetch(ctx context.Context, p FetchParams) ([]Record, error)
	// Settle, in one transaction, first checks that every lease in p.Leases is still held (same
	// owner and generation, Until > now); if any is not, it changes nothing and returns a
	// *LanesLostError naming those lanes. Otherwise it marks p.Published (PublishedAt = now, or
	// deletes them when p.Delete) and records p.Failed (Attempts+1, LastError, NextAttemptAt =
	// now+Delay, ParkedAt = now when Park). Only unpublished records of the leased lanes change.
	Settle(ctx context.Context, p SettleParams) error
}

// InboxRecord is one processed message of one consumer. Its key is (Consumer, Source,
// Tenant, EventID): Source is the origin the consumer declared (core.InboxOptions.Source),
// Tenant the message's tenant; both are text (CheckText) of at most MaxNameLen bytes, "" when
// unset, and records written before they existed have "" in both.
type InboxRecord struct {
	Consumer       string
	Source         string
	Tenant         string
	EventID        string
	Digest         [32]byte // SHA-256 of the payload
	SourcePosition string   // where the message came from (queue, offset, ...), informational
	Outcome        Outcome  // Applied or Stale
	OccurredAt     time.Time
	ProcessedAt    time.Time // set by the adapter (database clock)
}

// InboxStore is what Inbox needs from an adapter. All methods but PruneInbox run inside a
// transaction begun with InTx.
type InboxStore[TTx any] interface {
	Transactor[TTx]
	// Horizon returns the consumer's retention horizon (zero when never pruned). Inbox.Process
	// calls it after InsertRecord, and it must see every horizon that PruneInbox committed
	// before InsertRecord returned: a read of the latest committed value (read committed, or
	// the first consistent read of the transaction), not a snapshot taken earlier in tx. It
	// needs no lock. Together with PruneInbox's order this is the retention rule: a message
	// older than the horizon is never applied after its record could have been pruned,
	// because InsertRecord can only insert a pruned record's key again once the deletion
	// committed, and the deletion comes after the raise.
	Horizon(ctx context.Context, tx TTx, consumer string) (time.Time, error)
	// InsertRecord inserts rec unless its key (Consumer, Source, Tenant, EventID) exists. When
	// it exists it returns the existing record and inserted=false; when a concurrent
	// transaction holds the same key it waits for that transaction to end first. Records of
	// one EventID under another Source or Tenant are other records.
	InsertRecord(ctx context.Context, tx TTx, rec InboxRecord) (existing InboxRecord, inserted bool, err error)
	// LockVersion returns the last applied version of (consumer, entity), ok=false when none, and
	// holds it against concurrent changes until tx ends. entity is opaque text of at most
	// MaxEntityKeyLen bytes: the Inbox prefixes an entity with its source and tenant, joined
	// by U+001F, when either is set, so it may hold that control character.
	LockVersion(ctx context.Context, tx TTx, consumer, entity string) (version int64, ok bool, err error)
	// SetVersion stores the last applied version of (consumer, entity).
	SetVersion(ctx context.Context, tx TTx, consumer, entity string, version int64) error
	// PruneInbox raises the consumer's horizon to before (never lowers it) and deletes up to
	// limit (PruneLimit: DefaultPruneLimit when <= 0) of its records with OccurredAt < the
	// horizon. The raise must be committed before any of those records is deleted: in its own
	// transaction ahead of the deleting one, or in one transaction that no inbox transaction
	// runs beside (a single-writer database). Nothing else needs to wait for the inbox
	// transactions that read the horizon, so a stream of them cannot starve a prune. It
	// returns how many it deleted.
	PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error)
	// CheckInbox returns nil when the inbox's tables exist, and a *NotMigratedError naming
	// what is missing when they do not. NewInbox calls it once, so that an unmigrated
	// database is refused at construction instead of at the first message.
	CheckInbox(ctx context.Context) error
}

// InboxBatchStore is an optional capability of an InboxStore: the steps of Inbox.ProcessBatch
// for a whole batch in a few statements instead of a few per message. Every method runs in a
// transaction begun with InTx, and each keeps the rule of the InboxStore method it batches.
type InboxBatchStore[TTx any] interface {
	// LockVersions is LockVersion for each of entities (distinct and sorted; lock them in that
	// order): the last applied version of each entity that has one (absent: none), every one of
	// them held against concurrent changes until tx ends.
	LockVersions(ctx context.Context, tx TTx, consumer string, entities []string) (map[string]int64, error)
	// InsertRecords is InsertRecord for each of recs (one consumer and source, distinct keys):
	// existing[i] and inserted[i] are what InsertRecord would return for recs[i].
	InsertRecords(ctx context.Context, tx TTx, recs []InboxRecord) (existing []InboxRecord, inserted []bool, err error)
	// SetVersions is SetVersion for each entity of versions.
	SetVersions(ctx context.Context, tx TTx, consumer string, versions map[string]int64) error
}

// Page and batch sizes that callers left at 0 (or below). Adapters read the limits through
// ListParams.PageSize, PruneParams.BatchSize and PruneLimit, so every adapter applies the same
// defaults.
const (
	DefaultListLimit  = 100  // ListParams.Limit
	DefaultPruneLimit = 1000 // PruneParams.Limit and InboxStore.PruneInbox's limit
)

// PruneParams bounds one outbox cleanup batch.
type PruneParams struct {
	// PublishedBefore: only rows published before this time are deleted.
	PublishedBefore time.Time
	// BelowSeq, when > 0, is an extra exclusive watermark (e.g. a CDC checkpoint): only rows with
	// Seq < BelowSeq are deleted.
	BelowSeq int64
	// Limit is the most rows deleted; <= 0 means DefaultPruneLimit (see BatchSize).
	Limit int
}

// BatchSize returns p.Limit, or DefaultPruneLimit when p.Limit <= 0.
func (p PruneParams) BatchSize() int { return PruneLimit(p.Limit) }

// PruneLimit returns limit, or DefaultPruneLimit when limit <= 0: the batch size of
// InboxStore.PruneInbox.
func PruneLimit(limit int) int {
	if limit <= 0 {
		return DefaultPruneLimit
	}
	return limit
}

// Pruner deletes published outbox rows.
type Pruner interface {
	// PruneOutbox deletes up to p.BatchSize() published rows that were published before
	// p.PublishedBefore and whose Seq is below both p.BelowSeq (when > 0) and the lowest Seq of
	// any unpublished row (the relay's evidence watermark). Unpublished and parked rows are never
	// deleted. It returns how many rows it deleted.
	PruneOutbox(ctx context.Context, p PruneParams) (int, error)
}

// PartitionPruner is an optional Pruner capability of outboxes partitioned by time: whole
// partitions are dropped instead of deleting their rows one by one.
type PartitionPruner interface {
	// DropPartitions drops every partition that holds only rows PruneOutbox would delete under p
	// (all published before p.PublishedBefore, every Seq below both p.BelowSeq when > 0 and the
	// lowest unpublished Seq) and that can receive no new rows. It returns how many rows the
	// dropped partitions held. p.Limit does not apply.
	DropPartitions(ctx context.Context, p PruneParams) (int, error)
}

// PartitionedInbox is an optional InboxStore capability of inboxes partitioned by time, whose
// records go a whole partition at a time instead of one by one.
type PartitionedInbox interface {
	// InboxPartitioned reports whether PruneInbox (and OperatorTx.PruneInbox) removes records
	// only a whole partition at a time. Each still raises the horizon first, as
	// InboxStore.PruneInbox says, so the retention rule is unchanged; it then removes only
	// partitions all of whose records occurred before their consumers' horizons, whatever its
	// limit, and returns how many records of the consumer they held. Records older than the
	// horizon may stay until their partition goes (Inbox.Process refuses their messages all the
	// same), so it may return fewer than there were, and 0 until a partition can go.
	InboxPartitioned() bool
}

// ListParams selects records for operators.
type ListParams struct {
	AfterSeq int64
	// Limit is the most records returned; <= 0 means DefaultListLimit (see PageSize).
	Limit int
	State RecordState
}

// PageSize returns p.Limit, or DefaultListLimit when p.Limit <= 0.
func (p ListParams) PageSize() int {
	if p.Limit <= 0 {
		return DefaultListLimit
	}
	return p.Limit
}

// RecordState filters records in ListParams.
type RecordState int

// Record states.
const (
	StateAll     RecordState = iota
	StatePending             // unpublished and not parked
	StateParked
	StatePublished
)

// Stats counts outbox rows. The SQL adapters answer from indexes of the unpublished rows and
// never scan the published ones, so that operators and metrics may ask often on a large table.
type Stats struct {
	// Pending counts the unpublished records that are not parked: exactly, except beyond
	// 10,000 unpublished rows on PostgreSQL, where it is the planner's estimate (the null
	// fraction of published_at at the last ANALYZE times the table's estimated rows), and on
	// MySQL/MariaDB, where it is the optimizer's estimate of the unpublished index range.
	Pending int64
	Parked  int64 // unpublished and parked (exact)
	// Published counts the published rows still present (mark mode "set"). The SQL adapters
	// count it exactly in a small table and estimate it in a large one: PostgreSQL beyond
	// 16 MiB and MySQL/MariaDB beyond 100,000 rows from the table statistics (the planner's
	// estimate, InnoDB's TABLE_ROWS; as fresh as the last ANALYZE or autovacuum) less the
	// unpublished rows, SQLite beyond 100,000 published rows from the seq range.
	Published int64
	// OldestPendingAt is the CreatedAt of the oldest pending record (zero when none). The SQL
	// adapters take the first pending record in Seq order (an index lookup), which is the
	// oldest unless an earlier transaction committed a later CreatedAt.
	OldestPendingAt time.Time
}

// Admin is the operator capability: look at records, count them, find and release parked keys,
// and read the publisher generation.
type Admin interface {
	// List returns up to p.PageSize() records with Seq > p.AfterSeq in p.State, in Seq order.
	List(ctx context.Context, p ListParams) ([]Record, error)
	Stats(ctx context.Context) (Stats, error)
	// Unpark clears ParkedAt, NextAttemptAt and Attempts of the unpublished records of one
	// partition key, so the relay delivers them again in order. It returns how many changed.
	Unpark(ctx context.Context, partitionKey string) (int, error)
	// ParkedKeys returns the partition keys that have an unpublished parked record, each once,
	// in no particular order. A CDC relay holds their records back.
	ParkedKeys(ctx context.Context) ([]string, error)
	// Generation returns the outbox's current publisher generation.
	Generation(ctx context.Context) (Publisher, error)
}

// Notifier is an optional capability: Notify tells relays (in this process or elsewhere) that
// events were committed. Lost notifications cost latency only; relays still poll.
type Notifier interface {
	Notify(ctx context.Context) error
}

// Flusher is an optional Notifier capability: Flush waits until every notification that
// Notify accepted before the call has been sent (or has failed and been logged), or until ctx
// ends. A Notifier that sends in the background has it, so that a producer can flush its last
// notifications before it closes its database pool.
type Flusher interface {
	Flush(ctx context.Context) error
}

// IngressCounter is an optional RelayStore capability: core.Relay's adaptive drain reads it
// once a second to learn whether producers are writing to the outbox, and how fast (see
// core.RelayOptions.FixedRate). Without it the relay cannot tell a catch-up beside producers
// from a drain alone, and never limits its rate by itself.
type IngressCounter interface {
	// Ingress returns a count that grows by at least one for each record committed to the
	// outbox since the previous call, and by little more: the highest Seq committed (gaps of
	// rolled-back inserts are fine). It is read outside any transaction and must be cheap (an
	// index's last entry, a counter). It may fall, or be 0, when the outbox was emptied (rows
	// deleted on publish): the relay takes no rate from a reading below or just after such a one.
	Ingress(ctx context.Context) (uint64, error)
}

// Waker is an optional RelayStore capability: Wakeups returns a channel that receives when new
// events may have been committed. It stops receiving when ctx ends.
type Waker interface {
	Wakeups(ctx context.Context) (<-chan struct{}, error)
}
