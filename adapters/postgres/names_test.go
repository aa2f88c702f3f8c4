package postgres

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// Derived table names that collide are refused up front, not by every later Process.
func TestResolveRefusesCollidingDerivedNames(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Table: "y_horizons", InboxTable: "y"},
		{Table: "outbox", InboxTable: "outbox"},
		{Table: "x", InboxTable: "x_lanes"},
		{Table: "Inbox_Versions", InboxTable: "inbox"},
	} {
		_, _, err := o.resolve()
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%+v", o)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
	_, _, err := (&Options{Table: "events", InboxTable: "inbox"}).resolve()
	require.NoError(t, err)
}

// A nil or ended transaction and an unmigrated schema fail with typed errors.
func TestTypedErrorsForNilTxAndUnmigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	s, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	_, err = core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = core.NewInbox[pgx.Tx](ctx, s, nil)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.Empty(t, testkit.UnmigratedCalls(ctx, s))

	require.NoError(t, s.Migrate(ctx))
	out, err := core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
	ev := core.Event{AggregateType: "a", AggregateID: "1", Type: "t"}
	_, err = out.Write(ctx, nil, ev)
	require.ErrorIs(t, err, core.ErrInvalidTx)
	tx, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = out.Write(ctx, tx, ev)
	require.ErrorIs(t, err, core.ErrInvalidTx)

	// The inbox methods refuse the same transactions (a nil one used to panic), through either
	// driver.
	require.Empty(t, testkit.InboxTxCalls[pgx.Tx](ctx, s, nil), "nil")
	require.Empty(t, testkit.InboxTxCalls(ctx, s, tx), "ended")
	sq, err := NewSQL(d.sqlDB(t), &Options{Schema: d.schema})
	require.NoError(t, err)
	require.Empty(t, testkit.InboxTxCalls[*sql.Tx](ctx, sq, nil), "nil *sql.Tx")
}

// A transaction on another database of the server, whose outbox is migrated alike (same
// schema, table and lane count), is refused with core.ErrInvalidTx, through either driver, and
// nothing is written in either database: the row would sit in an outbox no relay of this Store
// reads.
func TestWriteRefusesTransactionOnAnotherDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	other := randomName("okt_db_")
	_, err := admin(t).Exec(ctx, "CREATE DATABASE "+quote(other))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin(t).Exec(context.Background(), "DROP DATABASE "+quote(other)+" WITH (FORCE)")
		require.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(testDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Database = other
	otherPool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(otherPool.Close)
	_, err = otherPool.Exec(ctx, "CREATE SCHEMA "+quote(d.schema))
	require.NoError(t, err)
	otherStore, err := New(otherPool, &Options{Schema: d.schema})
	require.NoError(t, err)
	require.NoError(t, otherStore.Migrate(ctx))

	s, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	out, err := core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
	sq, err := NewSQL(d.sqlDB(t), &Options{Schema: d.schema})
	require.NoError(t, err)
	sqlOut, err := core.NewOutbox[*sql.Tx](ctx, sq, nil)
	require.NoError(t, err)
	otherSQL := stdlib.OpenDBFromPool(otherPool)
	t.Cleanup(func() { _ = otherSQL.Close() })
	// One record and several: the adapter inserts them with different statements.
	for _, evs := range [][]core.Event{
		{{AggregateType: "a", AggregateID: "1", Type: "t"}},
		{{AggregateType: "a", AggregateID: "1", Type: "t"}, {AggregateType: "a", AggregateID: "2", Type: "t"}},
	} {
		err = pgx.BeginFunc(ctx, otherPool, func(tx pgx.Tx) error { _, err := out.Write(ctx, tx, evs...); return err })
		require.ErrorIs(t, err, core.ErrInvalidTx)
		tx, err := otherSQL.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = sqlOut.Write(ctx, tx, evs...)
		require.ErrorIs(t, err, core.ErrInvalidTx)
		require.NoError(t, tx.Commit())
	}

	for _, p := range []*pgxpool.Pool{d.pool, otherPool} {
		var n int
		require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM "+quote(d.schema)+".outbox").Scan(&n))
		require.Zero(t, n)
	}
	// The store's own database still takes the same write.
	require.NoError(t, pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := out.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))
}
