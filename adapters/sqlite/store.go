package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DriverName is the database/sql driver this adapter is written for (modernc.org/sqlite).
const DriverName = "sqlite"

// BusyTimeout is how long OpenDB's connections wait for another connection's write lock.
const BusyTimeout = 10 * time.Second

// Store is the SQLite adapter. Its transaction type is *sql.Tx. It implements
// core.OutboxStore[*sql.Tx], core.RelayStore, core.InboxStore[*sql.Tx], core.Pruner, core.Admin,
// and, through the embedded core.Broadcast, core.Notifier and core.Waker: Notify (called by
// core.Outbox.Notify after a commit) wakes the relays of this process. It is safe for
// concurrent use.
type Store struct {
	core.Broadcast

	db    *sql.DB
	o     Options
	n     names
	q     queries
	log   *slog.Logger
	lanes atomic.Int64           // cached lane count; 0 until read
	file  atomic.Pointer[string] // the database file's path; nil until read
	// wlock admits one of this Store's write transactions at a time. SQLite has one writer
	// anyway; queueing here, in FIFO-ish Go order, spares concurrent callers SQLite's
	// sleep-and-retry busy handler and the extra connections it would hold open.
	wlock chan struct{}
	stmts stmtCache
}

// Compile-time checks of the contracts Store implements.
var (
	_ core.OutboxStore[*sql.Tx] = (*Store)(nil)
	_ core.RelayStore           = (*Store)(nil)
	_ core.InboxStore[*sql.Tx]  = (*Store)(nil)
	_ core.Pruner               = (*Store)(nil)
	_ core.Admin                = (*Store)(nil)
	_ core.Notifier             = (*Store)(nil)
	_ core.Waker                = (*Store)(nil)
)

// New returns a Store on db, which the caller opened (preferably with OpenDB) and closes.
// opts may be nil. New does not touch the database; call Migrate before first use.
func New(db *sql.DB, opts *Options) (*Store, error) {
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
	if o.Lanes == 0 {
		o.Lanes = core.DefaultLanes
	}
	if o.Lanes < 1 || o.Lanes > core.MaxLanes {
		return nil, &core.OptionError{Field: "Lanes", Reason: fmt.Sprintf("must be between 1 and %d", core.MaxLanes)}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	n, err := buildNames(o.Table, o.InboxTable)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, o: o, n: n, q: buildQueries(n), log: o.Logger, wlock: make(chan struct{}, 1)}, nil
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

//go:embed migrations/outbox/*.sql migrations/inbox/*.sql
var migrationFS embed.FS

// migrationSets are the directories of embedded migrations, each versioned on its own: the
// outbox set in <Table>_migrations, the inbox set in <InboxTable>_migrations (so that several
// inboxes can share one outbox). The index is that of queries.appliedVersion.
var migrationSets = [2]string{"migrations/outbox", "migrations/inbox"}

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations(dir string) ([]migration, error) {
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("bad migration file name %q", name)
		}
		b, err := fs.ReadFile(migrationFS, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: path.Join(path.Base(dir), name), sql: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("%s: migration versions must be 1..n without gaps; found %d at position %d", dir, m.version, i+1)
		}
	}
	return out, nil
}

// Migrate creates or upgrades the adapter's tables, in one transaction. It is idempotent and
// safe to run from several processes at once. The first run records Options.Lanes and creates
// that many lanes; a later run with a different Lanes fails with an error wrapping
// core.ErrSchemaMismatch and changes nothing.
func (s *Store) Migrate(ctx context.Context) error {
	var sets [len(migrationSets)][]migration
	for i, dir := range migrationSets {
		var err error
		if sets[i], err = loadMigrations(dir); err != nil {
			return fmt.Errorf("sqlite: migrate: %w", classify(err))
		}
	}
	// Idempotent bootstrap of the bookkeeping tables, so that the write lock below has a table
	// to take it on.
	if _, err := s.db.ExecContext(ctx, s.q.bootstrap); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", classify(err))
	}
	rep := replacer(s.n)
	var applied []migration
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		applied = applied[:0]
		now := nowMicros(time.Time{})
		for i, migs := range sets {
			var version int
			if err := tx.QueryRowContext(ctx, s.q.appliedVersion[i]).Scan(&version); err != nil {
				return err
			}
			if version > len(migs) {
				return fmt.Errorf("%w: %s schema version %d is newer than this adapter's %d",
					core.ErrSchemaMismatch, path.Base(migrationSets[i]), version, len(migs))
			}
			for _, m := range migs[version:] {
				if _, err := tx.ExecContext(ctx, rep.Replace(m.sql)); err != nil {
					return fmt.Errorf("%s: %w", m.name, err)
				}
				if _, err := tx.ExecContext(ctx, s.q.recordVersion[i], m.version, m.name, now); err != nil {
					return err
				}
				applied = append(applied, m)
			}
		}
		var lanes int
		switch err := tx.QueryRowContext(ctx, s.q.getLanes).Scan(&lanes); {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, s.q.setLanes, s.o.Lanes); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.q.seedLanes, s.o.Lanes); err != nil {
				return err
			}
		case err != nil:
			return err
		case lanes != s.o.Lanes:
			return fmt.Errorf("%w: the outbox was migrated with %d lanes, options ask for %d", core.ErrSchemaMismatch, lanes, s.o.Lanes)
		}
		if s.o.UniqueAggregateVersion {
			if _, err := tx.ExecContext(ctx, s.q.aggVersionIdx); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", classify(err))
	}
	for _, m := range applied {
		s.log.Info("sqlite_migration_applied", "version", m.version, "name", m.name)
	}
	return nil
}

// LaneCount implements core.OutboxStore and core.RelayStore: the lane count recorded by
// Migrate. An unmigrated database returns an error wrapping core.ErrSchemaMismatch.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	if n := s.lanes.Load(); n > 0 {
		return int(n), nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, s.q.getLanes).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) || isNoSuchTable(err) {
		return 0, fmt.Errorf("sqlite: lane count: %w: outbox not migrated (%v)", core.ErrSchemaMismatch, err)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: lane count: %w", classify(err))
	}
	if err := s.learnFile(ctx); err != nil {
		return 0, fmt.Errorf("sqlite: lane count: %w", err)
	}
	s.lanes.Store(int64(n))
	return n, nil
}

// writeTx runs fn in a transaction that holds SQLite's write lock from its first statement,
// whatever the DSN's _txlock, so that lease changes and inbox transactions serialise instead
// of failing with SQLITE_BUSY on a lock upgrade. It commits when fn returns nil and rolls back
// otherwise, also when fn panics.
func (s *Store) writeTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.beginWrite(ctx)
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
// lock with a no-op write. On success the caller ends the transaction and then calls
// unlockWrite.
func (s *Store) beginWrite(ctx context.Context) (*sql.Tx, error) {
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
	if _, err := s.exec(ctx, tx, s.q.writeLock); err != nil {
		_ = tx.Rollback()
		s.unlockWrite()
		if isNoSuchTable(err) {
			return nil, fmt.Errorf("%w: not migrated (%v)", core.ErrSchemaMismatch, err)
		}
		return nil, err
	}
	return tx, nil
}

func (s *Store) unlockWrite() { <-s.wlock }

// maxVariables is SQLite's bound-parameter limit (SQLITE_MAX_VARIABLE_NUMBER) in
// modernc.org/sqlite.
const maxVariables = 32766

// insertChunkRows is how many rows one INSERT statement carries.
var insertChunkRows = maxVariables / insertArity

// Insert implements core.OutboxStore. All records are written or none: when they need more
// than one statement, the statements run inside a SAVEPOINT that is rolled back on error,
// leaving tx usable. A duplicate ID (or aggregate version, with UniqueAggregateVersion)
// returns an error wrapping core.ErrDuplicateEvent.
//
// tx must be a live transaction on this Store's database file (through any *sql.DB): a nil or
// ended transaction, or (once LaneCount has run, as core.NewOutbox does) one of another
// database, returns an error wrapping core.ErrInvalidTx and writes nothing.
//
// Cancelling ctx never ends the caller's transaction: SQLite's interrupt, which database/sql
// issues when the context of a running statement ends, rolls back the whole enclosing
// transaction, after which the caller's later statements would run outside it. Insert
// therefore checks ctx before each of its statements and returns ctx's error (having undone its
// own earlier statements), but never interrupts a statement that is running.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []core.Record) error {
	if tx == nil {
		return fmt.Errorf("sqlite: insert: %w: nil transaction", core.ErrInvalidTx)
	}
	if len(records) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	// From here on no statement is interrupted (see above); ctx is checked between them.
	sctx := context.WithoutCancel(ctx)
	if err := s.checkTx(sctx, tx); err != nil {
		return err
	}
	now := nowMicros(time.Time{})
	if len(records) <= insertChunkRows {
		if err := s.insertChunk(sctx, tx, records, now); err != nil {
			return insertError(err)
		}
		return nil
	}
	if _, err := tx.ExecContext(sctx, s.q.spSave); err != nil {
		return fmt.Errorf("sqlite: insert: %w", classify(err))
	}
	for start := 0; start < len(records); start += insertChunkRows {
		end := min(start+insertChunkRows, len(records))
		err := ctx.Err()
		if err == nil {
			err = s.insertChunk(sctx, tx, records[start:end], now)
		}
		if err != nil {
			// Undo the earlier chunks; the caller's transaction stays usable.
			_, rbErr := tx.ExecContext(sctx, s.q.spRollback)
			_, relErr := tx.ExecContext(sctx, s.q.spRelease)
			return errors.Join(insertError(err), rbErr, relErr)
		}
	}
	if _, err := tx.ExecContext(sctx, s.q.spRelease); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	return nil
}

// checkTx refuses an ended transaction and, once LaneCount has run (see learnFile), one on
// another database file than the Store's.
func (s *Store) checkTx(ctx context.Context, tx *sql.Tx) error {
	var file string
	err := s.queryRow(ctx, tx, s.q.mainFile).Scan(&file)
	if err != nil && !errors.Is(err, sql.ErrTxDone) && s.stmt(s.q.mainFile) != nil {
		// A transaction of another *sql.DB cannot use this Store's prepared statement
		// (database/sql refuses it); ask its database directly.
		err = tx.QueryRowContext(ctx, s.q.mainFile).Scan(&file)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlite: insert: %w: %w", core.ErrInvalidTx, err)
	}
	if err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	if want := s.file.Load(); want != nil && file != *want {
		return fmt.Errorf("sqlite: insert: %w: the transaction is on database %q, the store on %q", core.ErrInvalidTx, file, *want)
	}
	return nil
}

// learnFile records the path of the Store's database file. It runs on the pool, outside any
// transaction (a pool of one connection would otherwise wait forever), when LaneCount first
// reads the lane count, which core.NewOutbox does before any Write.
func (s *Store) learnFile(ctx context.Context) error {
	if s.file.Load() != nil {
		return nil
	}
	s.prepare(ctx) // so that Insert's transaction check runs a prepared statement
	var file string
	if err := s.db.QueryRowContext(ctx, s.q.mainFile).Scan(&file); err != nil {
		return err
	}
	s.file.Store(&file)
	return nil
}

func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, recs []core.Record, now int64) error {
	var b strings.Builder
	b.Grow(len(s.q.insertPrefix) + len(recs)*(len(insertRowPlaceholder)+1))
	b.WriteString(s.q.insertPrefix)
	args := make([]any, 0, len(recs)*insertArity)
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(insertRowPlaceholder)
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return err
		}
		args = append(args, r.ID, r.AggregateType, r.AggregateID, r.AggregateVersion, r.Type,
			r.SchemaID, r.PartitionKey, r.Destination, payloadArg(r.Payload), headers, r.Tenant,
			r.CausationID, r.CorrelationID, r.Lane, now)
	}
	_, err := tx.ExecContext(ctx, b.String(), args...)
	return err
}

func insertError(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("sqlite: insert: %w: %w", core.ErrDuplicateEvent, err)
	}
	return fmt.Errorf("sqlite: insert: %w", classify(err))
}
