package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// checkNotMigrated asserts the one rule of an unmigrated database's error: it is a schema
// mismatch, says "not migrated" once with the remedy, and repeats no prefix.
func checkNotMigrated(t *testing.T, err error, prefix string) {
	t.Helper()
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.ErrorIs(t, err, core.ErrNotMigrated)
	_, ok := errors.AsType[*core.NotMigratedError](err)
	require.True(t, ok, "%v", err)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, prefix), "%q", msg)
	require.Contains(t, msg, "Migrate")
	require.Contains(t, msg, "migrate: true")
	require.Contains(t, msg, "outboxkit migrate")
	require.Equal(t, 1, strings.Count(msg, "not migrated"), "%q", msg)
	require.Equal(t, 1, strings.Count(msg, "sqlite:"), "%q", msg)
	require.NotContains(t, msg, "schema mismatch", "%q", msg)
}

// emptyStore returns a store on a new, unmigrated database file.
func emptyStore(t *testing.T) *sqlite.Store {
	t.Helper()
	db, err := sqlite.OpenDB(context.Background(), filepath.Join(t.TempDir(), "empty.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, nil)
	require.NoError(t, err)
	return s
}

func TestUnmigratedErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emptyStore(t)
	_, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	checkNotMigrated(t, err, "sqlite: lane count: database not migrated (")
	_, err = core.NewInbox[*sql.Tx](ctx, s, nil)
	checkNotMigrated(t, err, "sqlite: check inbox: database not migrated (")
}
