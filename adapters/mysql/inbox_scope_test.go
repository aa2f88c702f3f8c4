package mysql_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The inbox key is (consumer, source, tenant, event ID) since migration 011. These tests check
// the upgrade of an inbox that an earlier version migrated and filled, by Migrate and by
// MigrateInbox, and that pruning by consumer (all sources and tenants) deletes exactly the
// records it names.

const scopeMigration = "migrations/011_inbox_scope.sql"

// writeEarlierRecord writes consumer's record of eventID (payload's digest, outcome Applied, no
// time) and the entity's version as the earlier version's InsertRecord and SetVersion did: no
// source or tenant column.
func writeEarlierRecord(t *testing.T, db *sql.DB, consumer, eventID, payload, entity string, version int64) {
	t.Helper()
	digest := sha256.Sum256([]byte(payload))
	_, err := db.Exec(`INSERT INTO inbox (consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
		VALUES (?, ?, ?, '', ?, NULL, UTC_TIMESTAMP(6))`, consumer, eventID, digest[:], int(core.Applied))
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO inbox_versions (consumer, entity, version) VALUES (?, ?, ?)`, consumer, entity, version)
	require.NoError(t, err)
}

// requireNotMigratedScope checks that s refuses the earlier inbox as not migrated, naming
// migration 011, at CheckInbox and so at core.NewInbox.
func requireNotMigratedScope(t *testing.T, s *mysql.Store) {
	t.Helper()
	err := s.CheckInbox(t.Context())
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.ErrorIs(t, err, core.ErrNotMigrated)
	var nm *core.NotMigratedError
	require.ErrorAs(t, err, &nm)
	require.Contains(t, err.Error(), "011_inbox_scope")
	require.Contains(t, err.Error(), "source and tenant")
	_, err = core.NewInbox[*sql.Tx](t.Context(), s, nil)
	require.ErrorIs(t, err, core.ErrNotMigrated)
}

// inboxKey returns the inbox table's primary key columns in order.
func inboxKey(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testkit.Strings(t, db, `SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'inbox' AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX`)
}

// requireScopedInbox checks, on an inbox migrated from the earlier version's with writeEarlierRecord
// (consumer "c", event "e1", payload "p1", entity "order/1" at version 5), that the old record is
// its redelivery's (no source, no tenant): a Duplicate; that tenant A's message with the same ID
// and payload, and a message from a source, are new; and that the old version still gates
// messages without tenant while tenant A's versions are its own.
func requireScopedInbox(t *testing.T, s *mysql.Store, db *sql.DB) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, s.CheckInbox(ctx))
	require.Equal(t, []string{"consumer", "event_id", "source", "tenant"}, inboxKey(t, db))
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	var calls atomic.Int64
	process := func(in *core.Inbox[*sql.Tx], m core.InboxMessage) core.InboxResult {
		t.Helper()
		res, err := in.Process(ctx, "c", m, func(context.Context, *sql.Tx, core.InboxMessage) error {
			calls.Add(1)
			return nil
		})
		require.NoError(t, err)
		return res
	}
	p1 := []byte("p1")
	require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, process(in, core.InboxMessage{EventID: "e1", Payload: p1}),
		"a redelivery of a message processed before the migration")
	require.Zero(t, calls.Load())
	require.Equal(t, core.InboxResult{Outcome: core.Applied}, process(in, core.InboxMessage{EventID: "e1", Payload: p1, Tenant: "A"}),
		"tenant A's message with the same event ID")
	require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, process(in, core.InboxMessage{EventID: "e1", Payload: p1, Tenant: "A"}))
	require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, process(in, core.InboxMessage{EventID: "e1", Payload: p1}))
	require.Equal(t, core.InboxResult{Outcome: core.Stale}, process(in, core.InboxMessage{EventID: "e2", Payload: p1, Entity: "order/1", Version: 4}),
		"the version written before the migration")
	require.Equal(t, core.InboxResult{Outcome: core.Applied}, process(in, core.InboxMessage{EventID: "e3", Payload: p1, Entity: "order/1", Version: 1, Tenant: "A"}),
		"tenant A's versions are its own")
	src, err := core.NewInbox[*sql.Tx](ctx, s, &core.InboxOptions{Source: "queue-2"})
	require.NoError(t, err)
	require.Equal(t, core.InboxResult{Outcome: core.Applied}, process(src, core.InboxMessage{EventID: "e1", Payload: p1}), "another source")
	require.Equal(t, int64(3), calls.Load())

	// reconcile's reader: the record without source and tenant of the shared event ID.
	recs, err := s.InboxRecords(ctx, "c", []string{"e1", "e3", "absent"})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "", recs["e1"].Source)
	require.Equal(t, "", recs["e1"].Tenant)
	require.Equal(t, sha256.Sum256(p1), recs["e1"].Digest)
	require.Equal(t, "A", recs["e3"].Tenant)
	require.Equal(t, "e3", recs["e3"].EventID)
}

// Migrate upgrades an inbox that the earlier version's Migrate created and filled: CheckInbox
// refused it before, and after the migration the old record is the key it was.
func TestMigrateInboxScopeOnEarlierDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, _ := newDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.MigrateBefore(ctx, scopeMigration))
	require.Equal(t, []string{"consumer", "event_id"}, inboxKey(t, db), "the earlier key")
	writeEarlierRecord(t, db, "c", "e1", "p1", "order/1", 5)
	requireNotMigratedScope(t, s)

	require.NoError(t, s.Migrate(ctx))
	requireScopedInbox(t, s, db)
	var source, tenant []byte
	require.NoError(t, db.QueryRow(`SELECT source, tenant FROM inbox WHERE consumer = 'c' AND event_id = 'e1' ORDER BY source, tenant LIMIT 1`).Scan(&source, &tenant))
	require.Empty(t, source)
	require.Empty(t, tenant)

	require.NoError(t, s.Migrate(ctx), "again: nothing to do")
	require.NoError(t, s.MigrateInbox(ctx), "MigrateInbox finds the inbox current")
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Payload: []byte("p1")}, func(context.Context, *sql.Tx, core.InboxMessage) error {
		return errors.New("must not run")
	})
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
}

// MigrateInbox upgrades an inbox-only database of the earlier version, creating no outbox table.
func TestMigrateInboxScopeInboxOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, _ := newDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.MigrateInboxBefore(ctx, scopeMigration))
	inbox := []string{"inbox", "inbox_horizons", "inbox_versions"}
	require.ElementsMatch(t, inbox, objects(t, db))
	writeEarlierRecord(t, db, "c", "e1", "p1", "order/1", 5)
	requireNotMigratedScope(t, s)

	require.NoError(t, s.MigrateInbox(ctx))
	require.ElementsMatch(t, inbox, objects(t, db), "still no outbox table")
	requireScopedInbox(t, s, db)
	require.NoError(t, s.MigrateInbox(ctx), "again: nothing to do")
	require.NoError(t, s.Migrate(ctx), "Migrate later keeps the inbox")
	require.Equal(t, []string{"consumer", "event_id", "source", "tenant"}, inboxKey(t, db))
}

// InboxMigrationSQL's script (for an empty database) creates the scoped inbox, and MigrateInbox
// and Migrate run afterwards find it current.
func TestInboxMigrationSQLScope(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, _ := newDB(t)
	script, err := mysql.InboxMigrationSQL(nil)
	require.NoError(t, err)
	require.Contains(t, script, "ADD PRIMARY KEY (consumer, event_id, source, tenant)")
	runScript(t, db, script)
	require.Equal(t, []string{"consumer", "event_id", "source", "tenant"}, inboxKey(t, db))
	s, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.CheckInbox(ctx))
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.Migrate(ctx))
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	for _, tenant := range []string{"", "A", "B"} {
		res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Payload: []byte(tenant), Tenant: tenant},
			func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome, "tenant %q", tenant)
	}
}

// PruneInbox deletes the records of every source and tenant, exactly limit of them at most even
// when several share an event ID, and a record of another tenant with the same event ID,
// inserted by a delivery whose handler is still running, neither holds it up nor is deleted.
func TestPruneInboxScopes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil)
	old := time.Now().Add(-time.Hour)
	nop := func(context.Context, *sql.Tx, core.InboxMessage) error { return nil }
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	src, err := core.NewInbox[*sql.Tx](ctx, s, &core.InboxOptions{Source: "q"})
	require.NoError(t, err)
	for _, x := range []struct {
		in     *core.Inbox[*sql.Tx]
		tenant string
	}{{in, ""}, {in, "A"}, {src, "A"}} {
		res, err := x.in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Tenant: x.tenant, OccurredAt: old}, nop)
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome)
	}

	// Tenant B's delivery of e1 is in progress: its record is inserted, its handler runs.
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Tenant: "B", OccurredAt: time.Now()},
			func(context.Context, *sql.Tx, core.InboxMessage) error {
				close(started)
				<-release
				return nil
			})
		if err == nil && res.Outcome != core.Applied {
			err = errors.New("tenant B's delivery: " + res.Outcome.String())
		}
		done <- err
	}()
	<-started
	before := time.Now().Add(-time.Minute)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for range 3 {
		n, err := s.PruneInbox(pctx, "c", before, 1)
		require.NoError(t, err, "a delivery in progress of another tenant holds no prune up")
		require.Equal(t, 1, n, "limit 1: one record, though three share the event ID")
	}
	n, err := s.PruneInbox(pctx, "c", before, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	close(release)
	require.NoError(t, <-done)

	recs, err := s.InboxRecords(ctx, "c", []string{"e1"})
	require.NoError(t, err)
	require.Equal(t, "B", recs["e1"].Tenant, "only tenant B's record is left")
	_, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Tenant: "A", OccurredAt: old}, nop)
	require.ErrorIs(t, err, core.ErrBeyondRetention)
}
