package mysql_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
)

// Stats, Blocked and PendingDestinations read the pending table through its primary key and
// ix_failed, and the outbox by primary key only, never a full scan (EXPLAIN type ALL), on a table
// analysed while large; pending and parked are exact.
func TestStatsPlan(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 64})
	db := s.DB()
	_, err := db.Exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at, published_at)
		SELECT CONCAT('e', seq), 'order', seq % 100, 't', CONCAT('order/', seq % 100), REPEAT('a', 200), '{}', (seq % 100) % 64,
		UTC_TIMESTAMP(6), IF(seq <= 8000, UTC_TIMESTAMP(6), NULL) FROM seq_1_to_10000`)
	if err != nil && strings.Contains(err.Error(), "seq_1_to_10000") {
		t.Skip("the server has no sequence engine (MariaDB only); plan check skipped")
	}
	require.NoError(t, err)
	_, err = db.Exec("UPDATE outbox SET parked_at = UTC_TIMESTAMP(6), attempts = 1 WHERE id = 'e8001'")
	require.NoError(t, err)
	_, err = db.Exec("ANALYZE TABLE outbox")
	require.NoError(t, err)

	stats, blocked := s.StatsQueries()
	for name, q := range map[string]struct {
		sql  string
		args []any
	}{"stats": {stats, []any{10_000, "outbox"}}, "blocked": {blocked, []any{10_000}},
		"pending destinations": {s.PendingDestinationsQuery(), []any{10_000}}} {
		rows, err := db.Query("EXPLAIN "+q.sql, q.args...)
		require.NoError(t, err)
		cols, err := rows.Columns()
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			row := map[string]string{}
			for i, c := range cols {
				row[c] = fmt.Sprintf("%s", vals[i])
			}
			plan = append(plan, fmt.Sprintf("%s type=%s key=%s", row["table"], row["type"], row["key"]))
			switch row["table"] {
			case "outbox", "outbox_pending", "o", "r": // never a scan of the outbox or its published rows
				require.NotEqual(t, "ALL", row["type"], "%s: %v", name, row)
				require.Contains(t, []string{"PRIMARY", "ix_failed"}, row["key"], "%s: %v", name, row)
			}
		}
		require.NoError(t, rows.Err())
		t.Logf("%s: %s", name, strings.Join(plan, " | "))
	}

	st, err := s.Stats(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(1999), st.Pending)
	require.Equal(t, int64(1), st.Parked)
	require.Equal(t, int64(8000), st.Published, "exact in a small table")
	n, err := s.Blocked(t.Context())
	require.NoError(t, err)
	require.Equal(t, int64(19), n, "order/1's pending records after e8001")
	dests, err := s.PendingDestinations(t.Context(), 10_000)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"": 1999}, dests)

	// Beyond 10,000 unpublished rows, Pending is the optimizer's estimate.
	_, err = db.Exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at)
		SELECT CONCAT('f', seq), 'order', seq % 100, 't', CONCAT('order/', seq % 100), '', '{}', (seq % 100) % 64,
		UTC_TIMESTAMP(6) FROM seq_1_to_10000`)
	require.NoError(t, err)
	st, err = s.Stats(t.Context())
	require.NoError(t, err)
	require.InEpsilon(t, 11999, st.Pending, 0.5, "the estimate")
}
