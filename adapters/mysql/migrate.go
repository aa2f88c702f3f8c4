package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/sqlfile"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// The binary text migrations make the text the adapter compares byte-exact (VARBINARY, no PAD
// SPACE), the outbox's and the inbox's: Migrate (and MigrateInbox, the inbox's) runs each only
// while one of the columns it converts still has a character set.
const (
	binaryTextMigration      = "migrations/009_binary_text.sql"
	binaryTextInboxMigration = "migrations/009_binary_text_inbox.sql"
)

// inboxScopeMigration adds source and tenant to the inbox's records and to their primary key:
// Migrate and MigrateInbox run it only while the key lacks one of them (its ALTER rebuilds the
// table, and adding a column twice fails).
const inboxScopeMigration = "migrations/011_inbox_scope.sql"

// inboxMigrations are the files MigrateInbox runs, in order.
var inboxMigrations = []string{"migrations/002_inbox.sql", binaryTextInboxMigration, inboxScopeMigration}

// pendingMigration creates the pending layout and copies the unpublished records' status into
// it, once: Migrate runs it only while the meta row pendingMarker (which the file writes in the
// copy's transaction) is missing. Run again, the copy would make every record published since
// (whose outbox row still has no published_at) pending again.
const (
	pendingMigration = "migrations/010_pending.sql"
	pendingMarker    = "migration:010_pending"
)

// resizeMigration recreates the immutability trigger with the exemption of lane changes
// (ResizeLanes, Replay): Migrate runs it only when the trigger lacks it.
const resizeMigration = "migrations/008_lanes_resize.sql"

// Migrate creates the outbox, inbox, publisher and CDC checkpoint tables when missing
// (idempotent), records the lane count and creates the lane rows and the publisher row.
// Concurrent Migrate calls are serialised by a GET_LOCK. An outbox migrated earlier with another
// lane count than a non-zero Options.Lanes returns an error wrapping core.ErrSchemaMismatch and
// changes nothing; with Options.Lanes 0 it keeps the recorded count (which ResizeLanes may have
// changed). On a database migrated by an earlier version, migration 009 converts the compared
// text columns to binary ones (trailing spaces then count), which needs the ALTER privilege:
// each of its ALTER TABLEs rebuilds its table, blocking writes to it meanwhile, once. Stores of
// the earlier version keep working on the converted tables. On an inbox migrated by an earlier
// version, migration 011 adds the records' source and tenant (core.InboxOptions.Source,
// InboxMessage.Tenant) to their primary key, both empty for the existing records (their key as
// it was): ALTER privilege and one rebuild of the inbox table, blocking writes to it, once.
func (s *Store) Migrate(ctx context.Context) error { return s.migrate(ctx, "") }

// migrate is Migrate with the migration files before until only ("": all of them), so that tests
// can build a database as an earlier version of the adapter migrated it.
func (s *Store) migrate(ctx context.Context, until string) error {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(files)
	if until != "" {
		files = slices.DeleteFunc(files, func(f string) bool { return f >= until })
	}
	return s.withMigrateLock(ctx, "migrate", func(conn *sql.Conn) error {
		if err := s.apply(ctx, conn, "migrate", files); err != nil {
			return err
		}
		return s.migrateOutbox(ctx, conn, len(files))
	})
}

// MigrateInbox creates only the inbox's tables (processed messages, retention horizons, entity
// versions) when missing, for a consumer-only service: no outbox, lanes, publisher, audit or
// meta table. It takes Migrate's GET_LOCK, is idempotent and records nothing (its migrations
// check the tables themselves). Migrate, run later or earlier on the same database, finds the
// inbox current and keeps its rows. On an inbox-only database core.NewInbox works and
// core.NewOutbox fails with a *core.NotMigratedError (core.ErrSchemaMismatch). On an inbox
// migrated by an earlier version it converts the inbox's compared text to binary, as Migrate
// does (migration 009: ALTER privilege, a rebuild of each inbox table, once), and adds the
// records' source and tenant to their key (migration 011: a rebuild of the inbox table, once).
func (s *Store) MigrateInbox(ctx context.Context) error {
	return s.withMigrateLock(ctx, "migrate inbox", func(conn *sql.Conn) error {
		return s.apply(ctx, conn, "migrate inbox", inboxMigrations)
	})
}

// withMigrateLock runs fn on one connection holding Migrate's GET_LOCK; op names the operation
// in errors.
func (s *Store) withMigrateLock(ctx context.Context, op string, fn func(conn *sql.Conn) error) (err error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return wrap(op, err)
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, s.q.migrateLock, migrateLockParams{Name: s.lockPrefix + "migrate"}.args()...).Scan(&got); err != nil {
		return wrap(op+": lock", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("mysql: %s: another migration holds the lock", op)
	}
	defer func() {
		_, rerr := conn.ExecContext(context.WithoutCancel(ctx), s.q.migrateUnlock, migrateUnlockParams{Name: s.lockPrefix + "migrate"}.args()...)
		if err == nil && rerr != nil {
			err = wrap(op+": unlock", rerr)
		}
	}()
	return fn(conn)
}

// apply runs the migration files in order on conn, each that is still to run: every file is
// idempotent or guarded here.
func (s *Store) apply(ctx context.Context, conn *sql.Conn, op string, files []string) error {
	id := s.names.idents()
	n := s.names
	for _, f := range files {
		if f == binaryTextMigration || f == binaryTextInboxMigration {
			// Only while a column it converts is still text: each ALTER rebuilds its table.
			tables := []string{n.outbox, n.lanes, n.workers, n.audit}
			if f == binaryTextInboxMigration {
				tables = []string{n.inbox, n.horizons, n.versions}
			}
			var pending int
			query, args := textColumnsPendingParams{Tables: tables}.query(s.q.textColumnsPending)
			if err := conn.QueryRowContext(ctx, query, args...).Scan(&pending); err != nil {
				return wrap(op+": "+f, err)
			}
			if pending == 0 {
				continue
			}
		}
		if f == inboxScopeMigration {
			// Only while the inbox's primary key lacks source or tenant: one ALTER adds both
			// columns and the key, so a key with both means the file ran.
			var have int
			if err := conn.QueryRowContext(ctx, s.q.inboxScopeKeyColumns, inboxScopeKeyColumnsParams{Table: n.inbox}.args()...).Scan(&have); err != nil {
				return wrap(op+": "+f, err)
			}
			if have == 2 {
				continue
			}
		}
		if f == resizeMigration {
			// Only when the trigger lacks the exemption: the file drops and recreates it.
			current, err := s.resizeMigrated(ctx, conn)
			if err != nil {
				return wrap(op+": "+f, err)
			}
			if current {
				continue
			}
		}
		if f == pendingMigration {
			var v string
			switch err := conn.QueryRowContext(ctx, s.q.metaGet, metaGetParams{Name: pendingMarker}.args()...).Scan(&v); {
			case err == nil:
				continue
			case !errors.Is(err, sql.ErrNoRows):
				return wrap(op+": "+f, err)
			}
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return err
		}
		text, err := id.Expand(string(b))
		if err != nil {
			return fmt.Errorf("mysql: %s: %s: %w", op, f, err)
		}
		for _, stmt := range splitSQL(text) {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				// 010 runs its copy in a transaction: none may outlive the failed file.
				_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
				return wrap(op+": "+f, err)
			}
		}
	}
	return nil
}

// migrateOutbox is the end of Migrate, after its files: the unique aggregate version index, the
// lane count, lane rows, publisher row and the meta rows (files is how many files ran).
func (s *Store) migrateOutbox(ctx context.Context, conn *sql.Conn, files int) error {
	if s.o.UniqueAggregateVersion {
		var n int
		if err := conn.QueryRowContext(ctx, s.q.aggregateVersionIndexCount, aggregateVersionIndexCountParams{Table: s.names.outbox}.args()...).Scan(&n); err != nil {
			return wrap("migrate: unique aggregate version", err)
		}
		if n == 0 {
			if _, err := conn.ExecContext(ctx, s.q.aggregateVersionIndex); err != nil {
				return wrap("migrate: unique aggregate version", err)
			}
		}
	}
	return s.inTx(ctx, nil, func(tx *sql.Tx) error {
		lanes := s.o.Lanes
		var recorded string
		err := tx.QueryRowContext(ctx, s.q.metaGetForUpdate, metaGetForUpdateParams{Name: "lanes"}.args()...).Scan(&recorded)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return wrap("migrate: lanes", err)
		default:
			n, err := strconv.Atoi(recorded)
			switch {
			case err != nil || n < 1 || n > core.MaxLanes:
				return fmt.Errorf("mysql: migrate: %w: outbox %s has recorded lane count %q", core.ErrSchemaMismatch, s.names.outbox, recorded)
			case n != s.o.Lanes && s.lanesSet:
				return fmt.Errorf("mysql: migrate: %w: outbox %s has %s lanes, options ask for %d",
					core.ErrSchemaMismatch, s.names.outbox, recorded, s.o.Lanes)
			}
			lanes = n // the recorded count (perhaps changed by ResizeLanes) when Options.Lanes is 0
		}
		if err := s.insertLanes(ctx, tx, 0, lanes); err != nil {
			return wrap("migrate: lanes", err)
		}
		// A fresh outbox is at publisher generation 0 with no kind and no holder.
		if _, err := tx.ExecContext(ctx, s.q.publisherInit); err != nil {
			return wrap("migrate: publisher", err)
		}
		if _, err := tx.ExecContext(ctx, s.q.metaPut, metaPutParams{Name: "lanes", Value: strconv.Itoa(lanes)}.args()...); err != nil {
			return wrap("migrate: lanes", err)
		}
		if _, err := tx.ExecContext(ctx, s.q.metaPut, metaPutParams{Name: "schema_version", Value: strconv.Itoa(files)}.args()...); err != nil {
			return wrap("migrate: schema version", err)
		}
		if _, err := tx.ExecContext(ctx, s.q.metaPut, metaPutParams{Name: resizeMarker, Value: "1"}.args()...); err != nil {
			return wrap("migrate: "+resizeMigration, err)
		}
		return nil
	})
}

// resizeMarker is the meta row Migrate (and MigrationSQL's script) writes once migration 008 is
// applied; ResizeLanes needs it.
const resizeMarker = "migration:008_lanes_resize"

// resizeMigrated reports whether migration 008 is applied: its meta row, or else (an outbox
// migrated before the row existed, or being migrated now) the trigger's body.
func (s *Store) resizeMigrated(ctx context.Context, conn *sql.Conn) (bool, error) {
	var v string
	switch err := conn.QueryRowContext(ctx, s.q.metaGet, metaGetParams{Name: resizeMarker}.args()...).Scan(&v); {
	case err == nil:
		return true, nil
	case !errors.Is(err, sql.ErrNoRows):
		return false, err
	}
	var body string
	if err := conn.QueryRowContext(ctx, s.q.triggerBody, triggerBodyParams{Name: s.names.outbox + "_imm"}.args()...).Scan(&body); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	return strings.Contains(body, "lanes_resize"), nil
}

// MigrationSQL returns, as one plain SQL script, what Migrate does to an empty database with
// opts: the embedded migrations with the table names of opts, the lane rows, the publisher row
// and the rows Migrate records (lane count, schema version), so that Migrate with the same
// options then finds the outbox current. It is for teams whose schema changes go through their
// own tool (goose, atlas, golang-migrate); it needs no database to be built. Every statement
// ends with ";" at the end of a line; the triggers' bodies hold more ";" inside lines, so
// send the script as one multi-statement batch (go-sql-driver/mysql multiStatements=true, the
// tools' default) or split it at line ends, as Migrate does; the mysql command-line client needs
// a DELIMITER around the triggers. MySQL DDL is not transactional; migration 010's one-time copy
// and its meta row are one transaction (START TRANSACTION ... COMMIT in the script). The script is the same for
// MySQL and MariaDB: migration 009 (ALTER TABLEs after the CREATEs) makes the compared text
// VARBINARY, which both servers compare byte for byte, so no collation has to be chosen per
// server.
func MigrationSQL(opts *Options) (string, error) {
	o, names, err := resolve(opts)
	if err != nil {
		return "", err
	}
	q, err := newQueries(names)
	if err != nil {
		return "", err
	}
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit MySQL/MariaDB migrations: outbox `%s`, inbox `%s`, %d lanes.\n\n", names.outbox, names.inbox, o.Lanes)
	add := func(stmt string) { b.WriteString(strings.TrimSpace(stmt) + ";\n\n") }
	if err := writeScript(&b, names, files); err != nil {
		return "", err
	}
	if o.UniqueAggregateVersion {
		add(q.aggregateVersionIndex)
	}
	values := make([]string, o.Lanes)
	for l := range values {
		values[l] = "(" + strconv.Itoa(l) + ")"
	}
	add(q.laneInsert + strings.Join(values, ","))
	add(q.publisherInit)
	for _, kv := range [][2]string{{"lanes", strconv.Itoa(o.Lanes)}, {"schema_version", strconv.Itoa(len(files))}, {resizeMarker, "1"}} {
		stmt, err := sqlfile.Idents{"key": sqlLiteral(kv[0]), "value": sqlLiteral(kv[1])}.Expand(q.scriptMetaPut)
		if err != nil {
			return "", err
		}
		add(stmt)
	}
	return b.String(), nil
}

// InboxMigrationSQL returns, as one plain SQL script, what MigrateInbox does to an empty
// database with opts: the inbox's tables (processed messages, retention horizons, entity
// versions) with the names of opts; no outbox, lanes, publisher, audit or meta table. It is
// MigrationSQL for a consumer-only service whose schema changes go through its own tool, and is
// sent the same way. Its statements create only what is missing, so MigrateInbox or Migrate run
// afterwards on the same database find the inbox current and keep its rows. Only opts' names
// are read.
func InboxMigrationSQL(opts *Options) (string, error) {
	_, names, err := resolve(opts)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit MySQL/MariaDB inbox migration: inbox `%s`, no outbox tables.\n\n", names.inbox)
	if err := writeScript(&b, names, inboxMigrations); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeScript writes the statements of the migration files, with the identifiers of names, to
// b, each ended by ";" and a blank line (the scripts of MigrationSQL and InboxMigrationSQL).
func writeScript(b *strings.Builder, names tableNames, files []string) error {
	id := names.idents()
	for _, f := range files {
		src, err := migrationFS.ReadFile(f)
		if err != nil {
			return err
		}
		text, err := id.Expand(string(src))
		if err != nil {
			return fmt.Errorf("mysql: %s: %w", f, err)
		}
		for _, stmt := range splitSQL(text) {
			b.WriteString(strings.TrimSpace(stmt) + ";\n\n")
		}
	}
	return nil
}

// sqlLiteral quotes s, made of letters, digits, ":" and "_" only, as a string literal.
func sqlLiteral(s string) string { return "'" + s + "'" }

// splitSQL drops comment lines and splits a migration file into statements: a statement ends
// at a ';' that ends a line, so that a trigger body may hold ';' elsewhere on a line.
func splitSQL(src string) []string {
	var out []string
	var b strings.Builder
	flush := func() {
		if stmt := strings.TrimSpace(b.String()); stmt != "" {
			out = append(out, stmt)
		}
		b.Reset()
	}
	for line := range strings.SplitSeq(src, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		line = strings.TrimRight(line, " \t\r")
		if stmt, ok := strings.CutSuffix(line, ";"); ok {
			b.WriteString(stmt)
			flush()
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	return out
}

//go:embed migrate.sql
var migrateSQL embed.FS

// migrateStatements returns the statements of migrate.sql with the store's identifiers.
func (s *Store) migrateStatements() (*sqlfile.Statements, error) {
	st, err := sqlfile.Load(migrateSQL, "migrate.sql", s.names.idents())
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	return st, nil
}

// CheckInbox implements driver.InboxStore: nil when the inbox's tables exist and its records
// have a source and a tenant (migration 011), otherwise a *core.NotMigratedError (run Migrate or
// MigrateInbox), so that this version fails at core.NewInbox on an inbox an earlier version
// migrated, not at its first message.
func (s *Store) CheckInbox(ctx context.Context) error {
	st, err := s.migrateStatements()
	if err != nil {
		return err
	}
	var n int64
	err = s.db.QueryRowContext(ctx, st.Get("CheckInbox")).Scan(&n)
	if errNumber(err) == errBadField {
		return fmt.Errorf("mysql: check inbox: %w", &core.NotMigratedError{
			Missing: "source and tenant of inbox " + s.names.inbox + ", migration 011_inbox_scope; MigrateInbox applies it too",
			Err:     err,
		})
	}
	if err != nil {
		return wrap("check inbox", err)
	}
	return nil
}

// insertLanes inserts the lane rows from..to-1 that are missing (LaneInsert with a LaneRow per
// lane), 500 per statement.
func (s *Store) insertLanes(ctx context.Context, tx *sql.Tx, from, to int) error {
	for start := from; start < to; start += 500 {
		end := min(start+500, to)
		var b strings.Builder
		b.WriteString(s.q.laneInsert)
		args := make([]any, 0, end-start)
		for l := start; l < end; l++ {
			if l > start {
				b.WriteByte(',')
			}
			b.WriteString(s.q.laneRow)
			args = append(args, laneRowParams{Lane: l}.args()...)
		}
		if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}
