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
	"sync"
	"sync/atomic"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlident"
)

// Store is the MySQL / MariaDB adapter: driver.OutboxStore[*sql.Tx] (with driver.LaneInserter),
// driver.RelayStore, driver.InboxStore[*sql.Tx], driver.Pruner, driver.Admin, driver.CheckpointStore,
// driver.Liveness and driver.LaneResizer, plus in-process wake-ups (driver.Notifier and driver.Waker).
// It is safe for concurrent use.
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

	lanesSet  bool // Options.Lanes was not 0 (Migrate then refuses another recorded count)
	deadlocks atomic.Uint64

	lockMu    sync.Mutex
	lockConns map[string]*lockConn
	live      map[string]bool // owners holding a sign of life (HoldLiveness)
	closed    bool
}

type tableNames struct {
	outbox, lanes, workers, meta, inbox, horizons, versions string // unquoted
	publisher, checkpoint, audit                            string // unquoted
	pending, settled                                        string // unquoted (migration 010)
	// database qualifies the tables in the SQL (New sets it to the connection's database, so
	// that a caller's transaction whose default database is another one still writes the
	// Store's tables); empty in MigrationSQL, whose script runs in the database it is given.
	database string
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
	o, names, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, o: o, log: o.Logger, lockConns: map[string]*lockConn{}, live: map[string]bool{}}
	s.lanesSet = opts != nil && opts.Lanes != 0

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
	names.database = s.database
	if err := checkTimeSettings(ctx, db); err != nil {
		return nil, err
	}

	s.names = names
	if s.q, err = newQueries(s.names); err != nil {
		return nil, err
	}
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

// resolve applies opts' defaults and checks them and the table names (no I/O).
func resolve(opts *Options) (Options, tableNames, error) {
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
	if !tableRE.MatchString(o.Table) {
		return Options{}, tableNames{}, &core.OptionError{Field: "Table", Reason: "must match " + tableRE.String() + ` (Table+"_workers" must fit 64 characters)`}
	}
	if !inboxTableRE.MatchString(o.InboxTable) {
		return Options{}, tableNames{}, &core.OptionError{Field: "InboxTable", Reason: "must match " + inboxTableRE.String() + ` (InboxTable+"_horizons" must fit 64 characters)`}
	}
	names := tableNames{
		outbox: o.Table, lanes: o.Table + "_lanes", workers: o.Table + "_workers", meta: o.Table + "_meta",
		inbox: o.InboxTable, horizons: o.InboxTable + "_horizons", versions: o.InboxTable + "_versions",
		publisher: o.Table + "_pub", checkpoint: o.Table + "_cdc", audit: o.Table + "_audit",
		pending: o.Table + "_pending", settled: o.Table + "_settled",
	}
	idents := []sqlident.Ident{
		{Field: "Table", Name: names.outbox}, {Field: "Table", Name: names.lanes},
		{Field: "Table", Name: names.workers}, {Field: "Table", Name: names.meta},
		{Field: "Table", Name: names.publisher}, {Field: "Table", Name: names.checkpoint},
		{Field: "Table", Name: names.audit}, {Field: "Table", Name: names.pending},
		{Field: "Table", Name: names.settled},
		{Field: "InboxTable", Name: names.inbox}, {Field: "InboxTable", Name: names.horizons},
		{Field: "InboxTable", Name: names.versions},
	}
	// The patterns above bound every derived name; this keeps a new suffix from making one too
	// long for the server (error 1103 in the middle of Migrate, after earlier files ran).
	for _, id := range idents {
		if len(id.Name) > maxIdentLen {
			return Options{}, tableNames{}, &core.OptionError{Field: id.Field, Reason: fmt.Sprintf("derived table name %s is longer than %d characters", id.Name, maxIdentLen)}
		}
	}
	if err := sqlident.CheckCollisions(idents...); err != nil {
		return Options{}, tableNames{}, err
	}
	var err error
	if o.Lanes, err = driver.LanesOption(o.Lanes); err != nil {
		return Options{}, tableNames{}, err
	}
	if o.ClaimStrategy != ClaimSkipLocked && o.ClaimStrategy != ClaimGetLock {
		return Options{}, tableNames{}, &core.OptionError{Field: "ClaimStrategy", Reason: "unknown claim strategy"}
	}
	if o.DeadlockRetries > MaxDeadlockRetries {
		return Options{}, tableNames{}, &core.OptionError{Field: "DeadlockRetries", Reason: fmt.Sprintf("must be at most %d", MaxDeadlockRetries)}
	}
	if o.DeadlockRetries == 0 {
		o.DeadlockRetries = 8
	} else if o.DeadlockRetries < 0 {
		o.DeadlockRetries = 0
	}
	if o.DSN != "" {
		if _, err := mysqldrv.ParseDSN(o.DSN); err != nil {
			return Options{}, tableNames{}, &core.OptionError{Field: "DSN", Reason: err.Error()}
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, names, nil
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
