package main

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
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
