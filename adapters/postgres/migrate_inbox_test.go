package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// relations lists the schema's relations (tables, indexes, sequences, views) and functions.
func relations(t *testing.T, d *testDB) []string {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		UNION ALL
		SELECT p.proname || '()' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`, d.schema)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestMigrateInboxOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	s, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	testkit.RequireInboxOnlyMigration[pgx.Tx](t, s, testkit.InboxOnlyCase{
		Objects: func() []string { return relations(t, d) },
		Want:    []string{"inbox", "inbox_horizons", "inbox_versions"},
		Prefix:  "postgres: lane count: database not migrated (",
		Full: func() { // Migrate recorded the inbox's migration
			var recorded int
			require.NoError(t, d.pool.QueryRow(ctx, "SELECT count(*) FROM outbox_meta WHERE name = 'migration:0002_inbox:inbox'").Scan(&recorded))
			require.Equal(t, 1, recorded)
		},
	})
}

func TestMigrateInboxAfterMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, nil)
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, testkit.ProcessOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, testkit.ProcessOnce(t, in, "e1", 1))
	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
}
