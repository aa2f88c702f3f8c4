package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/sqlfile"
)

// Migrate creates the outbox, lanes, workers, publisher, CDC checkpoint and inbox tables, indexes and the immutability
// trigger, in one transaction serialised by an advisory lock, and records the lane count and
// whether the outbox is partitioned (Options.Partitioning; it then also creates the partitions
// ahead, as EnsurePartitions does). It is idempotent: each embedded migration runs once
// (recorded in the meta table), so running it at every start takes no lock on the outbox table
// (with partitioning, a new partition is created at most once per interval). An outbox migrated with another lane count
// (or another partitioning) returns an error wrapping core.ErrSchemaMismatch and changes
// nothing. The schema must exist.
func (s *Store[TTx]) Migrate(ctx context.Context) error {
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.exec(ctx, s.q.migrateLock, migrateLockParams{Key: s.n.migrateKey}.args()...); err != nil {
			return err
		}
		if _, err := q.exec(ctx, s.q.metaTable); err != nil {
			return err
		}
		// The lane count first: a mismatch must change nothing.
		var recorded string
		lanes := s.o.Lanes
		err := queryRow(ctx, q, s.q.metaGet, metaGetParams{Name: "lanes"}.args(), &recorded)
		switch {
		case errors.Is(err, errNoRows):
			if _, err := q.exec(ctx, s.q.metaPut, metaPutParams{Name: "lanes", Value: strconv.Itoa(s.o.Lanes)}.args()...); err != nil {
				return err
			}
		case err != nil:
			return err
		case recorded != strconv.Itoa(lanes) && s.lanesSet:
			return fmt.Errorf("%w: outbox %s was migrated with %s lanes, options ask for %d",
				core.ErrSchemaMismatch, s.n.outbox, recorded, s.o.Lanes)
		default: // the recorded count (perhaps changed by ResizeLanes) when Options.Lanes is 0
			n, err := strconv.Atoi(recorded)
			if err != nil || n < 1 || n > core.MaxLanes {
				return fmt.Errorf("%w: recorded lane count %q", core.ErrSchemaMismatch, recorded)
			}
			lanes = n
		}
		// Partitioning is decided at the first migration, and never changes.
		want := "none"
		if s.o.Partitioning != nil {
			want = "interval=" + s.o.Partitioning.Interval.String()
		}
		err = queryRow(ctx, q, s.q.metaGet, metaGetParams{Name: "partitioning"}.args(), &recorded)
		switch {
		case errors.Is(err, errNoRows):
			var done string
			err := queryRow(ctx, q, s.q.metaGet, metaGetParams{Name: "migration:0001_outbox"}.args(), &done)
			switch {
			case err == nil: // migrated before this option existed: a plain table
				if want != "none" {
					return fmt.Errorf("%w: outbox %s is not partitioned, options ask for partitioning",
						core.ErrSchemaMismatch, s.n.outbox)
				}
			case !errors.Is(err, errNoRows):
				return err
			}
			if _, err := q.exec(ctx, s.q.metaPut, metaPutParams{Name: "partitioning", Value: want}.args()...); err != nil {
				return err
			}
		case err != nil:
			return err
		case recorded != want:
			return fmt.Errorf("%w: outbox %s was migrated with partitioning %q, options ask for %q",
				core.ErrSchemaMismatch, s.n.outbox, recorded, want)
		}
		inboxExists, err := s.checkInboxLayout(ctx, q)
		if err != nil {
			return err
		}
		created := false // the outbox is new: created by this migration
		for _, m := range s.q.migrations {
			var done string
			err := queryRow(ctx, q, s.q.metaGet, metaGetParams{Name: m.name}.args(), &done)
			if err == nil {
				continue
			}
			if !errors.Is(err, errNoRows) {
				return err
			}
			if err := s.runMigration(ctx, q, m); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			if _, err := q.exec(ctx, s.q.metaPut, metaPutParams{Name: m.name, Value: "applied"}.args()...); err != nil {
				return err
			}
			created = created || m.name == "migration:0001_outbox"
		}
		if created { // no relay of an earlier version ever ran on it
			if _, err := q.exec(ctx, s.q.dropLegacy); err != nil {
				return err
			}
		}
		if _, err := q.exec(ctx, s.q.lanesFill, lanesFillParams{Lanes: lanes}.args()...); err != nil {
			return err
		}
		var n int64
		if err := queryRow(ctx, q, s.q.laneCount, nil, &n); err != nil {
			return err
		}
		if n != int64(lanes) {
			return fmt.Errorf("%w: lanes table has %d rows, %d recorded", core.ErrSchemaMismatch, n, lanes)
		}
		if s.o.UniqueAggregateVersion {
			var exists bool
			idx := s.n.schema + "." + s.n.aggverIdx
			if err := queryRow(ctx, q, s.q.indexExists, indexExistsParams{Index: idx}.args(), &exists); err != nil {
				return err
			}
			if !exists {
				if _, err := q.exec(ctx, s.q.aggverIndex); err != nil {
					return err
				}
			}
		}
		return s.afterInboxMigration(ctx, q, inboxExists, s.partitioned())
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", classify(err))
	}
	s.checked.Store(true) // migration 0007 is applied
	return nil
}

// inboxPartitionedMigration, inboxMigration and inboxScopeMigration are the name prefixes (the
// inbox table follows) of the migrations that create a partitioned inbox, that create the
// inbox's tables and that add source and tenant to its key.
const (
	inboxPartitionedMigration = "migration:0002_inbox_partitioned:"
	inboxMigration            = "migration:0002_inbox:"
	inboxScopeMigration       = "migration:0009_inbox_scope:"
)

// MigrateInbox creates only the inbox's tables (processed messages, retention horizons, entity
// versions) and their index, for a consumer-only service: no outbox, lanes, publisher, audit or
// meta table. Like Migrate it runs in one transaction under Migrate's advisory lock and is
// idempotent (the tables are created IF NOT EXISTS, and an inbox of an earlier version gets
// source and tenant in its key, migration 0009, only when it lacks them), so it records
// nothing: the meta table that records migrations is the outbox's. Migrate, run later or
// earlier on the same schema, creates the inbox in the same way and records it; the inbox's
// rows stay. On an inbox-only schema core.NewInbox works and core.NewOutbox fails with a
// *core.NotMigratedError (core.ErrSchemaMismatch).
func (s *Store[TTx]) MigrateInbox(ctx context.Context) error {
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.exec(ctx, s.q.migrateLock, migrateLockParams{Key: s.n.migrateKey}.args()...); err != nil {
			return err
		}
		exists, err := s.checkInboxLayout(ctx, q)
		if err != nil {
			return err
		}
		for _, m := range s.q.migrations {
			if isInboxMigration(m.name) {
				if err := s.runMigration(ctx, q, m); err != nil {
					return err
				}
			}
		}
		var parts []ranges
		if r, ok := s.inboxRanges(); ok {
			parts = append(parts, r)
		}
		return s.afterInboxMigration(ctx, q, exists, parts)
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate inbox: %w", classify(err))
	}
	return nil
}

// isInboxMigration reports whether the migration named name is one of MigrateInbox's.
func isInboxMigration(name string) bool {
	for _, prefix := range []string{inboxPartitionedMigration, inboxMigration, inboxScopeMigration} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// inboxLayoutPrefix starts what a partitioned inbox records in its table's comment; its
// partitions' Interval follows.
const inboxLayoutPrefix = "outboxkit: partitioned by processed_at, interval "

// inboxLayout is what a partitioned inbox records in its table's comment ("" for a plain one).
func (s *Store[TTx]) inboxLayout() string {
	if s.o.InboxPartitioning == nil {
		return ""
	}
	return inboxLayoutPrefix + s.o.InboxPartitioning.Interval.String()
}

// inboxMigrated reads how the inbox was migrated (its kind and comment): whether it exists, and
// its partitioning (nil for a plain inbox; Ahead is the default). A partitioned inbox whose
// comment does not say how is an error wrapping core.ErrSchemaMismatch.
func (s *Store[TTx]) inboxMigrated(ctx context.Context, q querier) (bool, *Partitioning, error) {
	st, err := s.migrateStatements()
	if err != nil {
		return false, nil, err
	}
	var kind, comment string
	err = queryRow(ctx, q, st.Get("InboxLayout"), []any{s.n.inbox}, &kind, &comment)
	switch {
	case errors.Is(err, errNoRows):
		return false, nil, nil
	case err != nil:
		return false, nil, err
	case kind != "p":
		return true, nil, nil
	}
	rest, ok := strings.CutPrefix(comment, inboxLayoutPrefix)
	iv, perr := time.ParseDuration(rest)
	if !ok || perr != nil {
		return true, nil, fmt.Errorf("%w: inbox %s is partitioned but its comment %q does not say how (it was not migrated by outboxkit)",
			core.ErrSchemaMismatch, s.n.inbox, comment)
	}
	p, err := resolvePartitioning("InboxPartitioning", &Partitioning{Interval: iv})
	return true, p, err
}

// migratedInboxRanges returns the inbox's partitions: the options', or else as the inbox was
// migrated (inboxMigrated); ok is false for a plain inbox.
func (s *Store[TTx]) migratedInboxRanges(ctx context.Context, q querier) (ranges, bool, error) {
	if r, ok := s.inboxRanges(); ok {
		return r, true, nil
	}
	_, p, err := s.inboxMigrated(ctx, q)
	if err != nil || p == nil {
		return ranges{}, false, err
	}
	return ranges{parent: s.n.inbox, raw: s.n.rawInbox, Partitioning: *p}, true, nil
}

// checkInboxLayout reports whether the inbox exists, and returns an error wrapping
// core.ErrSchemaMismatch when it exists with another layout than the options ask for
// (Options.InboxPartitioning).
func (s *Store[TTx]) checkInboxLayout(ctx context.Context, q querier) (bool, error) {
	exists, p, err := s.inboxMigrated(ctx, q)
	if err != nil || !exists {
		return exists, err
	}
	want := s.o.InboxPartitioning
	switch {
	case p != nil && want == nil:
		return true, fmt.Errorf("%w: inbox %s is partitioned (interval %s), options ask for a plain table: set Options.InboxPartitioning as it was migrated",
			core.ErrSchemaMismatch, s.n.inbox, p.Interval)
	case p == nil && want != nil:
		return true, fmt.Errorf("%w: inbox %s is a plain table, options ask for Options.InboxPartitioning: an inbox is partitioned when it is first migrated (use another InboxTable, or leave InboxPartitioning nil)",
			core.ErrSchemaMismatch, s.n.inbox)
	case p != nil && p.Interval != want.Interval:
		return true, fmt.Errorf("%w: inbox %s was migrated with partitions of %s, options ask for %s",
			core.ErrSchemaMismatch, s.n.inbox, p.Interval, want.Interval)
	}
	return true, nil
}

// afterInboxMigration records the layout of a partitioned inbox the migration created
// (existed: it was there before) and creates the partitions of parts ahead.
func (s *Store[TTx]) afterInboxMigration(ctx context.Context, q querier, existed bool, parts []ranges) error {
	if layout := s.inboxLayout(); layout != "" && !existed {
		st, err := s.migrateStatements()
		if err != nil {
			return err
		}
		stmt, err := sqlfile.Idents{"value": sqlLiteral(layout)}.Expand(st.Get("InboxComment"))
		if err != nil {
			return err
		}
		if _, err := q.exec(ctx, stmt); err != nil {
			return err
		}
	}
	for _, r := range parts {
		if err := s.ensurePartitions(ctx, q, r); err != nil {
			return err
		}
	}
	return nil
}

// runMigration runs m in q (no arguments: simple protocol, many statements), except migration
// 0009 on an inbox whose key holds source and tenant already (MigrateInbox, which records
// nothing, or InboxMigrationSQL scoped it): the inbox's primary key is rebuilt once, not at
// every Migrate or MigrateInbox.
func (s *Store[TTx]) runMigration(ctx context.Context, q querier, m migration) error {
	if strings.HasPrefix(m.name, inboxScopeMigration) {
		if scoped, err := s.inboxScoped(ctx, q); err != nil || scoped {
			return err
		}
	}
	_, err := q.exec(ctx, m.sql)
	return err
}

// inboxScoped reports whether the inbox has the columns of migration 0009.
func (s *Store[TTx]) inboxScoped(ctx context.Context, q querier) (bool, error) {
	st, err := s.migrateStatements()
	if err != nil {
		return false, err
	}
	var n int64
	err = queryRow(ctx, q, st.Get("InboxScoped"), []any{s.n.inbox}, &n)
	return n > 0, err
}

// MigrationSQL returns, as one plain SQL script, what Migrate does to an empty schema with opts
// (opts.Schema must exist): the embedded migrations with the identifiers of opts, and the rows
// Migrate records (lane count, applied migrations, lane rows), so that Migrate with the same
// options then finds the outbox current and changes nothing. It is for teams whose schema
// changes go through their own tool (goose, atlas, golang-migrate): the script takes no
// parameters, holds no transaction control (run it in one transaction) and needs no database to
// be built. A partitioned outbox (opts.Partitioning) is refused with a *core.OptionError: its
// partitions depend on the time of migration, use Migrate.
func MigrationSQL(opts *Options) (string, error) {
	o, n, err := opts.resolve()
	if err != nil {
		return "", err
	}
	if o.Partitioning != nil {
		return "", &core.OptionError{Field: "Partitioning", Reason: "MigrationSQL does not create partitions; use Migrate"}
	}
	if o.InboxPartitioning != nil {
		return "", &core.OptionError{Field: "InboxPartitioning", Reason: "MigrationSQL does not create partitions; use Migrate"}
	}
	q, err := buildQueries(n, false, false)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit PostgreSQL migrations: outbox %s, inbox %s, %d lanes.\n-- Run in one transaction.\n\n", n.outbox, n.inbox, o.Lanes)
	add := func(stmt string) {
		b.WriteString(strings.TrimRight(strings.TrimSpace(stmt), ";"))
		b.WriteString(";\n\n")
	}
	put := func(key, value string) error {
		stmt, err := sqlfile.Idents{"key": sqlLiteral(key), "value": sqlLiteral(value)}.Expand(q.scriptMetaPut)
		if err == nil {
			add(stmt)
		}
		return err
	}
	add(q.metaTable)
	if err := put("lanes", strconv.Itoa(o.Lanes)); err != nil {
		return "", err
	}
	if err := put("partitioning", "none"); err != nil {
		return "", err
	}
	for _, m := range q.migrations {
		add(m.sql)
		if err := put(m.name, "applied"); err != nil {
			return "", err
		}
	}
	add(q.dropLegacy) // a new outbox
	lanes, err := sqlfile.Idents{"value": strconv.Itoa(o.Lanes)}.Expand(q.scriptLanesFill)
	if err != nil {
		return "", err
	}
	add(lanes)
	if o.UniqueAggregateVersion {
		add(q.aggverIndex)
	}
	return b.String(), nil
}

// InboxMigrationSQL returns, as one plain SQL script, what MigrateInbox does to an empty schema
// with opts (opts.Schema must exist): the inbox's tables (processed messages, retention
// horizons, entity versions) and their index, with the identifiers of opts, then source and
// tenant in the inbox's key (migration 0009); no outbox, lanes, publisher, audit or meta table.
// It is MigrationSQL for a consumer-only service whose schema changes go through its own tool.
// Its tables are created IF NOT EXISTS and migration 0009 adds its columns IF NOT EXISTS and
// rebuilds the primary key, so it also upgrades an inbox of an earlier version, keeping its
// rows; MigrateInbox or Migrate run afterwards find the inbox current. Only opts' identifiers
// are read.
func InboxMigrationSQL(opts *Options) (string, error) {
	o, n, err := opts.resolve()
	if err != nil {
		return "", err
	}
	if o.InboxPartitioning != nil {
		return "", &core.OptionError{Field: "InboxPartitioning", Reason: "InboxMigrationSQL does not create partitions; use MigrateInbox"}
	}
	q, err := buildQueries(n, false, false)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- outboxkit PostgreSQL inbox migration: inbox %s, no outbox tables.\n-- Run in one transaction.\n", n.inbox)
	for _, prefix := range []string{inboxMigration, inboxScopeMigration} {
		for _, m := range q.migrations {
			if strings.HasPrefix(m.name, prefix) {
				fmt.Fprintf(&b, "\n%s;\n", strings.TrimRight(strings.TrimSpace(m.sql), ";"))
			}
		}
	}
	return b.String(), nil
}

// sqlLiteral quotes s as a string literal (standard_conforming_strings, the default since 9.1).
func sqlLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// withTx runs fn in a transaction of the store's pool or database.
func (s *Store[TTx]) withTx(ctx context.Context, fn func(ctx context.Context, q querier) error) error {
	return s.inTx(ctx, func(ctx context.Context, tx TTx) error { return fn(ctx, s.txq(tx)) })
}

//go:embed migrate.sql
var migrateSQL embed.FS

// migrateStatements returns the statements of migrate.sql with the store's identifiers.
func (s *Store[TTx]) migrateStatements() (*sqlfile.Statements, error) {
	st, err := sqlfile.Load(migrateSQL, "migrate.sql", s.n.idents())
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return st, nil
}

// CheckInbox implements driver.InboxStore: nil when the inbox's tables exist with the key of
// this version, otherwise a *core.NotMigratedError (run Migrate or MigrateInbox).
func (s *Store[TTx]) CheckInbox(ctx context.Context) error {
	st, err := s.migrateStatements()
	if err != nil {
		return err
	}
	var n int64
	if err := queryRow(ctx, s.db, st.Get("CheckInbox"), nil, &n); err != nil {
		return fmt.Errorf("postgres: check inbox: %w", classify(err))
	}
	scoped, err := s.inboxScoped(ctx, s.db)
	if err != nil {
		return fmt.Errorf("postgres: check inbox: %w", classify(err))
	}
	if _, err := s.checkInboxLayout(ctx, s.db); err != nil {
		return fmt.Errorf("postgres: check inbox: %w", classify(err))
	}
	if !scoped {
		return fmt.Errorf("postgres: check inbox: %w", &core.NotMigratedError{
			Missing: "inbox " + s.n.inbox + " has no source and tenant in its key (migration 0009)"})
	}
	return nil
}
