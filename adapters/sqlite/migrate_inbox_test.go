package sqlite_test

import (
	"context"
	"database/sql"
	"github.com/outboxkit/outbox/internal/testkit"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// schemaObjects lists the database's tables, indexes and triggers.
func schemaObjects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// processOnce records one message of consumer "c" and returns its outcome.
func processOnce(t *testing.T, in *core.Inbox[*sql.Tx], id string, version int64) core.Outcome {
	t.Helper()
	res, err := in.Process(context.Background(), "c", core.InboxMessage{EventID: id, Payload: []byte(id), Entity: "a/1", Version: version, OccurredAt: time.Now()},
		func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	return res.Outcome
}

// plainDB opens path without _txlock=immediate: only the adapter's lock statement takes the
// write lock at the start of its transactions.
func plainDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// inTxLocked asserts that s.InTx holds the write lock from its start.
func inTxLocked(t *testing.T, s *sqlite.Store, path string) {
	t.Helper()
	err := s.InTx(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		require.True(t, writeLocked(t, path), "InTx must hold the write lock from its start")
		return nil
	})
	require.NoError(t, err)
}

func TestMigrateInboxOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "inbox.db")
	db := plainDB(t, path)
	s, err := sqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.MigrateInbox(ctx)) // idempotent

	got := schemaObjects(t, db)
	for _, name := range got {
		require.False(t, strings.HasPrefix(name, "outbox"), "MigrateInbox created %s (all: %v)", name, got)
	}
	require.Subset(t, got, []string{"inbox", "inbox_horizons", "inbox_versions", "inbox_migrations"})

	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	inTxLocked(t, s, path) // the single-writer rule holds without the outbox's meta table
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)

	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	testkit.RequireNotMigrated(t, err, "sqlite: lane count: database not migrated (")

	// The full migration later finds the inbox's versions recorded and keeps its rows.
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Stale, processOnce(t, in, "e0", 1)) // the entity version survived too
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	inTxLocked(t, s, path)
}

func TestMigrateInboxAfterMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "full.db")
	db := plainDB(t, path)
	s, err := sqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)

	// A store whose inbox was never migrated (a producer's, say) still takes the write lock in
	// InTx: on the outbox's meta table.
	other, err := sqlite.New(db, &sqlite.Options{InboxTable: "other"})
	require.NoError(t, err)
	inTxLocked(t, other, path)
}
