package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hot queries must use their indexes: the relay's Fetch walks the pending index and probes
// the blocked index; Settle looks rows up by seq; cleanup reads the published index.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "plan.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, nil)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	plan := func(q string, args ...any) string {
		rows, err := db.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q, args...)
		require.NoError(t, err)
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var id, parent, unused int
			var detail string
			require.NoError(t, rows.Scan(&id, &parent, &unused, &detail))
			b.WriteString(detail + "\n")
		}
		require.NoError(t, rows.Err())
		return b.String()
	}
	p := plan(s.q.fetch, "[1,2]", 0, 10)
	t.Log("fetch:\n" + p)
	require.Contains(t, p, "USING INDEX outbox_pending")
	require.Contains(t, p, "USING COVERING INDEX outbox_blocked")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")

	p = plan(s.q.publish, 1, "[1,2]", "[1]")
	t.Log("publish:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.fail, 1, `[{"s":1,"d":1,"p":0,"e":""}]`, "[1]")
	t.Log("fail:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.prune, 1, 2, 3)
	t.Log("prune:\n" + p)
	require.Contains(t, p, "outbox_published")

	p = plan(s.q.minPending)
	t.Log("min pending:\n" + p)
	require.Contains(t, p, "outbox_pending")

	// Stats and Blocked never scan the table: only indexes (and rowid lookups).
	for name, q := range map[string]string{"stats": s.q.stats, "blocked": s.q.blocked} {
		p = plan(q, statsExactPublished)
		t.Log(name + ":\n" + p)
		for line := range strings.Lines(p) {
			if strings.HasPrefix(line, "SCAN outbox") || strings.HasPrefix(line, "SCAN o") {
				require.Contains(t, line, "INDEX", name)
			}
		}
	}
	require.Contains(t, plan(s.q.stats, 1), "outbox_pending")
	require.Contains(t, plan(s.q.stats, 1), "outbox_blocked")
	require.Contains(t, plan(s.q.blocked), "outbox_blocked")

	// status's breakdown walks the pending index in seq order; its publish rate the published
	// index, newest first.
	p = plan(s.q.pendingDest, 10)
	t.Log("pending destinations:\n" + p)
	require.Contains(t, p, "outbox_pending")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")
	p = plan(s.q.pubRecent, 1, 10)
	t.Log("published recent:\n" + p)
	require.Contains(t, p, "outbox_published")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")

	p = plan(s.q.unpark, "k")
	t.Log("unpark:\n" + p)
	require.Contains(t, p, "outbox_blocked")
}
