package postgres

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// TestFetchRunsWithoutJIT: the fetch functions run with jit = off (migration 0010). A SQL
// function with SET clauses plans its statement for parameters it cannot see, so behind a
// large backlog the estimated cost passes the JIT thresholds and every fetch compiles its
// plan first (0.7 s a fetch at 5M pending events: BENCHMARKS.md, outage accumulation). Here
// the thresholds are set to 0 so that any estimate passes them, and auto_explain sends the
// plan of every statement inside the function to this session: the fetch function's plan
// has no JIT section, and the same statement in a function without the setting (its
// definition copied, the control) has one, so the check fails without the migration.
func TestFetchRunsWithoutJIT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, nil)
	var jitAvailable bool
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&jitAvailable))
	require.True(t, jitAvailable, "this server has no JIT provider: the check below would prove nothing")

	cfg, err := pgx.ParseConfig(testDSN(t))
	require.NoError(t, err)
	var mu sync.Mutex
	var plans []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		plans = append(plans, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for _, set := range []string{
		"SET search_path = " + d.schema, "LOAD 'auto_explain'",
		"SET auto_explain.log_min_duration = 0", "SET auto_explain.log_nested_statements = on",
		"SET auto_explain.log_level = 'notice'", "SET client_min_messages = 'notice'",
		"SET jit = on", "SET jit_above_cost = 0", "SET jit_inline_above_cost = 0", "SET jit_optimize_above_cost = 0",
	} {
		_, err := conn.Exec(ctx, set)
		require.NoError(t, err, set)
	}
	// The control: the pending layout's fetch function as migration 0008 created it, without
	// migration 0010's setting.
	var def string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_get_functiondef($1::regproc)`, s.n.pendingFetchFn).Scan(&def))
	control := d.schema + ".fetch_control"
	head, body, ok := strings.Cut(def, "(")
	require.True(t, ok, def)
	require.Contains(t, head, "CREATE OR REPLACE FUNCTION ")
	def = "CREATE OR REPLACE FUNCTION " + control + "(" + body
	def = strings.Replace(def, " SET jit TO 'off'\n", "", 1)
	_, err = conn.Exec(ctx, def)
	require.NoError(t, err)

	fetch := func(fn string) string {
		mu.Lock()
		plans = nil
		mu.Unlock()
		_, err := conn.Exec(ctx, `SELECT count(*) FROM `+fn+`('{0,1,2,3}', NULL, 1000)`)
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for _, p := range plans {
			if !strings.Contains(p, "SELECT count(*) FROM") { // the function's inner statement
				return p
			}
		}
		t.Fatalf("auto_explain sent no plan of the statement inside %s: %q", fn, plans)
		return ""
	}
	require.Contains(t, fetch(control), "JIT:", "the control compiles its plan")
	require.NotContains(t, fetch(s.n.pendingFetchFn), "JIT:", "the fetch function compiles its plan")
	require.NotContains(t, fetch(s.n.fetchFn), "JIT:", "the earlier layout's fetch function compiles its plan")
	require.NotContains(t, fetch(s.n.pendingWalkFn), "JIT:", "the walk function compiles its plan")

	// The fetch statement around the walk function (migration 0011) is planned with the
	// session's settings: its estimate (the function's 1,000 rows, one primary-key lookup each)
	// stays below the server's default thresholds for any batch size, and the same statement
	// with the thresholds at 0 (the control) compiles.
	explain := func() string {
		var plan strings.Builder
		rows, err := conn.Query(ctx, "EXPLAIN "+s.q.fetch, []int32{0, 1, 2, 3}, nil, 100_000)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		return plan.String()
	}
	require.Contains(t, explain(), "JIT:", "the control: the fetch statement with the thresholds at 0")
	for _, set := range []string{"RESET jit_above_cost", "RESET jit_inline_above_cost", "RESET jit_optimize_above_cost"} {
		_, err := conn.Exec(ctx, set)
		require.NoError(t, err, set)
	}
	require.NotContains(t, explain(), "JIT:", "the fetch statement compiles its plan at the default thresholds")
}

// TestFetchReturnsSeqOrder: Fetch returns the records in seq order even when its statement
// returns them in another order (its rows come in the walk's order through a nested loop, which
// SQL does not promise), here reversed.
func TestFetchReturnsSeqOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, &Options{Lanes: 1})
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		for i := range 5 {
			if _, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: strconv.Itoa(i), Type: "t"}); err != nil {
				return err
			}
		}
		return nil
	}))
	s.q.fetch = "SELECT * FROM (" + s.q.fetch + ") AS f ORDER BY seq DESC"
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: []driver.Lease{{Lane: 0}}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 5)
	for i := 1; i < len(recs); i++ {
		require.Less(t, recs[i-1].Seq, recs[i].Seq, "record %d", i)
	}
}

// TestSettleLogCompression: migration 0011 compresses the settle log's seq lists with lz4 (this
// project's servers have it) instead of pglz, and settles then write lz4 lists.
func TestSettleLogCompression(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 1})
	var method string
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT attcompression::text FROM pg_attribute
		WHERE attrelid = $1::regclass AND attname = 'seqs'`, s.n.settled).Scan(&method))
	require.Equal(t, "l", method, "the settle log's seqs column compresses with lz4")
	// A list long enough to be compressed, as a settle of 1,000 records writes it.
	_, err := d.pool.Exec(ctx, `INSERT INTO `+s.n.settled+` (at, min_seq, max_seq, seqs)
		SELECT now(), 1, 4000, array_agg(g) FROM generate_series(1, 4000, 4) AS g`)
	require.NoError(t, err)
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT pg_column_compression(seqs) FROM `+s.n.settled).Scan(&method))
	require.Equal(t, "lz4", method)
}
