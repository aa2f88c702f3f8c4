package mysql

import (
	"fmt"
	"log/slog"
	"regexp"
)

// ClaimStrategy selects how ClaimLanes decides who may take a lane.
type ClaimStrategy int

func (c ClaimStrategy) String() string {
	switch c {
	case ClaimSkipLocked:
		return "skip_locked"
	case ClaimGetLock:
		return "get_lock"
	}
	return fmt.Sprintf("ClaimStrategy(%d)", int(c))
}

// Options configures a Store. A nil *Options means every default.
type Options struct {
	// Table is the outbox table. The adapter also uses Table+"_lanes", Table+"_workers",
	// Table+"_meta", Table+"_pub" (the publisher generation), Table+"_cdc" (the CDC
	// checkpoint), Table+"_audit" (the operator audit log, core.Operator), Table+"_pending" and
	// Table+"_settled" (the pending layout, migration 010). Default "outbox".
	// It must match ^[A-Za-z_][A-Za-z0-9_]{0,55}$: at most 56 characters, so that the longest
	// derived names, Table+"_workers", "_pending" and "_settled", fit MySQL's 64-character
	// identifiers.
	Table string
	// InboxTable is the inbox table; the adapter also uses InboxTable+"_horizons" and
	// InboxTable+"_versions". Default "inbox". It must match ^[A-Za-z_][A-Za-z0-9_]{0,54}$: at
	// most 55 characters, one fewer than Table, so that InboxTable+"_horizons" fits 64
	// characters. No name derived from Table may equal one derived from InboxTable, compared
	// case-insensitively (e.g. Table "y_horizons" with InboxTable "y"). New and MigrationSQL
	// refuse a name beyond these bounds, or such a collision, with a *core.OptionError naming
	// the field, before anything touches the database.
	InboxTable string
	// Lanes is the lane count Migrate records the first time it runs (1..core.MaxLanes;
	// Store.ResizeLanes changes it later). Migrating an existing outbox with another non-zero
	// count fails with core.ErrSchemaMismatch; with 0 Migrate keeps the recorded count. Writers
	// and relays read the recorded count, not this option. Default core.DefaultLanes.
	Lanes int
	// ClaimStrategy is how lanes are claimed. Default ClaimSkipLocked.
	ClaimStrategy ClaimStrategy
	// UniqueAggregateVersion makes Migrate add a unique index on (aggregate_type, aggregate_id,
	// aggregate_version, type) for rows with aggregate_version > 0, so that a second event for
	// the same aggregate version returns core.ErrDuplicateEvent. Default false. Migrate never
	// drops the index once created.
	UniqueAggregateVersion bool
	// DeadlockRetries is how many times a claim, settle, renew or inbox transaction chosen as a
	// deadlock victim (error 1213) is run again before ErrDeadlock is returned. Default 8;
	// negative means none; at most MaxDeadlockRetries.
	DeadlockRetries int
	// FullMarkImage keeps the server's binlog_row_image for the relay's marks. By default, on
	// MariaDB, when the user may set it (BINLOG ADMIN or SUPER), marks, deletes of published
	// rows and cleanup are logged with binlog_row_image=MINIMAL (SET STATEMENT ... FOR): the binary log of a
	// mark shrinks from the whole row, payload included, twice (before and after) to its key
	// and changed columns — about 14 KB instead of 2 MB per 1,000 rows of ~1 KiB. Inserts keep
	// the full image that CDC relays read. Default false.
	FullMarkImage bool
	// DSN is the go-sql-driver/mysql DSN db was opened with. Only the change source
	// (binlog.NewChangeSource) uses it: its binlog connection needs the address and
	// credentials, which a *sql.DB does not reveal. Default "": the change source then needs
	// binlog.Options.DSN.
	DSN string
	// Logger receives the adapter's logs. Default slog.Default().
	Logger *slog.Logger
}

// MaxDeadlockRetries bounds Options.DeadlockRetries.
const MaxDeadlockRetries = 1000

// maxIdentLen is MySQL's (and MariaDB's) bound on a table name.
const maxIdentLen = 64

// tableRE and inboxTableRE are the rules of Options.Table and Options.InboxTable: the longest
// derived names, Table+"_workers" and InboxTable+"_horizons", are then maxIdentLen characters.
var (
	tableRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,55}$`)
	inboxTableRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,54}$`)
)

const (
	// ClaimSkipLocked (default) claims free or expired lanes with SELECT ... FOR UPDATE SKIP
	// LOCKED on the lanes table: concurrent claimers skip each other's rows. It also takes the
	// lanes of an owner that held them with a GET_LOCK (HoldLiveness) whose session has ended.
	ClaimSkipLocked ClaimStrategy = iota
	// ClaimGetLock additionally ties each lease to a GET_LOCK named after the database, table
	// and lane, held by a dedicated connection of the claiming owner. When that connection dies
	// the server releases the lock and another worker may take the lane at once instead of
	// waiting for the lease to expire; the lease generation still fences the old holder.
	// Claims are serialised per lane by the same row locks as ClaimSkipLocked. Each owner that
	// holds lanes keeps one extra connection of the *sql.DB open (closed when it holds none,
	// deregisters with Heartbeat TTL <= 0, or the Store is closed): leave room for them in
	// SetMaxOpenConns, or claims wait for a connection.
	ClaimGetLock
)
