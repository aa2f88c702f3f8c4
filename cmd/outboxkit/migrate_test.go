package main

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
)

func TestMigrateInboxOnlyFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "consumer.db")
	require.Contains(t, ok(t, "migrate", "--inbox-only", "--db", "sqlite:"+path), "migrated inbox")
	db, err := sql.Open(sqlite.DriverName, path)
	require.NoError(t, err)
	defer db.Close()
	var outbox, inbox int
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name LIKE 'outbox%'").Scan(&outbox))
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'inbox'").Scan(&inbox))
	require.Zero(t, outbox)
	require.Equal(t, 1, inbox)
	require.Contains(t, ok(t, "migrate", "--db", "sqlite:"+path), "migrated lanes=")
	require.NoError(t, db.QueryRow("SELECT count(*) FROM sqlite_master WHERE name = 'outbox'").Scan(&outbox))
	require.Equal(t, 1, outbox)
}

// `migrate sql --inbox-only` for each dialect, applied as one script to an empty database,
// creates the inbox's tables and no outbox table; the inbox's schema check passes on it,
// `migrate --inbox-only` then finds it current, and a later `migrate` adds the outbox.
func TestMigrateSQLInboxOnly(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			args := []string{"migrate", "sql", "--dialect", d.driver, "--inbox-only"}
			if d.driver == "postgres" {
				args = append(args, "--schema", d.cfg.Schema)
			}
			script := ok(t, args...)
			require.NotContains(t, script, "{{")
			d.exec(t, script)
			tables := d.tables(t)
			for _, tb := range tables {
				require.True(t, strings.HasPrefix(tb, "inbox"), "only the inbox's tables: %v", tables)
			}
			require.Subset(t, tables, []string{"inbox", "inbox_horizons", "inbox_versions"})

			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			check, isInbox := db.Store.(interface{ CheckInbox(context.Context) error })
			require.True(t, isInbox, "%T", db.Store)
			require.NoError(t, check.CheckInbox(t.Context()))
			_, err = db.Store.LaneCount(t.Context())
			require.ErrorIs(t, err, core.ErrSchemaMismatch, "no outbox")

			require.Contains(t, ok(t, append([]string{"migrate", "--inbox-only"}, d.flags...)...), "migrated inbox")
			require.Equal(t, tables, d.tables(t), "migrate --inbox-only found the script's inbox current")
			require.Contains(t, ok(t, append([]string{"migrate"}, d.flags...)...), "migrated lanes=")
			require.Contains(t, d.tables(t), "outbox")
			require.NoError(t, check.CheckInbox(t.Context()))
		})
	}
	fails(t, 2, "--inbox-only", "migrate", "sql", "--dialect", "sqlite", "--inbox-only", "--lanes", "4")
}
