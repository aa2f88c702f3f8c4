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
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// Text that differs only in trailing spaces is different text, as on every other adapter: the
// tables' utf8mb4_bin collation is PAD SPACE (it ignores trailing spaces), so migration 009
// stores the compared text as VARBINARY.

// Inbox consumers "c" and "c " are two consumers: each applies the same event once (the second
// got Duplicate and its handler never ran), and each has its own retention horizon.
func TestInboxConsumerTrailingSpace(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	msg := core.InboxMessage{EventID: "e1", OccurredAt: time.Now().Add(-time.Hour), Payload: []byte("p")}
	for _, consumer := range []string{"c", "c ", "c  "} {
		res, err := in.Process(ctx, consumer, msg, func(ctx context.Context, tx *sql.Tx, _ core.InboxMessage) error {
			return effect(ctx, tx, "consumer["+consumer+"]")
		})
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome, "consumer %q", consumer)
		n, err := effectCount(ctx, s.DB(), "consumer["+consumer+"]")
		require.NoError(t, err)
		require.Equal(t, 1, n, "consumer %q", consumer)
	}

	// A prune of "c" raises the horizon of "c" only.
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Minute), 0)
	require.NoError(t, err)
	old := core.InboxMessage{EventID: "e2", OccurredAt: time.Now().Add(-time.Hour)}
	_, err = in.Process(ctx, "c", old, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	require.ErrorIs(t, err, core.ErrBeyondRetention)
	res, err := in.Process(ctx, "c ", old, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
}

// Entities "x" and "x " of one consumer have their own versions, through Process and
// ProcessBatch (whose versions are read and written for several entities at once).
func TestInboxEntityTrailingSpace(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	nop := func(context.Context, *sql.Tx, core.InboxMessage) error { return nil }
	res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Entity: "x", Version: 5}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	res, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e2", Entity: "x ", Version: 1}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome, "entity \"x \" is not gated by the version of \"x\"")
	res, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e3", Entity: "x", Version: 2}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Stale, res.Outcome, "\"x\" kept its version 5")

	results, err := in.ProcessBatch(ctx, "c", []core.InboxMessage{
		{EventID: "b1", Entity: "y", Version: 5},
		{EventID: "b2", Entity: "y ", Version: 1},
		{EventID: "b3", Entity: "x ", Version: 2},
	}, func(context.Context, *sql.Tx, int, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	for i, r := range results {
		require.Equal(t, core.Applied, r.Outcome, "message %d", i)
	}
}

// With UniqueAggregateVersion, aggregates "a" and "a " are two aggregates: the same version of
// each is no duplicate.
func TestUniqueAggregateVersionTrailingSpace(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{UniqueAggregateVersion: true})
	ctx := t.Context()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	write := writeInTx(ctx, s, ob)
	ev := core.Event{AggregateType: "order", AggregateID: "a", AggregateVersion: 1, Type: "order.created"}
	require.NoError(t, write(ev))
	ev.AggregateID = "a "
	require.NoError(t, write(ev), "aggregate \"a \" is not \"a\"")
	require.ErrorIs(t, write(ev), core.ErrDuplicateEvent)
}

// Partition keys "k" and "k " (one lane) block, unpark and are listed separately: a parked "k"
// does not hold "k " back, and Unpark("k") leaves a parked "k " parked.
func TestPartitionKeyTrailingSpace(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 1})
	ctx := t.Context()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	write := func(key string) {
		t.Helper()
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t", PartitionKey: key})
			return err
		}))
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: 24 * time.Hour, Now: t0})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	fetch := func() []string {
		t.Helper()
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100, Now: t0})
		require.NoError(t, err)
		keys := []string{}
		for _, r := range recs {
			keys = append(keys, r.PartitionKey)
		}
		return keys
	}
	park := func(key string) {
		t.Helper()
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100, Now: t0})
		require.NoError(t, err)
		for _, r := range recs {
			if r.PartitionKey == key {
				require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Now: t0,
					Failed: []driver.Failure{{Seq: r.Seq, Lane: r.Lane, Error: "boom", Park: true}}}))
				return
			}
		}
		t.Fatalf("no record of key %q to park", key)
	}

	write("k")
	write("k ")
	park("k")
	write("k")
	write("k ")
	require.Equal(t, []string{"k ", "k "}, fetch(), "the parked \"k\" holds back \"k\" only")
	keys, err := s.ParkedKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"k"}, keys)

	park("k ")
	keys, err = s.ParkedKeys(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"k", "k "}, keys)
	require.Empty(t, fetch())
	n, err := s.Unpark(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"k", "k"}, fetch(), "\"k \" stays parked")
	keys, err = s.ParkedKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"k "}, keys)
}

// Owners "w" and "w " are two relay workers: neither settles nor releases the other's lease.
func TestOwnerTrailingSpace(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 1})
	ctx := t.Context()
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	forged := leases[0]
	forged.Owner = "w "
	require.NoError(t, s.ReleaseLanes(ctx, []driver.Lease{forged}))
	var lost *driver.LanesLostError
	require.ErrorAs(t, s.Settle(ctx, driver.SettleParams{Leases: []driver.Lease{forged}}), &lost)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases}), "\"w\" still holds its lease")
	live, err := s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "w", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 1, live)
	live, err = s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "w ", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 2, live)
}

// textColumns returns "table.column" of every column with a character set in the tables of the
// default options, with its data type and character set.
func textColumns(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testkit.Strings(t, db, `SELECT CONCAT(TABLE_NAME, '.', COLUMN_NAME, ' ', DATA_TYPE, ' ', CHARACTER_SET_NAME)
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND CHARACTER_SET_NAME IS NOT NULL
		AND TABLE_NAME IN ('outbox', 'outbox_lanes', 'outbox_workers', 'outbox_meta', 'outbox_pub', 'outbox_cdc',
			'outbox_audit', 'inbox', 'inbox_horizons', 'inbox_versions')
		ORDER BY TABLE_NAME, ORDINAL_POSITION`)
}

// After migration 009 the only text columns left are identifiers (ascii, which the API refuses
// spaces in) and text that is never compared.
var textAfterBinary = []string{
	"inbox.event_id varchar ascii", "inbox.source_position text utf8mb4",
	"outbox.id varchar ascii", "outbox.aggregate_type varchar ascii", "outbox.type varchar ascii",
	"outbox.schema_id varchar ascii", "outbox.destination varchar ascii", "outbox.last_error varchar utf8mb4",
	"outbox_cdc.source varchar utf8mb4", "outbox_cdc.position text utf8mb4",
	"outbox_meta.name varchar ascii", "outbox_meta.value varchar utf8mb4",
	"outbox_pub.kind varchar ascii", "outbox_pub.holder varchar utf8mb4",
}

// Migrate converts a database that the migrations before 009 created and filled: the stored
// records, versions and keys survive, trailing spaces then tell them apart, and a second
// Migrate finds nothing to do.
func TestMigrateBinaryTextOnExistingDatabase(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	opts := &mysql.Options{Lanes: 1, UniqueAggregateVersion: true, Logger: quietLogger()}
	s, err := mysql.New(ctx, db, opts)
	require.NoError(t, err)
	require.NoError(t, s.MigrateBefore(ctx, "migrations/009_binary_text.sql"))
	require.Contains(t, textColumns(t, db), "inbox.consumer varchar utf8mb4", "the old schema")

	// This version's inbox needs migration 011 (CheckInbox refuses the old schema): the record
	// and the version are written as the earlier version's Process wrote them.
	msg := core.InboxMessage{EventID: "e1", Entity: "x", Version: 5}
	writeEarlierRecord(t, db, "c", "e1", "", "x", 5)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	write := func(id string) error {
		return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: id, AggregateVersion: 1, Type: "t", PartitionKey: id,
				Headers: map[string]string{"h": id}, Tenant: id})
			return err
		})
	}
	require.NoError(t, write("a"))
	require.ErrorIs(t, write("a "), core.ErrDuplicateEvent, "the old schema's collision")

	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, textAfterBinary, textColumns(t, db))
	recs, err := s.List(ctx, driver.ListParams{State: driver.StateAll, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "a", recs[0].AggregateID)
	require.Equal(t, "a", recs[0].PartitionKey)
	require.Equal(t, "a", recs[0].Tenant)
	require.Equal(t, "a", recs[0].Headers["h"])

	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	nop := func(context.Context, *sql.Tx, core.InboxMessage) error { return nil }
	res, err := in.Process(ctx, "c", msg, nop)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome, "the record survives")
	res, err = in.Process(ctx, "c ", msg, nop)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	res, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e2", Entity: "x", Version: 4}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Stale, res.Outcome, "the version survives")
	res, err = in.Process(ctx, "c", core.InboxMessage{EventID: "e3", Entity: "x ", Version: 4}, nop)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	require.NoError(t, write("a "))
	require.ErrorIs(t, write("a"), core.ErrDuplicateEvent, "the unique index survives")

	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, textAfterBinary, textColumns(t, db))
}

// MigrationSQL's script holds migration 009: run on an empty database it gives the binary
// columns, and Migrate then finds the database current.
func TestMigrationSQLBinaryText(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	script, err := mysql.MigrationSQL(&mysql.Options{Lanes: 2})
	require.NoError(t, err)
	require.Contains(t, script, "VARBINARY")
	runScript(t, db, script)
	require.Equal(t, textAfterBinary, textColumns(t, db))
	s := storeOn(t, db, &mysql.Options{Lanes: 2})
	require.Equal(t, textAfterBinary, textColumns(t, db))
	in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	for _, consumer := range []string{"c", "c "} {
		res, err := in.Process(ctx, consumer, core.InboxMessage{EventID: "e1"}, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome, "consumer %q", consumer)
	}
}

// runScript runs a MigrationSQL script on one session of db, statement by statement (the
// script separates them by a blank line).
func runScript(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	conn, err := db.Conn(t.Context())
	require.NoError(t, err)
	for _, stmt := range strings.Split(script, ";\n\n") {
		if strings.TrimSpace(stmt) == "" {
			continue
		}
		_, err := conn.ExecContext(t.Context(), stmt)
		require.NoError(t, err, stmt)
	}
	require.NoError(t, conn.Close())
}
