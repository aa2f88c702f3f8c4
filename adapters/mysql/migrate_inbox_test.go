package mysql_test

import (
	"context"
	"database/sql"
	"github.com/outboxkit/outbox/internal/testkit"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
)

// objects lists the database's tables, triggers and routines.
func objects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`
		SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
		UNION ALL SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
		UNION ALL SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()`)
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

// tableTextColumns counts the columns of table that still have a character set among those
// migration 009 converts.
func tableTextColumns(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND CHARACTER_SET_NAME IS NOT NULL
		AND COLUMN_NAME IN ('consumer', 'entity', 'aggregate_id', 'owner')`, table).Scan(&n))
	return n
}

func TestMigrateInboxOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.MigrateInbox(ctx)) // idempotent

	got := objects(t, db)
	for _, name := range got {
		require.False(t, strings.HasPrefix(name, "outbox"), "MigrateInbox created %s (all: %v)", name, got)
	}
	require.ElementsMatch(t, []string{"inbox", "inbox_horizons", "inbox_versions"}, got)
	for _, table := range []string{"inbox", "inbox_horizons", "inbox_versions"} {
		require.Zero(t, tableTextColumns(t, db, table), table) // compared as bytes, as after Migrate
	}

	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)

	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	testkit.RequireNotMigrated(t, err, "mysql: lane count: database not migrated (")

	// The full migration later creates the outbox and keeps the inbox's rows.
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.Migrate(ctx))
	require.Zero(t, tableTextColumns(t, db, "outbox"))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Stale, processOnce(t, in, "e0", 1)) // the entity version survived too
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
}

func TestMigrateInboxAfterMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, nil)
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
}

// An inbox an earlier version migrated (before 009): MigrateInbox converts only the inbox's text.
func TestMigrateInboxConvertsEarlierInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.MigrateBefore(ctx, "migrations/009_binary_text.sql"))
	require.NotZero(t, tableTextColumns(t, db, "inbox_versions"))
	require.NoError(t, s.MigrateInbox(ctx))
	for _, table := range []string{"inbox", "inbox_horizons", "inbox_versions"} {
		require.Zero(t, tableTextColumns(t, db, table), table)
	}
	require.NotZero(t, tableTextColumns(t, db, "outbox")) // the outbox is Migrate's
	require.NoError(t, s.Migrate(ctx))
	require.Zero(t, tableTextColumns(t, db, "outbox"))
}
