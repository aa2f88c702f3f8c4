package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// The binary log may carry a transaction before InnoDB has committed it (the binlog is written
// first, then the engine commits), so the CDC relay can mark a row whose insert is still
// committing. The MySQL stream is no driver.VisibleWaiter because the mark does not need one: it
// is an UPDATE by primary key, a locking read of the latest row version, which waits for the
// inserting transaction instead of skipping its row as a snapshot read would. Here the insert is
// simply not committed yet; the mark (SettlePublish's statement, without its lane filter) must
// wait for it and then change the row.
func TestMarkWaitsForACommittingInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s := storeOn(t, db, nil)
	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte("x")})
	require.NoError(t, err)
	var seq int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT seq FROM outbox").Scan(&seq))

	type result struct {
		rows int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := db.ExecContext(ctx, "UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE seq IN (?) AND published_at IS NULL", seq)
		if err != nil {
			done <- result{err: err}
			return
		}
		n, err := res.RowsAffected()
		done <- result{n, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the mark did not wait for the insert (rows %d, %v)", r.rows, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit())
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.EqualValues(t, 1, r.rows, "the mark changed the row once its insert committed")
	case <-time.After(20 * time.Second):
		t.Fatal("the mark still waits after the commit")
	}
}
