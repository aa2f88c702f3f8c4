package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// objects lists the database's tables, triggers and routines.
func objects(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testkit.Strings(t, db, `
		SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()
		UNION ALL SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE()
		UNION ALL SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()`)
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
	inbox := []string{"inbox", "inbox_horizons", "inbox_versions"}
	testkit.RequireInboxOnlyMigration[*sql.Tx](t, s, testkit.InboxOnlyCase{
		Objects: func() []string { return objects(t, db) },
		Want:    inbox,
		Prefix:  "mysql: lane count: database not migrated (",
		InboxOnly: func() {
			require.ElementsMatch(t, inbox, objects(t, db))
			for _, table := range inbox {
				require.Zero(t, tableTextColumns(t, db, table), table) // compared as bytes, as after Migrate
			}
		},
		Full: func() { require.Zero(t, tableTextColumns(t, db, "outbox")) },
	})
}

func TestMigrateInboxAfterMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, nil)
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, testkit.ProcessOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, testkit.ProcessOnce(t, in, "e1", 1))
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
