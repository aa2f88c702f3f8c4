package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
)

// Derived table names that collide, and unbounded counts, are refused by New before it touches the database (this
// database/sql handle points nowhere and is never connected).
func TestNewRefusesCollidingDerivedNames(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none?parseTime=true")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	for _, o := range []mysql.Options{
		{Table: "y_horizons", InboxTable: "y"},
		{Table: "outbox", InboxTable: "OUTBOX"},
		{Table: "x", InboxTable: "x_lanes"},
		{DeadlockRetries: mysql.MaxDeadlockRetries + 1},
		{DeadlockRetries: 1 << 40},
	} {
		_, err := mysql.New(context.Background(), db, &o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%+v", o)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
}

// A transaction whose connection has another default database of the server (migrated alike)
// writes the outbox rows into the Store's own database, where its relays read them: MySQL
// transactions span the databases of a server, and the Store names its tables with its
// database. Nothing is written in the other database's outbox.
func TestWriteInTransactionOnAnotherDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, name := newDB(t)
	otherDB, otherName := newDB(t)
	s, err := mysql.New(ctx, db, nil)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	other, err := mysql.New(ctx, otherDB, nil)
	require.NoError(t, err)
	require.NoError(t, other.Migrate(ctx))
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)

	tx, err := otherDB.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = out.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"}, core.Event{AggregateType: "a", AggregateID: "2", Type: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	count := func(database string) int {
		var n int
		require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM `"+database+"`.`outbox`").Scan(&n))
		return n
	}
	require.Equal(t, 2, count(name))
	require.Zero(t, count(otherName))
}

// The longest table names the options accept migrate: Table of 56 characters (Table+"_workers"
// is 64) and InboxTable of 55 (InboxTable+"_horizons" is 64). One character more is a
// *core.OptionError naming the field, from New before it touches the database and from
// MigrationSQL; a 56-character InboxTable used to pass, and Migrate then failed with server
// error 1103 after the outbox's tables were created.
func TestTableNameLengthBounds(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("t", n) }
	nowhere, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/none?parseTime=true")
	require.NoError(t, err)
	t.Cleanup(func() { _ = nowhere.Close() })
	for _, c := range []struct {
		field string
		o     mysql.Options
	}{
		{"Table", mysql.Options{Table: long(57)}},
		{"InboxTable", mysql.Options{InboxTable: long(56)}},
	} {
		_, err := mysql.New(context.Background(), nowhere, &c.o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "New %+v", c.o)
		require.Equal(t, c.field, oe.Field)
		_, err = mysql.MigrationSQL(&c.o)
		require.ErrorAs(t, err, &oe, "MigrationSQL %+v", c.o)
		require.Equal(t, c.field, oe.Field)
	}

	longest := mysql.Options{Table: long(56), InboxTable: "i" + long(54)}
	_, err = mysql.MigrationSQL(&longest)
	require.NoError(t, err)
	s := newStore(t, &longest)
	ctx := context.Background()
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e", OccurredAt: time.Now()},
		func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	tx, err := s.DB().BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = out.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
}
