package mysql_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// markRoom returns how many outbox rows have mark_room 0 and how many NULL.
func markRoom(t *testing.T, db *sql.DB) (zero, null int) {
	t.Helper()
	require.NoError(t, db.QueryRow(`SELECT COALESCE(SUM(mark_room = 0), 0), COALESCE(SUM(mark_room IS NULL), 0) FROM outbox`).Scan(&zero, &null))
	return zero, null
}

// writeAndMark writes n events and marks the first k published (delete: deletes them).
func writeAndMark(t *testing.T, db *sql.DB, st interface {
	core.OutboxStore[*sql.Tx]
	core.RelayStore
}, n, k int, del bool) {
	t.Helper()
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, core.OutboxStore[*sql.Tx](st), nil)
	require.NoError(t, err)
	evs := make([]core.Event, n)
	for i := range evs {
		evs[i] = core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i), Type: "t", Payload: benchPayload}
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = ob.Write(ctx, tx, evs...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	leases, err := st.ClaimLanes(ctx, core.ClaimParams{Owner: "w", Max: core.DefaultLanes, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := st.Fetch(ctx, core.FetchParams{Leases: leases, Limit: k})
	require.NoError(t, err)
	require.Len(t, recs, k)
	seqs := make([]int64, k)
	for i, r := range recs {
		seqs[i] = r.Seq
	}
	require.NoError(t, st.Settle(ctx, core.SettleParams{Leases: leases, Published: seqs, Delete: del}))
	require.NoError(t, st.ReleaseLanes(ctx, leases))
}

// The outbox's mark_room column (migration 001) is 0 while a row is unpublished and NULL once
// it is published, so that a mark does not grow the row. An outbox created without it (before
// the column existed) still marks and deletes, Migrate leaves it as it is, and the ALTER TABLE
// of the migration's comment adds the column to it with the right values.
func TestMarkRoom(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	db := s.DB()
	writeAndMark(t, db, s, 10, 4, false)
	zero, null := markRoom(t, db)
	require.Equal(t, 6, zero, "unpublished rows")
	require.Equal(t, 4, null, "published rows")

	old := newStore(t, nil)
	odb := old.DB()
	_, err := odb.Exec(`ALTER TABLE outbox DROP COLUMN mark_room`)
	require.NoError(t, err)
	writeAndMark(t, odb, old, 10, 4, false)
	writeAndMark(t, odb, old, 10, 3, true)
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
