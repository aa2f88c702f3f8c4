package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

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
	require.Equal(t, 1, strings.Count(msg, "postgres:"), "%q", msg)
	require.NotContains(t, msg, "schema mismatch", "%q", msg)
}

func TestUnmigratedErrorsSayWhatToDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t, dbOptions{})
	s, err := New(db.pool, &Options{Schema: db.schema})
	require.NoError(t, err)

	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	checkNotMigrated(t, err, "postgres: lane count: database not migrated (")
	_, err = core.NewInbox[pgx.Tx](ctx, s, nil)
	checkNotMigrated(t, err, "postgres: check inbox: database not migrated (")
}
