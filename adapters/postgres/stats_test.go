package postgres

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fillOutbox inserts total rows (~200-byte payloads) of which the last pending are
// unpublished, in one statement, and analyses the table.
func fillOutbox[TTx any](tb testing.TB, s *Store[TTx], d *testDB, total, pending int) {
	tb.Helper()
	ctx := context.Background()
	_, err := d.pool.Exec(ctx, `INSERT INTO `+s.n.outbox+` (id, aggregate_type, aggregate_id, type, partition_key, lane, payload, published_at)
		SELECT 'e' || g, 'order', (g % 1000)::text, 'order.created', 'order/' || (g % 1000), g % 64,
			convert_to(repeat('x', 200), 'UTF8'), CASE WHEN g <= $1::int - $2::int THEN now() END
		FROM generate_series(1, $1::int) AS g`, total, pending)
	require.NoError(tb, err)
	_, err = d.pool.Exec(ctx, "ANALYZE "+s.n.outbox+", "+s.n.pending) // the trigger of migration 0008 wrote the pending rows
	require.NoError(tb, err)
}

// seqScans returns the relations a JSON plan reads with a sequential scan.
func seqScans(node any) []string {
	var out []string
	switch n := node.(type) {
	case map[string]any:
		if n["Node Type"] == "Seq Scan" {
			rel, _ := n["Relation Name"].(string)
			out = append(out, rel)
		}
		for _, v := range n {
			out = append(out, seqScans(v)...)
		}
	case []any:
		for _, v := range n {
			out = append(out, seqScans(v)...)
		}
	}
	return out
}

// Stats reads the unpublished rows through the pending and failed indexes and never scans the
// outbox table, on a table large enough (> 16 MiB) that Published is the estimate: pending and
// parked are exact, published close. Blocked, with a parked key, does not scan it either.
func TestStatsPlan(t *testing.T) {
	t.Parallel()
	s, d := migratedStore(t, dbOptions{}, nil)
	ctx := context.Background()
	const total, pending = 100_000, 20_000 // pending > statsExactUnpublished
	fillOutbox(t, s, d, total, pending)
	// One parked row early in the backlog.
	_, err := d.pool.Exec(ctx, "UPDATE "+s.n.pending+" AS p SET parked_at = now(), attempts = 1 FROM "+s.n.outbox+" AS o WHERE o.seq = p.seq AND o.id = $1", "e"+strconv.Itoa(total-pending+1))
	require.NoError(t, err)

	for name, q := range map[string]string{"stats": s.q.stats, "blocked": s.q.blocked} {
		var plan []byte
		require.NoError(t, d.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, statsExactUnpublished).Scan(&plan))
		var doc any
		require.NoError(t, json.Unmarshal(plan, &doc))
		require.NotContains(t, seqScans(doc), s.n.rawTable, "%s: %s", name, plan)
		require.Contains(t, string(plan), s.n.rawTable+"_pending_pkey", name)
		require.Contains(t, string(plan), strings.Trim(s.n.pendingFailIdx, `"`), name)
	}

	// status's breakdown: the first 10,000 pending rows on the pending index, no table scan.
	var plan []byte
	require.NoError(t, d.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+s.q.pendingDest, statsExactUnpublished).Scan(&plan))
	var doc any
	require.NoError(t, json.Unmarshal(plan, &doc))
	require.NotContains(t, seqScans(doc), s.n.rawTable, "pending destinations: %s", plan)
	require.Contains(t, string(plan), s.n.rawTable+"_pending_pkey", "pending destinations")
	dests, err := s.PendingDestinations(ctx, statsExactUnpublished)
	require.NoError(t, err)
	var counted int64
	for _, n := range dests {
		counted += n
	}
	require.Equal(t, int64(statsExactUnpublished), counted)

	got, err := s.Stats(ctx)
	require.NoError(t, err)
	require.InEpsilon(t, pending-1, got.Pending, 0.1, "beyond 10,000: the estimate")
	require.Equal(t, int64(1), got.Parked)
	require.InEpsilon(t, total-pending, got.Published, 0.1, "the estimate")
	require.False(t, got.OldestPendingAt.IsZero())
	blocked, err := s.Blocked(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(statsExactUnpublished/1000), blocked, "the parked key's later pending records among the first 10,000")
}
