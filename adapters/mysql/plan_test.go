package mysql_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
)

// Fetch walks the pending table's primary key in seq order (no filesort) and looks each outbox
// row up by its primary key, whatever the statistics say: they are taken while the table is
// empty (the steady state of an outbox) and the table then grows.
func TestFetchPlan(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 64})
	db := s.DB()
	_, err := db.Exec("ANALYZE TABLE outbox")
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at)
		SELECT CONCAT('x', seq), 'order', seq % 100, 't', CONCAT('order/', seq % 100), REPEAT('a', 500), '{}', seq % 64,
		UTC_TIMESTAMP(6) FROM seq_1_to_5000`)
	if err != nil && strings.Contains(err.Error(), "seq_1_to_5000") {
		t.Skip("the server has no sequence engine (MariaDB only); plan check skipped")
	}
	require.NoError(t, err)
	_, err = db.Exec("UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE seq <= 4000")
	require.NoError(t, err)

	for _, c := range []struct {
		name           string
		lanes, blocked int
	}{
		{"all-lanes", 64, 0},
		{"some-lanes", 8, 0},
		{"blocked-inline", 8, 3},
		{"blocked-subquery", 8, 100},
	} {
		lanes := make([]int, c.lanes)
		for i := range lanes {
			lanes[i] = i * (64 / c.lanes)
		}
		q, args := s.FetchPlanQueries(lanes, 64, c.blocked)
		rows, err := db.Query("EXPLAIN "+q, args...)
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
			plan = append(plan, fmt.Sprintf("%s key=%s extra=%s", row["table"], row["key"], row["Extra"]))
			if row["table"] == "o" { // the pending table, walked in seq order
				require.Equal(t, "PRIMARY", row["key"], c.name)
				require.NotContains(t, row["Extra"], "filesort", c.name)
			}
			if row["table"] == "r" { // the outbox row of each, by primary key
				require.Equal(t, "eq_ref", row["type"], c.name)
				require.Equal(t, "PRIMARY", row["key"], c.name)
			}
			if row["table"] == "b" {
				require.Equal(t, "ix_failed", row["key"], c.name)
			}
		}
		require.NoError(t, rows.Err())
		t.Logf("%s: %s", c.name, strings.Join(plan, " | "))
	}
}
