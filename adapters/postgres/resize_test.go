package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// TestResizeWriterIsolation: a checked insert never commits a row in a lane of the old count.
// A READ COMMITTED insert that waits for a resize in progress (its meta row locked) reads the
// count the resize committed: refused, then written again in the same transaction with the new
// count. A REPEATABLE READ (or SERIALIZABLE) transaction whose snapshot is older than the
// resize fails with a serialization error (40001) instead of writing with the count its
// snapshot sees. An outbox without migration 0007 cannot be resized.
func TestResizeWriterIsolation(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			testResizeWriterIsolation(t, mode)
		})
	}
}

func testResizeWriterIsolation(t *testing.T, mode pgx.QueryExecMode) {
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{mode: mode}, &Options{Lanes: 8})
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	ev := func(id string) core.Event {
		return core.Event{AggregateType: "a", AggregateID: id, Type: "t", Payload: []byte("{}")}
	}
	laneOf := func(key string) int {
		t.Helper()
		recs, err := s.List(ctx, driver.ListParams{State: driver.StateAll})
		require.NoError(t, err)
		for _, r := range recs {
			if r.PartitionKey == key {
				return r.Lane
			}
		}
		t.Fatalf("no record of key %s", key)
		return -1
	}

	// READ COMMITTED behind a resize in progress (as ResizeLanes holds it: the table and the
	// meta row locked, the new count written, not yet committed).
	rz, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	// Never left open past the test: an open transaction holds back every replication slot's
	// creation on the server (other tests' CDC cases).
	t.Cleanup(func() { _ = rz.Rollback(context.Background()) })
	var rzPID int
	require.NoError(t, rz.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&rzPID))
	_, err = rz.Exec(ctx, s.q.resizeLock)
	require.NoError(t, err)
	_, err = rz.Exec(ctx, s.q.laneCountLocked)
	require.NoError(t, err)
	_, err = rz.Exec(ctx, s.q.laneCountSet, "32")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		done <- pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
			_, err := ob.Write(ctx, tx, ev("rc"))
			return err
		})
	}()
	// Asked of the server (the blockers), not by the waiting query's text, which
	// pg_stat_activity truncates: in the simple protocol the insert's arguments come first.
	waitBlockedBy(t, d, rzPID)
	require.NoError(t, rz.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, driver.LaneOf("a/rc", 32), laneOf("a/rc"))
	require.Equal(t, 32, ob.Lanes())

	// REPEATABLE READ with a snapshot older than the resize.
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		tx, err := d.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT 1 FROM outbox_meta LIMIT 1") // takes the snapshot
		require.NoError(t, err)
		to := 5
		if iso == pgx.Serializable {
			to = 7
		}
		_, err = s.ResizeLanes(ctx, to, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
		require.NoError(t, err)
		_, err = ob.Write(ctx, tx, ev(string(iso)))
		requireSQLState(t, err, "40001")
		require.NoError(t, tx.Rollback(ctx))
	}

	// No migration 0007: no resize.
	_, err = d.pool.Exec(ctx, "DELETE FROM outbox_meta WHERE name = 'migration:0007_lanes_resize'")
	require.NoError(t, err)
	old, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	_, err = old.ResizeLanes(ctx, 9, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.True(t, errors.Is(err, core.ErrSchemaMismatch), "%v", err)
	n, err := old.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 7, n)
}
