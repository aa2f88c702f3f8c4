package mysql_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core/driver"
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
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs, Delete: del}))
	require.NoError(t, s.ReleaseLanes(ctx, leases))
}

// The outbox's mark_room column (migration 001) is 0 while a row has no published_at and NULL
// once it has one, so that a mark of the earlier layout did not grow the row. Since the pending
// layout (migration 010) a mark no longer changes the outbox row: mark_room stays 0 (a relay of
// the earlier version, during a rolling upgrade, still sets published_at). An outbox created
// without the column (before it existed) still marks and deletes, Migrate leaves it as it is,
// and the ALTER TABLE of the migration's comment adds the column to it with the right values.
func TestMarkRoom(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	db := s.DB()
	writeAndMark(t, s, 10, 4, false)
	zero, null := markRoom(t, db)
	require.Equal(t, 10, zero, "marks leave the outbox rows")
	require.Equal(t, 0, null)
	var first int64
	require.NoError(t, db.QueryRow(`SELECT MIN(seq) FROM outbox_pending`).Scan(&first))
	_, err := db.Exec(`UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE seq = ?`, first)
	require.NoError(t, err) // an earlier relay's mark
	zero, null = markRoom(t, db)
	require.Equal(t, 9, zero)
	require.Equal(t, 1, null, "a row with published_at")

	old := newStore(t, nil)
	odb := old.DB()
	_, err = odb.Exec(`ALTER TABLE outbox DROP COLUMN mark_room`)
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
	require.Equal(t, 17, zero, "every row: none has published_at")
	require.Equal(t, 0, null)
}
