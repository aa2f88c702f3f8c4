package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
)

// markRoom returns how many outbox rows have mark_room 0 and how many NULL.
func markRoom(t *testing.T, db *sql.DB) (zero, null int) {
	t.Helper()
	require.NoError(t, db.QueryRow(`SELECT COALESCE(SUM(mark_room = 0), 0), COALESCE(SUM(mark_room IS NULL), 0) FROM outbox`).Scan(&zero, &null))
	return zero, null
}

// writeAndMark writes n events and marks the first k published (delete: deletes them).
func writeAndMark(t *testing.T, s *mysql.Store, n, k int, del bool) {
	t.Helper()
	ctx := context.Background()
	leases, seqs := writeAndFetch(t, s, "w", n, k)
	require.NoError(t, s.Settle(ctx, core.SettleParams{Leases: leases, Published: seqs, Delete: del}))
	require.NoError(t, s.ReleaseLanes(ctx, leases))
}

// The outbox's mark_room column (migration 001) is 0 while a row is unpublished and NULL once
// it is published, so that a mark does not grow the row. An outbox created without it (before
// the column existed) still marks and deletes, Migrate leaves it as it is, and the ALTER TABLE
// of the migration's comment adds the column to it with the right values.
func TestMarkRoom(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	db := s.DB()
	writeAndMark(t, s, 10, 4, false)
	zero, null := markRoom(t, db)
	require.Equal(t, 6, zero, "unpublished rows")
	require.Equal(t, 4, null, "published rows")

	old := newStore(t, nil)
	odb := old.DB()
	_, err := odb.Exec(`ALTER TABLE outbox DROP COLUMN mark_room`)
	require.NoError(t, err)
	writeAndMark(t, old, 10, 4, false)
	writeAndMark(t, old, 10, 3, true)
	require.NoError(t, old.Migrate(context.Background()))
	var cols int
	require.NoError(t, odb.QueryRow(`SELECT COUNT(*) FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox' AND COLUMN_NAME = 'mark_room'`).Scan(&cols))
	require.Zero(t, cols, "Migrate does not rebuild an existing outbox")
	st, err := old.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Published)
	require.Equal(t, int64(13), st.Pending)

	_, err = odb.Exec(`ALTER TABLE outbox ADD COLUMN mark_room BIGINT AS (IF(published_at IS NULL, 0, NULL)) STORED`)
	require.NoError(t, err)
	zero, null = markRoom(t, odb)
	require.Equal(t, 13, zero, "unpublished rows")
	require.Equal(t, 4, null, "published rows")
}
