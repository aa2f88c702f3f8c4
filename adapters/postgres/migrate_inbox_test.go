package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

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

// TestInboxScopeUpgrade: an inbox of an earlier version (migration 0002 alone) holding a
// processed message and an entity version is refused by core.NewInbox as not migrated; after
// MigrateInbox (then again, and Migrate: neither rebuilds the key a second time) or Migrate, the message's redelivery is still a
// Duplicate, the entity's version still gates, and tenant A's message with the same event ID
// is a record of its own.
func TestInboxScopeUpgrade(t *testing.T) {
	for _, how := range []string{"MigrateInbox", "Migrate"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := newTestDB(t, dbOptions{})
			s, err := New(d.pool, &Options{Schema: d.schema})
			require.NoError(t, err)
			var old string
			for _, m := range s.q.migrations {
				if strings.HasPrefix(m.name, inboxMigration) {
					old = m.sql
				}
			}
			_, err = d.pool.Exec(ctx, old, pgx.QueryExecModeSimpleProtocol)
			require.NoError(t, err)
			_, err = d.pool.Exec(ctx, `INSERT INTO inbox (consumer, event_id, digest, outcome, occurred_at) VALUES ('c', 'e1', sha256('e1'::bytea), 1, now());
				INSERT INTO inbox_versions (consumer, entity, version) VALUES ('c', 'a/1', 1)`, pgx.QueryExecModeSimpleProtocol)
			require.NoError(t, err)

			_, err = core.NewInbox[pgx.Tx](ctx, s, nil)
			require.ErrorIs(t, err, core.ErrSchemaMismatch)
			require.ErrorContains(t, err, "migration 0009")

			if how == "Migrate" {
				require.NoError(t, s.Migrate(ctx))
			} else {
				require.NoError(t, s.MigrateInbox(ctx))
				pkey := func() (oid uint32) {
					require.NoError(t, d.pool.QueryRow(ctx, `SELECT conindid FROM pg_constraint WHERE conrelid = 'inbox'::regclass AND contype = 'p'`).Scan(&oid))
					return oid
				}
				before := pkey()
				require.NoError(t, s.MigrateInbox(ctx))
				require.NoError(t, s.Migrate(ctx))
				require.Equal(t, before, pkey(), "MigrateInbox and Migrate after it leave the scoped key as it is (no second rebuild)")
			}
			in, err := core.NewInbox[pgx.Tx](ctx, s, nil)
			require.NoError(t, err)
			require.Equal(t, core.Duplicate, testkit.ProcessOnce(t, in, "e1", 0))
			require.Equal(t, core.Stale, testkit.ProcessOnce(t, in, "e2", 1))
			res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Payload: []byte("tenant A's"), Tenant: "A", OccurredAt: time.Now()},
				func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
			require.NoError(t, err)
			require.Equal(t, core.Applied, res.Outcome)
		})
	}
}
