package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hot queries must use their indexes: the relay's Fetch walks the queue (migration 0007) in
// seq order, reads each record by seq and probes the queue's failed index; Settle looks rows up
// by seq; cleanup reads the publications' time index.
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
	require.Contains(t, p, "SCAN p\n")
	require.Contains(t, p, "SEARCH o USING INTEGER PRIMARY KEY (rowid=?)")
	require.Contains(t, p, "USING COVERING INDEX outbox_queue_failed")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")

	// A new outbox has none of the earlier layout's partial indexes.
	var legacy int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'index'
		AND name IN ('outbox_pending', 'outbox_blocked', 'outbox_published')`).Scan(&legacy))
	require.Zero(t, legacy)

	p = plan(s.q.publishDequeue, "[1,2]", "[1]")
	t.Log("publish dequeue:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.deletePublished, "[1,2]", "[1]")
	t.Log("delete published:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.publish, 1, "[1,2]", "[1]")
	t.Log("publish:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.fail, 1, `[{"s":1,"d":1,"p":0,"e":""}]`, "[1]")
	t.Log("fail:\n" + p)
	require.Contains(t, p, "INTEGER PRIMARY KEY (rowid=?)")

	p = plan(s.q.prune, 1, 2, 3)
	t.Log("prune:\n" + p)
	require.Contains(t, p, "outbox_publications_at")

	p = plan(s.q.minPending)
	t.Log("min pending:\n" + p)
	require.Contains(t, p, "SEARCH outbox_queue")

	// Stats and Blocked never scan the outbox: only the queue (unpublished rows), indexes, the
	// publications up to the cap, and rowid lookups.
	for name, q := range map[string]string{"stats": s.q.stats, "blocked": s.q.blocked} {
		p = plan(q, statsExactPublished)
		t.Log(name + ":\n" + p)
		for line := range strings.Lines(p) {
			for _, tbl := range []string{"SCAN outbox", "SCAN o"} {
				if line == tbl+"\n" || strings.HasPrefix(line, tbl+" ") {
					require.Contains(t, line, "INDEX", name)
				}
			}
		}
	}
	require.Contains(t, plan(s.q.stats, 1), "outbox_queue_failed")
	require.Contains(t, plan(s.q.blocked), "outbox_queue_failed")

	// status's breakdown walks the queue in seq order; its publish rate the publications' time
	// index, newest first.
	p = plan(s.q.pendingDest, 10)
	t.Log("pending destinations:\n" + p)
	require.Contains(t, p, "SCAN p\n")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")
	p = plan(s.q.pubRecent, 1, 10)
	t.Log("published recent:\n" + p)
	require.Contains(t, p, "outbox_publications_at")
	require.NotContains(t, p, "TEMP B-TREE FOR ORDER BY")

	p = plan(s.q.unpark, "k")
	t.Log("unpark:\n" + p)
	require.Contains(t, p, "outbox_queue_failed")

	// The inbox's records are read by their whole key (inbox migration 0002). Reconciliation,
	// which knows event IDs only, seeks each ID on the primary key's prefix (consumer,
	// event_id): no scan of the inbox.
	p = plan(s.q.selectInbox, "c", "s", "t", "e")
	t.Log("select inbox:\n" + p)
	require.Contains(t, p, "SEARCH inbox USING INDEX sqlite_autoindex_inbox_1 (consumer=? AND event_id=? AND source=? AND tenant=?)")
	p = plan(s.q.selectInboxByIDs, "c", `["e1","e2"]`)
	t.Log("select inbox by IDs:\n" + p)
	for line := range strings.Lines(p) {
		require.NotContains(t, line, "SCAN inbox", "select inbox by IDs")
		require.NotContains(t, line, "SCAN r", "select inbox by IDs")
	}
	require.Contains(t, p, "(consumer=? AND event_id=?)")
	require.NotContains(t, p, "TEMP B-TREE")
}
