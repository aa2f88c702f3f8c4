package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// TestImmutableColumnsTrigger mirrors PostgreSQL's: an UPDATE that changes a semantic column
// fails and changes nothing; the relay's status columns may change.
func TestImmutableColumnsTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s := storeOn(t, db, nil)
	require.NoError(t, s.Migrate(ctx)) // idempotent: the trigger exists once
	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte("x")})
		return err
	}))
	var before string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT CONCAT_WS('|', seq, id, aggregate_id, payload, lane, created_at) FROM outbox").Scan(&before))

	for _, set := range []string{
		"payload = 'changed'", "id = 'other'", "aggregate_id = 'x'", "aggregate_version = 7", "lane = lane + 1",
		"created_at = created_at - INTERVAL 1 DAY", "headers = '{\"a\":\"b\"}'", "seq = seq + 100",
		"type = 'x', published_at = UTC_TIMESTAMP(6)", "destination = 'd'", "tenant = 'x'",
		"causation_id = 'c'", "correlation_id = 'c'", "schema_id = 's'", "partition_key = 'k'",
		"aggregate_type = 'b'",
		// Trailing spaces are a change (the columns are binary since migration 009).
		"aggregate_id = CONCAT(aggregate_id, ' ')", "partition_key = CONCAT(partition_key, ' ')",
		"tenant = ' '", "causation_id = ' '", "correlation_id = ' '", "headers = CONCAT(headers, ' ')",
	} {
		_, err := db.ExecContext(ctx, "UPDATE outbox SET "+set)
		var me *mysqldrv.MySQLError
		require.True(t, errors.As(err, &me), "%s: %v", set, err)
		require.EqualValues(t, 1644, me.Number, "%s: %v", set, err) // SIGNAL SQLSTATE '45000'
		require.Contains(t, me.Message, "only published_at", set)
	}
	var after string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT CONCAT_WS('|', seq, id, aggregate_id, payload, lane, created_at) FROM outbox").Scan(&after))
	require.Equal(t, before, after)
	// Status columns may change, and naming a semantic column without changing it is allowed.
	for _, set := range []string{
		"published_at = UTC_TIMESTAMP(6)", "attempts = attempts + 1, last_error = 'boom'",
		"next_attempt_at = UTC_TIMESTAMP(6), parked_at = UTC_TIMESTAMP(6)", "id = id, payload = payload",
	} {
		res, err := db.ExecContext(ctx, "UPDATE outbox SET "+set)
		require.NoError(t, err, set)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.LessOrEqual(t, n, int64(1), set)
	}
	var attempts int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT attempts FROM outbox").Scan(&attempts))
	require.Equal(t, 1, attempts)
}

// TestAuditGuardTrigger mirrors PostgreSQL's: an audit row changes at most once, from
// rows_affected -1 to a count; any other UPDATE fails and changes nothing.
func TestAuditGuardTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	storeOn(t, db, nil)
	_, err := db.ExecContext(ctx, "INSERT INTO outbox_audit (at, actor, command, arguments, rows_affected) VALUES (UTC_TIMESTAMP(6), 'a', 'replay', '{}', 2), (UTC_TIMESTAMP(6), 'a', 'inbox prune', '{}', -1)")
	require.NoError(t, err)
	refused := func(sql string) {
		t.Helper()
		_, err := db.ExecContext(ctx, sql)
		var me *mysqldrv.MySQLError
		require.True(t, errors.As(err, &me), "%s: %v", sql, err)
		require.EqualValues(t, 1644, me.Number, "%s: %v", sql, err)
		require.Contains(t, me.Message, "append-only", sql)
	}
	refused("UPDATE outbox_audit SET rows_affected = 5 WHERE command = 'replay'")
	refused("UPDATE outbox_audit SET actor = 'b', rows_affected = 5 WHERE command = 'inbox prune'")
	refused("UPDATE outbox_audit SET rows_affected = -2 WHERE command = 'inbox prune'")
	refused("UPDATE outbox_audit SET actor = 'a ', rows_affected = 5 WHERE command = 'inbox prune'")
	refused("UPDATE outbox_audit SET arguments = '{} ', rows_affected = 5 WHERE command = 'inbox prune'")
	_, err = db.ExecContext(ctx, "UPDATE outbox_audit SET rows_affected = 5 WHERE command = 'inbox prune'")
	require.NoError(t, err, "the count of an unfinished inbox prune")
	refused("UPDATE outbox_audit SET rows_affected = 6 WHERE command = 'inbox prune'")
	var rows string
	require.NoError(t, db.QueryRowContext(ctx, "SELECT GROUP_CONCAT(CONCAT(actor, rows_affected) ORDER BY id) FROM outbox_audit").Scan(&rows))
	require.Equal(t, "a2,a5", rows)
}
