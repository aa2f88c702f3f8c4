package postgres

import (
	"context"
	"github.com/outboxkit/outbox/internal/testkit"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
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

// processOnce records one message of consumer "c" and returns its outcome.
func processOnce(t *testing.T, in *core.Inbox[pgx.Tx], id string, version int64) core.Outcome {
	t.Helper()
	res, err := in.Process(context.Background(), "c", core.InboxMessage{EventID: id, Payload: []byte(id), Entity: "a/1", Version: version, OccurredAt: time.Now()},
		func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	return res.Outcome
}

func TestMigrateInboxOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	s, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.MigrateInbox(ctx)) // idempotent

	got := relations(t, d)
	for _, name := range got {
		require.False(t, strings.HasPrefix(name, "outbox"), "MigrateInbox created %s (all: %v)", name, got)
	}
	require.Subset(t, got, []string{"inbox", "inbox_horizons", "inbox_versions"})

	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)

	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	testkit.RequireNotMigrated(t, err, "postgres: lane count: database not migrated (")

	// The full migration later: it records the inbox, creates the outbox, keeps the inbox's rows.
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	require.Equal(t, core.Stale, processOnce(t, in, "e0", 1)) // the entity version survived too
	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
	var recorded int
	require.NoError(t, d.pool.QueryRow(ctx, "SELECT count(*) FROM outbox_meta WHERE name = 'migration:0002_inbox:inbox'").Scan(&recorded))
	require.Equal(t, 1, recorded)
}

func TestMigrateInboxAfterMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, nil)
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	require.Equal(t, core.Applied, processOnce(t, in, "e1", 1))
	require.NoError(t, s.MigrateInbox(ctx))
	require.Equal(t, core.Duplicate, processOnce(t, in, "e1", 1))
	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
}
