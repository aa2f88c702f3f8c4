package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/sqlfile"
)

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

// MigrationSQL returns, as one plain SQL script, what Migrate does to an empty database with
// opts: the bookkeeping tables, the embedded migrations with the table names of opts and their
// version rows, the lane count and the lane rows, so that Migrate with the same options then
// finds the outbox current and changes nothing. It is for teams whose schema changes go through
// their own tool (goose, atlas, golang-migrate); it takes no parameters, holds no transaction
// control (run it in one transaction) and needs no database to be built.
func MigrationSQL(opts *Options) (string, error) {
	o, n, q, err := resolve(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit SQLite migrations: outbox %s, inbox %s, %d lanes.\n-- Run in one transaction.\n\n", n.outbox, n.inbox, o.Lanes)
	add := func(stmt string) {
		b.WriteString(strings.TrimRight(strings.TrimSpace(stmt), ";"))
		b.WriteString(";\n\n")
	}
	add(q.bootstrap)
	for i := range migrationSets {
		if err := writeSet(add, n, &q, i); err != nil {
			return "", err
		}
	}
	add(q.dropEarlierIdx) // the script creates a new outbox
	for _, stmt := range []string{q.scriptSetLanes, q.scriptSeedLanes} {
		if err := addLiteral(add, stmt, o.Lanes, ""); err != nil {
			return "", err
		}
	}
	if o.UniqueAggregateVersion {
		add(q.aggVersionIdx)
	}
	return b.String(), nil
}

// InboxMigrationSQL returns, as one plain SQL script, what MigrateInbox does to an empty
// database with opts: the inbox's bookkeeping table <InboxTable>_migrations, the inbox's tables
// (processed messages, retention horizons, entity versions) with the names of opts, and their
// version rows; no outbox, lanes, publisher, audit or meta table. It is MigrationSQL for a
// consumer-only service whose schema changes go through its own tool (run it in one
// transaction). MigrateInbox or Migrate run afterwards on the same database find the inbox's
// versions recorded and keep its rows. Only opts' names are read.
func InboxMigrationSQL(opts *Options) (string, error) {
	_, n, q, err := resolve(opts)
	if err != nil {
		return "", err
	}
	st, err := sqlfile.Load(migrateSQL, "migrate.sql", n.idents())
	if err != nil {
		return "", fmt.Errorf("sqlite: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit SQLite inbox migration: inbox %s, no outbox tables.\n-- Run in one transaction.\n\n", n.inbox)
	add := func(stmt string) {
		b.WriteString(strings.TrimRight(strings.TrimSpace(stmt), ";"))
		b.WriteString(";\n\n")
	}
	add(st.Get("BootstrapInbox"))
	const inbox = 1 // migrationSets
	if err := writeSet(add, n, &q, inbox); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeSet adds the migrations of migrationSets[set], with the identifiers of n, each followed
// by the statement that records its version (the scripts of MigrationSQL and
// InboxMigrationSQL).
func writeSet(add func(string), n names, q *queries, set int) error {
	migs, err := loadMigrations(migrationSets[set])
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	id := n.idents()
	for _, m := range migs {
		text, err := id.Expand(m.sql)
		if err != nil {
			return fmt.Errorf("sqlite: %s: %w", m.name, err)
		}
		add(text)
		if err := addLiteral(add, q.scriptRecordVersion[set], m.version, m.name); err != nil {
			return err
		}
	}
	return nil
}

// addLiteral adds stmt with {{version}} and {{name}} replaced by the literals version and name.
func addLiteral(add func(string), stmt string, version int, name string) error {
	text, err := sqlfile.Idents{"version": strconv.Itoa(version), "name": "'" + strings.ReplaceAll(name, "'", "''") + "'"}.Expand(stmt)
	if err == nil {
		add(text)
	}
	return err
}

// Migrate creates or upgrades the adapter's tables, in one transaction. It is idempotent and
// safe to run from several processes at once. The first run records Options.Lanes and creates
// that many lanes; a later run with a different Lanes fails with an error wrapping
// core.ErrSchemaMismatch and changes nothing (Lanes left at 0 accepts the recorded count, which
// ResizeLanes may have changed).
func (s *Store) Migrate(ctx context.Context) error {
	// The next transaction prepares the statements of what the migration created.
	defer s.stmts.retryAt.Store(0)
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
	var applied []migration
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		applied = applied[:0]
		now := nowMicros(time.Time{})
		fresh := false
		for i, migs := range sets {
			done, version, err := s.applySet(ctx, tx, i, migs, now)
			if err != nil {
				return err
			}
			fresh = fresh || i == 0 && version == 0
			applied = append(applied, done...)
		}
		if fresh {
			// No relay of an earlier version ever ran on this outbox.
			if _, err := tx.ExecContext(ctx, s.q.dropEarlierIdx); err != nil {
				return err
			}
		}
		var lanes int
		switch err := tx.QueryRowContext(ctx, s.q.getLanes).Scan(&lanes); {
		case errors.Is(err, sql.ErrNoRows):
			if _, err := tx.ExecContext(ctx, s.q.setLanes, setLanesParams{Lanes: s.o.Lanes}.args()...); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.q.seedLanes, setLanesParams{Lanes: s.o.Lanes}.args()...); err != nil {
				return err
			}
		case err != nil:
			return err
		case lanes != s.o.Lanes && s.lanesSet: // left at 0: the recorded count (ResizeLanes may have changed it)
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

// applySet runs in tx the migrations of set i (migrationSets) that its bookkeeping table does
// not record yet, and records them. It returns them and the version found before.
func (s *Store) applySet(ctx context.Context, tx *sql.Tx, i int, migs []migration, now int64) ([]migration, int, error) {
	var version int
	if err := tx.QueryRowContext(ctx, s.q.appliedVersion[i]).Scan(&version); err != nil {
		return nil, 0, err
	}
	if version > len(migs) {
		return nil, 0, fmt.Errorf("%w: %s schema version %d is newer than this adapter's %d",
			core.ErrSchemaMismatch, path.Base(migrationSets[i]), version, len(migs))
	}
	id := s.n.idents()
	for _, m := range migs[version:] {
		text, err := id.Expand(m.sql)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, text); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, s.q.recordVersion[i], recordVersionOutboxParams{Version: m.version, Name: m.name, AppliedAt: now}.args()...); err != nil {
			return nil, 0, err
		}
	}
	return migs[version:], version, nil
}

// MigrateInbox creates or upgrades only the inbox's tables (processed messages, retention
// horizons, entity versions) and their bookkeeping table <InboxTable>_migrations, in one
// transaction, for a consumer-only service: no outbox, lanes, publisher, audit or meta table.
// It is idempotent and safe to run from several processes at once, like Migrate, which run
// later or earlier on the same database finds the inbox's versions recorded and keeps its rows.
// The inbox's transactions take SQLite's write lock on <InboxTable>_migrations, so they
// serialise as on a fully migrated database. On an inbox-only database core.NewInbox works and
// core.NewOutbox fails with a *core.NotMigratedError (core.ErrSchemaMismatch).
func (s *Store) MigrateInbox(ctx context.Context) error {
	// The next transaction prepares the statements of what the migration created.
	defer s.stmts.retryAt.Store(0)
	const inbox = 1 // migrationSets
	migs, err := loadMigrations(migrationSets[inbox])
	if err != nil {
		return fmt.Errorf("sqlite: migrate inbox: %w", err)
	}
	st, err := s.migrateStatements()
	if err != nil {
		return err
	}
	// Idempotent, so that the write lock below has a table to take it on.
	if _, err := s.db.ExecContext(ctx, st.Get("BootstrapInbox")); err != nil {
		return fmt.Errorf("sqlite: migrate inbox: %w", classify(err))
	}
	var applied []migration
	err = s.inboxWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		applied, _, err = s.applySet(ctx, tx, inbox, migs, nowMicros(time.Time{}))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: migrate inbox: %w", classify(err))
	}
	for _, m := range applied {
		s.log.Info("sqlite_migration_applied", "version", m.version, "name", m.name)
	}
	return nil
}

//go:embed migrate.sql
var migrateSQL embed.FS

// migrateStatements returns the statements of migrate.sql with the store's identifiers.
func (s *Store) migrateStatements() (*sqlfile.Statements, error) {
	st, err := sqlfile.Load(migrateSQL, "migrate.sql", s.n.idents())
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return st, nil
}

// CheckInbox implements driver.InboxStore: nil when the inbox's tables exist and
// <InboxTable>_migrations records every inbox migration of this adapter, otherwise a
// *core.NotMigratedError (run Migrate or MigrateInbox). An inbox migrated by an earlier
// version (before migration 0002, which keys records by source and tenant too) is refused here,
// at core.NewInbox, rather than at its first message. A later version than this adapter's is
// accepted (Migrate refuses it).
func (s *Store) CheckInbox(ctx context.Context) error {
	st, err := s.migrateStatements()
	if err != nil {
		return err
	}
	var n int64
	if err := s.db.QueryRowContext(ctx, st.Get("CheckInbox")).Scan(&n); err != nil {
		return fmt.Errorf("sqlite: check inbox: %w", classify(err))
	}
	const inbox = 1 // migrationSets
	migs, err := loadMigrations(migrationSets[inbox])
	if err != nil {
		return fmt.Errorf("sqlite: check inbox: %w", err)
	}
	var version int
	if err := s.db.QueryRowContext(ctx, s.q.appliedVersion[inbox]).Scan(&version); err != nil {
		return fmt.Errorf("sqlite: check inbox: %w", classify(err))
	}
	if version < len(migs) {
		return fmt.Errorf("sqlite: check inbox: %w", &core.NotMigratedError{Missing: fmt.Sprintf(
			"inbox %s is at migration %d of %d, without %s; Migrate or MigrateInbox applies it", s.n.inbox, version, len(migs), migs[version].name)})
	}
	return nil
}
