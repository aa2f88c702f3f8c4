package postgres

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	in, err := core.NewInbox[pgx.Tx](s, nil)
	require.NoError(t, err)
	_, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e", OccurredAt: time.Now()},
		func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
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

// IdentitySlot reads the slot back from a ChangeSource's Identity (a checkpoint's Source), and
// refuses other forms.
func TestIdentitySlot(t *testing.T) {
	t.Parallel()
	s, err := New(nilPool(t), &Options{Schema: "sales", Table: "outbox"})
	require.NoError(t, err)
	src, err := s.ChangeSource(&ChangeSourceOptions{Slot: "relay_b"})
	require.NoError(t, err)
	slot, ok := IdentitySlot(src.identity("7301234567890123456"))
	require.True(t, ok)
	require.Equal(t, "relay_b", slot)
	for _, id := range []string{"", "log-1", "mysql:1/db.outbox", "postgres:1", "postgres:1/Bad-Slot/public.outbox", "postgres:1/s"} {
		_, ok := IdentitySlot(id)
		require.False(t, ok, id)
	}
}
