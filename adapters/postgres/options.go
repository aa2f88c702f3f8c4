package postgres

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"regexp"
	"time"

	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlident"
)

// ClaimStrategy says how ClaimLanes keeps two relays from taking the same lane.
type ClaimStrategy int

const (
	// ClaimSkipLocked locks the free lane rows with SELECT ... FOR UPDATE SKIP LOCKED (default).
	ClaimSkipLocked ClaimStrategy = iota
	// ClaimAdvisoryLock takes a transaction-scoped advisory lock (pg_try_advisory_xact_lock)
	// per lane before updating its row. Leases are still fenced by their generation. It never
	// uses session-scoped locks, so it works behind transaction-pooling proxies.
	ClaimAdvisoryLock
)

func (s ClaimStrategy) String() string {
	switch s {
	case ClaimSkipLocked:
		return "skip_locked"
	case ClaimAdvisoryLock:
		return "advisory_lock"
	}
	return fmt.Sprintf("ClaimStrategy(%d)", int(s))
}

// Options configures a Store. The zero value (or nil) takes every default.
type Options struct {
	// Schema holds every table. It must exist. Default "public".
	Schema string
	// Table is the outbox table. The lanes, workers, meta, publisher and checkpoint tables, the
	// indexes, the trigger and the fetch function are named after it (Table+"_lanes",
	// Table+"_workers", Table+"_meta", Table+"_publisher", Table+"_cdc_checkpoint",
	// Table+"_audit" (the operator audit log, core.Operator), Table+"_fetch", ...), so it may be at most 48 bytes. Default "outbox".
	Table string
	// InboxTable is the inbox table; InboxTable+"_horizons" and InboxTable+"_versions" go with
	// it (at most 50 bytes, for the suffixes). Default "inbox".
	// No name derived from Table may equal one derived from InboxTable, compared
	// case-insensitively (e.g. Table "y_horizons" with InboxTable "y"): New refuses that with a
	// *core.OptionError.
	InboxTable string
	// Lanes is the lane count Migrate records. Migrating an existing outbox with another count
	// fails with an error wrapping core.ErrSchemaMismatch; left at 0, Migrate accepts the
	// recorded count (which Store.ResizeLanes may have changed). Writers and relays read the
	// recorded count, not this option. Default core.DefaultLanes.
	Lanes int
	// ClaimStrategy decides how lanes are claimed. Default ClaimSkipLocked.
	ClaimStrategy ClaimStrategy
	// UniqueAggregateVersion makes Migrate add a unique index on (aggregate_type, aggregate_id,
	// aggregate_version, type) for aggregate_version > 0: a second event for the same entity
	// version fails with core.ErrDuplicateEvent. Migrate never drops the index. Default false.
	UniqueAggregateVersion bool
	// AsyncSettle makes Settle commit without waiting for its WAL flush (synchronous_commit off
	// for that one transaction; producers' transactions are not affected). The relay then does
	// not wait for the disk between batches. If the server crashes, the marks of the last
	// moments (up to three times wal_writer_delay) may be lost: those events are delivered again
	// and failed attempts may be counted once less — at-least-once delivery and per-key order
	// still hold, and lease fencing is unchanged (it happens before the commit). Default false.
	AsyncSettle bool
	// Partitioning, when set, makes Migrate create the outbox partitioned by created_at (see
	// Partitioning). It is decided when the outbox is first migrated: migrating an existing
	// outbox with another choice (or another Interval) fails with core.ErrSchemaMismatch. It
	// cannot be combined with UniqueAggregateVersion. Default nil: one plain table.
	Partitioning *Partitioning
	// InboxPartitioning, when set, makes Migrate and MigrateInbox create the inbox partitioned
	// by the time its records were written (processed_at, the database clock), so that Inbox.Prune
	// drops whole partitions instead of deleting records (see "Partitioned inbox" in the package
	// documentation). It is decided when the inbox is first migrated: migrating, or
	// core.NewInbox on, an existing inbox with another choice (or another Interval) fails with
	// core.ErrSchemaMismatch. Default nil: one plain table.
	InboxPartitioning *Partitioning
	// NotifyChannel is the LISTEN/NOTIFY channel of Notify and Wakeups. Default
	// Schema+"."+Table (cut to 63 bytes).
	NotifyChannel string
	// PoolerKeepsSessions says that the pool's connections go through a pooler that keeps one
	// server session per client connection for the connection's life (PgBouncer
	// pool_mode=session), so that Wakeups (LISTEN) and HoldLiveness (a session-level advisory
	// lock) may run through it. Default false: they refuse a connection through a pooler with
	// an error wrapping ErrPooledConnection (never set it for a pooler in transaction mode).
	PoolerKeepsSessions bool
	// Logger receives the store's logs (wake-up connection failures). Default slog.Default().
	Logger *slog.Logger
}

// Partitioning configures a table partitioned by time ranges: the outbox by created_at
// (Options.Partitioning) or the inbox by processed_at (Options.InboxPartitioning). Partitions
// are named Table+"_p"+YYYYMMDDHH (InboxTable+"_p"+YYYYMMDDHH; their lower bound, UTC); ranges
// are aligned to multiples of Interval since the Unix epoch. Migrate (MigrateInbox) and
// EnsurePartitions create the current partition and Ahead more; CleanupOutbox (through
// DropPartitions) and Inbox.Prune drop whole partitions instead of deleting rows, and create
// partitions ahead on the way.
//
// Trade-offs of the outbox: event IDs stay unique through a side table (Table+"_ids": one
// narrow row and index entry per event, removed with its partition, so an ID is refused again
// for as long as the partition of its first event exists); rows published before migration
// 0008 get an index on published_at, so that a drop checks a partition with index lookups
// (later ones, the pending table and the settle log's indexes); statements that find rows by
// seq (Settle) probe every partition. Of the inbox: see "Partitioned inbox" in the package
// documentation. Of both: an insert fails when no partition covers its time, so
// EnsurePartitions (or CleanupOutbox for the outbox, Inbox.Prune for the inbox) must run at
// least once every Ahead intervals.
type Partitioning struct {
	// Interval is the time range of one partition: a whole number of hours, at most 31 days.
	// Default 24h (daily partitions starting at midnight UTC).
	Interval time.Duration
	// Ahead is how many partitions after the current one are kept created. Default 7.
	Ahead int
}

var (
	identRE   = bridge.IdentRE
	channelRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,62}$`)
)

// names holds every identifier, validated and quoted once.
type names struct {
	schema, outbox, lanes, workers, meta      string // quoted and schema-qualified
	publisher, checkpoint, audit              string
	inbox, horizons, versions                 string
	fn, fetchFn, auditGuardFn, laneCountFn    string // functions, qualified
	trigger, pendingIdx, failedIdx, aggverIdx string // bare quoted names
	auditGuard                                string // bare quoted trigger name
	ids, idsIdx, pubIdx                       string // partitioned outbox: ids qualified, indexes bare
	seqName                                   string // the serial sequence, qualified
	inboxIdx, inboxPkey                       string
	inboxKey                                  int32 // advisory lock class of a partitioned inbox's keys
	// The pending layout (migration 0008).
	pending, settled, pendingFetchFn, pendingSyncFn string // qualified
	pendingFailIdx, settledAtIdx, settledMinIdx     string // bare
	pendingWalkFn                                   string // qualified (migration 0011)
	pendingSync                                     string // bare trigger name
	channel                                         string // quoted identifier
	rawSchema, rawTable, rawInbox, rawChannel       string
	lockKey                                         int32 // advisory lock class of this outbox
	liveKey                                         int32 // advisory lock class of its liveness (>= 0)
	migrateKey                                      int64 // advisory lock of Migrate
}

func quote(s string) string { return `"` + s + `"` }

// tableSuffixes and inboxSuffixes make the names derived from Options.Table and
// Options.InboxTable (tables, indexes, sequences, functions; "_p2006010215" stands for the
// longest partition name).
var (
	tableSuffixes = []string{"", "_lanes", "_workers", "_meta", "_immutable", "_fetch", "_pending_idx", "_failed_idx", "_aggver_key", "_seq_seq",
		"_pub_idx", "_ids", "_ids_idx", "_p2006010215", "_publisher", "_cdc_checkpoint", "_audit", "_audit_id_seq", "_audit_guard", "_lane_count",
		"_pending", "_settled", "_pending_fail", "_settled_at", "_settled_min", "_fetch_pending", "_pending_sync",
		"_walk_pending"}
	inboxSuffixes = []string{"", "_horizons", "_versions", "_occurred_idx", "_p2006010215"}
)

func (o *Options) resolve() (Options, names, error) {
	var r Options
	if o != nil {
		r = *o
	}
	if r.Schema == "" {
		r.Schema = "public"
	}
	if r.Table == "" {
		r.Table = "outbox"
	}
	if r.InboxTable == "" {
		r.InboxTable = "inbox"
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	bad := func(field, reason string) (Options, names, error) {
		return Options{}, names{}, &core.OptionError{Field: field, Reason: reason}
	}
	var err error
	if r.Lanes, err = driver.LanesOption(r.Lanes); err != nil {
		return Options{}, names{}, err
	}
	if r.Partitioning, err = resolvePartitioning("Partitioning", r.Partitioning); err != nil {
		return Options{}, names{}, err
	}
	if r.Partitioning != nil && r.UniqueAggregateVersion {
		return bad("Partitioning", "cannot be combined with UniqueAggregateVersion (a unique index of a partitioned table must contain created_at)")
	}
	if r.InboxPartitioning, err = resolvePartitioning("InboxPartitioning", r.InboxPartitioning); err != nil {
		return Options{}, names{}, err
	}
	if r.ClaimStrategy != ClaimSkipLocked && r.ClaimStrategy != ClaimAdvisoryLock {
		return bad("ClaimStrategy", "unknown claim strategy")
	}
	if !identRE.MatchString(r.Schema) {
		return bad("Schema", "must match "+identRE.String())
	}
	for _, suffix := range tableSuffixes {
		if !identRE.MatchString(r.Table + suffix) {
			return bad("Table", fmt.Sprintf("must match %s with room for the suffix %q", identRE, suffix))
		}
	}
	for _, suffix := range inboxSuffixes {
		if !identRE.MatchString(r.InboxTable + suffix) {
			return bad("InboxTable", fmt.Sprintf("must match %s with room for the suffix %q", identRE, suffix))
		}
	}
	if r.NotifyChannel == "" {
		r.NotifyChannel = r.Schema + "." + r.Table
		if len(r.NotifyChannel) > 63 {
			r.NotifyChannel = r.NotifyChannel[:63]
		}
	}
	if !channelRE.MatchString(r.NotifyChannel) {
		return bad("NotifyChannel", "must match "+channelRE.String())
	}
	var ids []sqlident.Ident
	for _, suffix := range tableSuffixes {
		ids = append(ids, sqlident.Ident{Field: "Table", Name: r.Table + suffix})
	}
	for _, suffix := range inboxSuffixes {
		ids = append(ids, sqlident.Ident{Field: "InboxTable", Name: r.InboxTable + suffix})
	}
	if err := sqlident.CheckCollisions(ids...); err != nil {
		return Options{}, names{}, err
	}
	s := quote(r.Schema) + "."
	n := names{
		schema:         quote(r.Schema),
		outbox:         s + quote(r.Table),
		lanes:          s + quote(r.Table+"_lanes"),
		workers:        s + quote(r.Table+"_workers"),
		meta:           s + quote(r.Table+"_meta"),
		publisher:      s + quote(r.Table+"_publisher"),
		checkpoint:     s + quote(r.Table+"_cdc_checkpoint"),
		audit:          s + quote(r.Table+"_audit"),
		fn:             s + quote(r.Table+"_immutable"),
		fetchFn:        s + quote(r.Table+"_fetch"),
		auditGuardFn:   s + quote(r.Table+"_audit_guard"),
		laneCountFn:    s + quote(r.Table+"_lane_count"),
		auditGuard:     quote(r.Table + "_audit_guard"),
		trigger:        quote(r.Table + "_immutable"),
		pendingIdx:     quote(r.Table + "_pending_idx"),
		failedIdx:      quote(r.Table + "_failed_idx"),
		aggverIdx:      quote(r.Table + "_aggver_key"),
		seqName:        s + quote(r.Table+"_seq_seq"),
		ids:            s + quote(r.Table+"_ids"),
		idsIdx:         quote(r.Table + "_ids_idx"),
		pubIdx:         quote(r.Table + "_pub_idx"),
		pending:        s + quote(r.Table+"_pending"),
		settled:        s + quote(r.Table+"_settled"),
		pendingFetchFn: s + quote(r.Table+"_fetch_pending"),
		pendingWalkFn:  s + quote(r.Table+"_walk_pending"),
		pendingSyncFn:  s + quote(r.Table+"_pending_sync"),
		pendingFailIdx: quote(r.Table + "_pending_fail"),
		settledAtIdx:   quote(r.Table + "_settled_at"),
		settledMinIdx:  quote(r.Table + "_settled_min"),
		pendingSync:    quote(r.Table + "_pending_sync"),
		inbox:          s + quote(r.InboxTable),
		horizons:       s + quote(r.InboxTable+"_horizons"),
		versions:       s + quote(r.InboxTable+"_versions"),
		inboxIdx:       quote(r.InboxTable + "_occurred_idx"),
		inboxPkey:      quote(r.InboxTable + "_pkey"),
		channel:        quote(r.NotifyChannel),
		rawSchema:      r.Schema, rawTable: r.Table, rawInbox: r.InboxTable, rawChannel: r.NotifyChannel,
	}
	h := fnv.New64a()
	h.Write([]byte(r.Schema + "." + r.Table))
	sum := h.Sum64()
	n.lockKey = int32(uint32(sum))
	n.liveKey = int32(uint32(sum>>32) & 0x7fffffff)
	n.migrateKey = int64(sum >> 1)
	h.Reset()
	h.Write([]byte("inbox:" + r.Schema + "." + r.InboxTable))
	n.inboxKey = int32(uint32(h.Sum64()))
	return r, n, nil
}

// resolvePartitioning returns a copy of p with its defaults, or a *core.OptionError naming field.
func resolvePartitioning(field string, p *Partitioning) (*Partitioning, error) {
	if p == nil {
		return nil, nil
	}
	r := *p
	if r.Interval == 0 {
		r.Interval = 24 * time.Hour
	}
	if r.Ahead == 0 {
		r.Ahead = 7
	}
	if r.Interval < time.Hour || r.Interval > 31*24*time.Hour || r.Interval%time.Hour != 0 {
		return nil, &core.OptionError{Field: field + ".Interval", Reason: "must be a whole number of hours between 1h and 744h"}
	}
	if r.Ahead < 1 || r.Ahead > 1000 {
		return nil, &core.OptionError{Field: field + ".Ahead", Reason: "must be between 1 and 1000"}
	}
	return &r, nil
}
