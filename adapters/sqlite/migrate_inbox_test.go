package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// schemaObjects lists the database's tables, indexes and triggers.
func schemaObjects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testkit.Strings(t, db, "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
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
	path := filepath.Join(t.TempDir(), "inbox.db")
	db := plainDB(t, path)
	s, err := sqlite.New(db, nil)
	require.NoError(t, err)
	testkit.RequireInboxOnlyMigration[*sql.Tx](t, s, testkit.InboxOnlyCase{
		Objects:   func() []string { return schemaObjects(t, db) },
		Want:      []string{"inbox", "inbox_horizons", "inbox_versions", "inbox_migrations"},
		Prefix:    "sqlite: lane count: database not migrated (",
		InboxOnly: func() { inTxLocked(t, s, path) }, // the single-writer rule holds without the outbox's meta table
		Full:      func() { inTxLocked(t, s, path) },
	})
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
	require.Equal(t, core.Applied, testkit.ProcessOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, testkit.ProcessOnce(t, in, "e1", 1))
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)

	// A store whose inbox was never migrated (a producer's, say) still takes the write lock in
	// InTx: on the outbox's meta table.
	other, err := sqlite.New(db, &sqlite.Options{InboxTable: "other"})
	require.NoError(t, err)
	inTxLocked(t, other, path)
}
