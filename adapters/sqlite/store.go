package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DriverName is the database/sql driver this adapter is written for (modernc.org/sqlite).
const DriverName = "sqlite"

// BusyTimeout is how long OpenDB's connections wait for another connection's write lock.
const BusyTimeout = 10 * time.Second

// Store is the SQLite adapter. Its transaction type is *sql.Tx. It implements
// driver.OutboxStore[*sql.Tx], driver.RelayStore, driver.InboxStore[*sql.Tx], driver.Pruner, driver.Admin,
// and, through the embedded core.Broadcast, driver.Notifier and driver.Waker: Notify (called by
// core.Outbox.Notify after a commit) wakes the relays of this process. It is safe for
// concurrent use.
type Store struct {
	core.Broadcast

	db       *sql.DB
	o        Options
	n        names
	q        queries
	log      *slog.Logger
	lanesSet bool                   // Options.Lanes was given (Migrate then insists on it)
	file     atomic.Pointer[string] // the database file's path; nil until read
	// wlock admits one of this Store's write transactions at a time. SQLite has one writer
	// anyway; queueing here, in FIFO-ish Go order, spares concurrent callers SQLite's
	// sleep-and-retry busy handler and the extra connections it would hold open.
	wlock chan struct{}
	stmts stmtCache
}

// Compile-time checks of the contracts Store implements.
var (
	_ driver.OutboxStore[*sql.Tx]  = (*Store)(nil)
	_ driver.RelayStore            = (*Store)(nil)
	_ driver.InboxStore[*sql.Tx]   = (*Store)(nil)
	_ driver.Pruner                = (*Store)(nil)
	_ driver.Admin                 = (*Store)(nil)
	_ driver.Notifier              = (*Store)(nil)
	_ driver.Waker                 = (*Store)(nil)
	_ driver.LaneResizer           = (*Store)(nil)
	_ driver.LaneInserter[*sql.Tx] = (*Store)(nil)
)

// New returns a Store on db, which the caller opened (preferably with OpenDB) and closes.
// opts may be nil. New does not touch the database; call Migrate before first use.
func New(db *sql.DB, opts *Options) (*Store, error) {
	if db == nil {
		return nil, &core.OptionError{Field: "db", Reason: "must not be nil"}
	}
	o, n, q, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, o: o, n: n, q: q, log: o.Logger, wlock: make(chan struct{}, 1), lanesSet: opts != nil && opts.Lanes != 0}, nil
}

// resolve applies opts' defaults, checks them and builds the names and statements (no I/O).
func resolve(opts *Options) (Options, names, queries, error) {
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
	var err error
	if o.Lanes, err = driver.LanesOption(o.Lanes); err != nil {
		return Options{}, names{}, queries{}, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n, err := buildNames(o.Table, o.InboxTable)
	if err != nil {
		return Options{}, names{}, queries{}, err
	}
	q, err := buildQueries(n)
	if err != nil {
		return Options{}, names{}, queries{}, err
	}
	return o, n, q, nil
}

// DB returns the database the Store was built on.
func (s *Store) DB() *sql.DB { return s.db }

// OpenDB opens the SQLite database file at path (created when missing) with the settings this
// adapter relies on, and checks that they took effect:
//
//   - journal_mode=WAL: readers (the relay's Fetch) never block the writer and vice versa.
//   - busy_timeout=10s (BusyTimeout): a connection waits for another's write lock instead of
//     failing at once with SQLITE_BUSY.
//   - _txlock=immediate: every read-write transaction, including the caller's producer
//     transactions, begins with BEGIN IMMEDIATE and takes the write lock first. A deferred
//     transaction that reads and then writes can fail with SQLITE_BUSY when another writer
//     committed in between, and busy_timeout does not help it.
//   - synchronous=NORMAL: in WAL mode a commit is atomic and consistent but not fsynced; a
//     power loss or OS crash (not an application crash) may lose the last transactions
//     committed before it. Open the database yourself with synchronous(FULL) instead (see the
//     package documentation) when committed events must survive power loss.
//   - foreign_keys=ON.
//
// path must name a file: an in-memory database is one per connection and cannot be shared by
// a pool. A caller that opens its own *sql.DB must set the same options (DSN
// "file:PATH?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)").
func OpenDB(ctx context.Context, path string) (*sql.DB, error) {
	if path == "" || path == ":memory:" || strings.HasPrefix(path, "file:") {
		return nil, &core.OptionError{Field: "path", Reason: "must be a database file path (not empty, :memory: or a file: URI)"}
	}
	db, err := sql.Open(DriverName, DSN(path))
	if err != nil {
		return nil, fmt.Errorf("sqlite: open: %w", classify(err))
	}
	db.SetMaxIdleConns(8)
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open: %w", classify(err))
	}
	if !strings.EqualFold(mode, "wal") {
		db.Close()
		return nil, fmt.Errorf("sqlite: open: journal_mode is %q, want wal", mode)
	}
	return db, nil
}

// DSN returns the modernc.org/sqlite data source name OpenDB uses for the file at path.
func DSN(path string) string {
	v := url.Values{}
	v.Set("_txlock", "immediate")
	v.Add("_pragma", "busy_timeout("+strconv.FormatInt(BusyTimeout.Milliseconds(), 10)+")")
	v.Add("_pragma", "journal_mode(WAL)")
	v.Add("_pragma", "synchronous(NORMAL)")
	v.Add("_pragma", "foreign_keys(1)")
	u := url.URL{Scheme: "file", OmitHost: true, Path: path, RawQuery: v.Encode()}
	return u.String()
}

// writeTx runs fn in a transaction that holds SQLite's write lock from its first statement,
// whatever the DSN's _txlock, so that lease changes and inbox transactions serialise instead
// of failing with SQLITE_BUSY on a lock upgrade. It commits when fn returns nil and rolls back
// otherwise, also when fn panics.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.lockedTx(ctx, s.q.writeLock, fn)
}

// inboxWriteTx is writeTx for the inbox's transactions, which take the write lock on a table of
// the inbox's (beginWrite).
func (s *Store) inboxWriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return s.lockedTx(ctx, s.q.inboxWriteLock, fn)
}

// lockedTx is writeTx with lock, the statement that takes the write lock (beginWrite).
func (s *Store) lockedTx(ctx context.Context, lock string, fn func(tx *sql.Tx) error) error {
	tx, err := s.beginWrite(ctx, lock)
	if err != nil {
		return err
	}
	defer s.unlockWrite()
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	committed = true
	return nil
}

// beginWrite waits for this Store's write slot, begins a transaction and takes SQLite's write
// lock with lock, a no-op write: WriteLock (on the outbox's meta table) or, for the inbox's
// transactions, InboxWriteLock (on the inbox's migrations table, so that an inbox-only database
// works; on a store whose inbox is not migrated, as a producer's may be, it falls back to
// WriteLock). The lock taken is the same, the database's, whichever table the statement names.
// On success the caller ends the transaction and then calls unlockWrite.
func (s *Store) beginWrite(ctx context.Context, lock string) (*sql.Tx, error) {
	s.prepare(ctx)
	select {
	case s.wlock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		s.unlockWrite()
		return nil, err
	}
	_, err = s.exec(ctx, tx, lock)
	if err != nil && lock == s.q.inboxWriteLock && isNoSuchTable(err) {
		_, err = s.exec(ctx, tx, s.q.writeLock)
	}
	if err != nil {
		_ = tx.Rollback()
		s.unlockWrite()
		if isNoSuchTable(err) {
			return nil, &core.NotMigratedError{Err: err}
		}
		return nil, err
	}
	return tx, nil
}

func (s *Store) unlockWrite() { <-s.wlock }
