package sqlite_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// TestImmutableColumnsTrigger mirrors PostgreSQL's: an UPDATE that changes a semantic column
// fails and changes nothing; the relay's status columns may change.
func TestImmutableColumnsTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.write(t, event("e1", "k"))
	require.NoError(t, err)
	row := func() string {
		var s string
		require.NoError(t, b.db.QueryRowContext(b.ctx, `SELECT seq || '|' || id || '|' || aggregate_id || '|' ||
			payload || '|' || lane || '|' || created_at FROM outbox`).Scan(&s))
		return s
	}
	before := row()
	for _, set := range []string{
		"payload = 'changed'", "id = 'other'", "aggregate_id = 'x'", "aggregate_version = 7", "lane = lane + 1",
		"created_at = created_at - 1", `headers = '{"a":"b"}'`, "seq = seq + 100",
		"type = 'x', published_at = 1", "destination = 'd'", "tenant = 'x'", "causation_id = 'c'",
		"correlation_id = 'c'", "schema_id = 's'", "partition_key = 'p'", "aggregate_type = 'b'",
		"payload = NULL",
	} {
		_, err := b.db.ExecContext(b.ctx, "UPDATE outbox SET "+set)
		var e *msqlite.Error
		require.True(t, errors.As(err, &e), "%s: %v", set, err)
		require.Equal(t, sqlite3.SQLITE_CONSTRAINT_TRIGGER, e.Code(), "%s: %v", set, err)
		require.Contains(t, e.Error(), "only published_at", set)
	}
	require.Equal(t, before, row())
	// Status columns may change, and naming a semantic column without changing it is allowed.
	for _, set := range []string{
		"published_at = 1", "attempts = attempts + 1, last_error = 'boom'",
		"next_attempt_at = 1, parked_at = 1", "id = id, payload = payload",
	} {
		res, err := b.db.ExecContext(b.ctx, "UPDATE outbox SET "+set)
		require.NoError(t, err, set)
		n, err := res.RowsAffected()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, set)
	}
}

// TestAuditGuardTrigger mirrors PostgreSQL's: an audit row changes at most once, from
// rows_affected -1 to a count; any other UPDATE fails and changes nothing.
func TestAuditGuardTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.db.ExecContext(b.ctx, `INSERT INTO outbox_audit (at, actor, command, arguments, rows_affected) VALUES (1, 'a', 'replay', '{}', 2), (1, 'a', 'inbox prune', '{}', -1)`)
	require.NoError(t, err)
	refused := func(sql string) {
		t.Helper()
		_, err := b.db.ExecContext(b.ctx, sql)
		var e *msqlite.Error
		require.True(t, errors.As(err, &e), "%s: %v", sql, err)
		require.Equal(t, sqlite3.SQLITE_CONSTRAINT_TRIGGER, e.Code(), "%s: %v", sql, err)
		require.Contains(t, e.Error(), "append-only", sql)
	}
	refused("UPDATE outbox_audit SET rows_affected = 5 WHERE command = 'replay'")
	refused("UPDATE outbox_audit SET actor = 'b', rows_affected = 5 WHERE command = 'inbox prune'")
	refused("UPDATE outbox_audit SET rows_affected = -2 WHERE command = 'inbox prune'")
	_, err = b.db.ExecContext(b.ctx, "UPDATE outbox_audit SET rows_affected = 5 WHERE command = 'inbox prune'")
	require.NoError(t, err, "the count of an unfinished inbox prune")
	refused("UPDATE outbox_audit SET rows_affected = 6 WHERE command = 'inbox prune'")
	var rows string
	require.NoError(t, b.db.QueryRowContext(b.ctx, "SELECT group_concat(actor || rows_affected, ',') FROM (SELECT actor, rows_affected FROM outbox_audit ORDER BY id)").Scan(&rows))
	require.Equal(t, "a2,a5", rows)
}
