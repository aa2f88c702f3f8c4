package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
)

// ClaimStrategy selects how ClaimLanes decides who may take a lane.
type ClaimStrategy int

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
	// Table+"_meta", Table+"_pub" (the publisher generation) and Table+"_cdc" (the CDC
	// checkpoint). Default "outbox". It must match ^[A-Za-z_][A-Za-z0-9_]{0,55}$ (MySQL
	// identifiers are at most 64 characters, suffixes included).
	Table string
	// InboxTable is the inbox table; the adapter also uses InboxTable+"_horizons" and
	// InboxTable+"_versions". Default "inbox". Same rule as Table.
	InboxTable string
	// Lanes is the lane count Migrate records (1..core.MaxLanes). Default core.DefaultLanes.
	// Migrating an existing outbox with another count fails with core.ErrSchemaMismatch.
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
	// negative means none.
	DeadlockRetries int
	// FullMarkImage keeps the server's binlog_row_image for the relay's marks. By default, on
	// MariaDB, when the user may set it (BINLOG ADMIN or SUPER), marks, deletes of published
	// rows and cleanup are logged with binlog_row_image=MINIMAL (SET STATEMENT ... FOR): the binary log of a
	// mark shrinks from the whole row, payload included, twice (before and after) to its key
	// and changed columns — about 14 KB instead of 2 MB per 1,000 rows of ~1 KiB. Inserts keep
	// the full image that CDC relays read. Default false.
	FullMarkImage bool
	// DSN is the go-sql-driver/mysql DSN db was opened with. Only the change source
	// (Store.ChangeSource) uses it: its binlog connection needs the address and credentials,
	// which a *sql.DB does not reveal. Default "": ChangeSource then needs
	// ChangeSourceOptions.DSN.
	DSN string
	// Logger receives the adapter's logs. Default slog.Default().
	Logger *slog.Logger
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,55}$`)

// Store is the MySQL / MariaDB adapter: core.OutboxStore[*sql.Tx], core.RelayStore,
// core.InboxStore[*sql.Tx], core.Pruner, core.Admin, core.CheckpointStore and core.Liveness, plus
// in-process wake-ups (core.Notifier and core.Waker). It is safe for concurrent use.
type Store struct {
	core.Broadcast

	db       *sql.DB
	o        Options
	log      *slog.Logger
	version  ServerVersion
	database string
	names    tableNames
	q        queries

	// lockPrefix starts every GET_LOCK name of this outbox: "obk:" + 16 hex digits of
	// SHA-256(database + "." + table) + ":"; the lane number follows.
	lockPrefix string

	// markPrefix starts every statement that marks rows ("" or a SET STATEMENT that logs them
	// with a minimal row image; see Options.FullMarkImage).
	markPrefix string

	lanes        atomic.Int64 // cached lane count, 0 until read
	deadlocks    atomic.Uint64
	horizonKnown sync.Map // consumer -> struct{}: its horizon row exists

	lockMu    sync.Mutex
	lockConns map[string]*lockConn
	live      map[string]bool // owners holding a sign of life (HoldLiveness)
	closed    bool
}

type tableNames struct {
	outbox, lanes, workers, meta, inbox, horizons, versions string // unquoted
	publisher, checkpoint                                   string // unquoted
}

// New checks the server and the connection settings and returns a Store on db. It does not
// create tables: call Migrate. opts may be nil.
//
// Unlike postgres.New, it queries the server: the version (the SQL differs between MySQL and
// MariaDB), the database the DSN selects (it names the GET_LOCKs and the change source's
// identity) and the time settings are facts the Store is built on, and a DSN that gets them
// wrong fails here, at startup, rather than at the first write. Everything else (the change
// source included) does no I/O until used.
//
// The DSN of db must select a database and set parseTime=true; loc must be UTC (the driver's
// default). The server must be MySQL 8.0+ or MariaDB 10.6+ (ErrUnsupportedServer otherwise)
// with InnoDB. Times are stored as DATETIME(6) in UTC; the session time zone does not matter.
func New(ctx context.Context, db *sql.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, &core.OptionError{Field: "db", Reason: "must not be nil"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = "outbox"
	}
	if o.InboxTable == "" {
		o.InboxTable = "inbox"
	}
	if !identRE.MatchString(o.Table) {
		return nil, &core.OptionError{Field: "Table", Reason: "must match ^[A-Za-z_][A-Za-z0-9_]{0,55}$"}
	}
	if !identRE.MatchString(o.InboxTable) {
		return nil, &core.OptionError{Field: "InboxTable", Reason: "must match ^[A-Za-z_][A-Za-z0-9_]{0,55}$"}
	}
	if o.Lanes == 0 {
		o.Lanes = core.DefaultLanes
	}
	if o.Lanes < 1 || o.Lanes > core.MaxLanes {
		return nil, &core.OptionError{Field: "Lanes", Reason: fmt.Sprintf("must be between 1 and %d", core.MaxLanes)}
	}
	if o.ClaimStrategy != ClaimSkipLocked && o.ClaimStrategy != ClaimGetLock {
		return nil, &core.OptionError{Field: "ClaimStrategy", Reason: "unknown claim strategy"}
	}
	if o.DeadlockRetries == 0 {
		o.DeadlockRetries = 8
	} else if o.DeadlockRetries < 0 {
		o.DeadlockRetries = 0
	}
	if o.DSN != "" {
		if _, err := driver.ParseDSN(o.DSN); err != nil {
			return nil, &core.OptionError{Field: "DSN", Reason: err.Error()}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Store{db: db, o: o, log: o.Logger, lockConns: map[string]*lockConn{}, live: map[string]bool{}}

	var raw string
	var dbName sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT VERSION(), DATABASE()`).Scan(&raw, &dbName); err != nil {
		return nil, wrap("server version", err)
	}
	v, err := ParseVersion(raw)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	if err := v.Check(); err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	s.version = v
	if !dbName.Valid || dbName.String == "" {
		return nil, fmt.Errorf("mysql: %w: the DSN must select a database", ErrConnection)
	}
	s.database = dbName.String
	if err := checkTimeSettings(ctx, db); err != nil {
		return nil, err
	}

	s.names = tableNames{
		outbox: o.Table, lanes: o.Table + "_lanes", workers: o.Table + "_workers", meta: o.Table + "_meta",
		inbox: o.InboxTable, horizons: o.InboxTable + "_horizons", versions: o.InboxTable + "_versions",
		publisher: o.Table + "_pub", checkpoint: o.Table + "_cdc",
	}
	s.q = newQueries(s.replacer())
	if v.MariaDB && !o.FullMarkImage {
		// The probe takes a parameter so that it goes the way the marks go (prepared, or
		// interpolated by the driver).
		const prefix = "SET STATEMENT binlog_row_image = 'MINIMAL' FOR "
		if _, err := db.ExecContext(ctx, prefix+"SELECT ?", 1); err == nil {
			s.markPrefix = prefix
		} else {
			s.log.Debug("mysql_minimal_mark_image_unavailable", "error", err)
		}
	}
	sum := sha256.Sum256([]byte(s.database + "." + o.Table))
	s.lockPrefix = "obk:" + hex.EncodeToString(sum[:8]) + ":"
	return s, nil
}

func (s *Store) replacer() *strings.Replacer {
	qt := func(n string) string { return "`" + n + "`" }
	return strings.NewReplacer(
		"{outbox}", qt(s.names.outbox), "{lanes}", qt(s.names.lanes), "{workers}", qt(s.names.workers),
		"{meta}", qt(s.names.meta), "{inbox}", qt(s.names.inbox), "{horizons}", qt(s.names.horizons),
		"{versions}", qt(s.names.versions), "{publisher}", qt(s.names.publisher),
		"{checkpoint}", qt(s.names.checkpoint),
	)
}

// checkTimeSettings verifies that DATETIME values come back as time.Time in UTC
// (parseTime=true, loc=UTC).
func checkTimeSettings(ctx context.Context, db *sql.DB) error {
	var v any
	if err := db.QueryRowContext(ctx, `SELECT CAST('2000-01-02 03:04:05.123456' AS DATETIME(6))`).Scan(&v); err != nil {
		return wrap("check time settings", err)
	}
	t, ok := v.(time.Time)
	if !ok {
		return fmt.Errorf("mysql: %w: DATETIME is scanned as %T; set parseTime=true in the DSN", ErrConnection, v)
	}
	want := time.Date(2000, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if t.Location() != time.UTC || !t.Equal(want) {
		return fmt.Errorf("mysql: %w: DATETIME is read in %s, not UTC; set loc=UTC (the default) in the DSN", ErrConnection, t.Location())
	}
	return nil
}

// Version returns the server version detected by New.
func (s *Store) Version() ServerVersion { return s.version }

// DB returns the *sql.DB the store uses.
func (s *Store) DB() *sql.DB { return s.db }

// DeadlockRetries returns how many times a transaction of this store was run again after the
// server chose it as a deadlock victim.
func (s *Store) DeadlockRetries() uint64 { return s.deadlocks.Load() }

// Close releases the GET_LOCK connections of ClaimGetLock (and with them the locks; the
// leases stay until they expire or are released). It does not close the *sql.DB.
func (s *Store) Close() error {
	s.lockMu.Lock()
	conns := s.lockConns
	s.lockConns = map[string]*lockConn{}
	s.closed = true
	s.lockMu.Unlock()
	var errs []error
	for _, lc := range conns {
		lc.mu.Lock()
		errs = append(errs, lc.close())
		lc.mu.Unlock()
	}
	return errors.Join(errs...)
}

// timeArg is a time parameter: NULL for the zero time, else microsecond UTC text (independent
// of the DSN's loc).
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02 15:04:05.000000")
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// inTx runs fn in a transaction, again (at most o.DeadlockRetries times) when the server chose
// it as a deadlock victim.
func (s *Store) inTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	for attempt := 0; ; attempt++ {
		err := s.tryTx(ctx, opts, fn)
		if err == nil || !isDeadlock(err) || attempt >= s.o.DeadlockRetries || ctx.Err() != nil {
			return err
		}
		s.deadlocks.Add(1)
		s.log.Debug("mysql_deadlock_retry", "attempt", attempt+1)
		// A short jittered pause lets the winner finish.
		d := time.Duration(rand.Int64N(int64(time.Millisecond)*int64(1+attempt))) + 100*time.Microsecond
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// exec runs one autocommit statement, again when it is chosen as a deadlock victim (same
// bound as inTx).
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	for attempt := 0; ; attempt++ {
		res, err := s.db.ExecContext(ctx, query, args...)
		if err == nil || !isDeadlock(err) || attempt >= s.o.DeadlockRetries || ctx.Err() != nil {
			return res, err
		}
		s.deadlocks.Add(1)
		s.log.Debug("mysql_deadlock_retry", "attempt", attempt+1)
	}
}

func (s *Store) tryTx(ctx context.Context, opts *sql.TxOptions, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// readCommitted is the isolation of every lanes-table transaction (claim, renew, release,
// settle). Under REPEATABLE READ an UPDATE of the small lanes table that the optimizer runs as
// a full index scan would lock every lane row (next-key locks) and serialise the settles of
// all workers; READ COMMITTED keeps only the locks of matching rows.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
