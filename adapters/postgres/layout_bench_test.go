package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// BenchmarkLayoutPrototype measures, before choosing, what a narrow pending layout would buy on
// PostgreSQL (issue 15, item 3). It is a raw-SQL prototype, not the adapter: the relay's two
// statements per batch (fetch 1,000, then settle them), interleaved over OUTBOXKIT_BENCH_ROUNDS
// rounds (default 3) on OUTBOXKIT_BENCH_EVENTS seeded events (default 200,000, ~1 KiB):
//
//   - mark: today's layout; fetch the unpublished rows in seq order, settle with UPDATE … SET
//     published_at (each ~1 KiB row rewritten);
//   - narrow: the outbox row never changes; a narrow table (seq, lane, attempts, next attempt,
//     parked; primary key seq, index on (lane, seq)) lists the pending events; fetch joins it
//     to the outbox, settle DELETEs its rows;
//   - delete: today's delete-on-publish (settle DELETEs the outbox rows), for reference;
//   - toast: today's statements, but the payload is stored out of line (STORAGE EXTERNAL,
//     toast_tuple_target 128), so a mark rewrites the ~200-byte row and points at the same
//     payload instead of copying it.
//
// The producer side is measured in the same rounds: OUTBOXKIT_LAYOUT_CLIENTS clients (default
// 4), OUTBOXKIT_BENCH_TX (default 3,000) transactions of one 1 KiB outbox INSERT: produce
// without the pending row, produce_narrow with it (one statement: WITH o AS (INSERT …
// RETURNING) INSERT INTO outbox_pending …), produce_trigger_row and produce_trigger_stmt with
// it written by an AFTER INSERT trigger on the outbox (FOR EACH ROW; FOR EACH STATEMENT with a
// transition table), which would keep every writer, and writers of earlier versions during a
// migration, unchanged, and produce_toast with the payload out of line.
// OUTBOXKIT_LAYOUT_VARIANTS (comma-separated names) runs only those.
//
// Every fetch reads the lanes of one loop of OUTBOXKIT_LAYOUT_LANES_HELD lanes (default 64:
// all), round-robin over the groups of lanes l with the same l mod (64 / held), as a relay's
// RelayOptions.InFlight loops hold them (16: a default relay's loop); mark, toast and delete
// fetch through the adapter's fetch function (the relay's plan), narrow through the same kind
// of function on the pending table, and every settle names the fetch's lanes.
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test ./adapters/postgres -run '^$' -bench LayoutPrototype -benchtime 1x -v -timeout 60m
func BenchmarkLayoutPrototype(b *testing.B) {
	testDSN(b)
	n := benchEvents()
	rounds, txs := envInt("OUTBOXKIT_BENCH_ROUNDS", 3), envInt("OUTBOXKIT_BENCH_TX", 3000)
	clients := envInt("OUTBOXKIT_LAYOUT_CLIENTS", 4)
	ctx := context.Background()
	const pendingDDL = `CREATE TABLE outbox_pending (seq bigint PRIMARY KEY, lane integer NOT NULL,
		attempts integer NOT NULL DEFAULT 0, next_attempt_at timestamptz, parked_at timestamptz);
		CREATE INDEX outbox_pending_lane ON outbox_pending (lane, seq)`
	held := envInt("OUTBOXKIT_LAYOUT_LANES_HELD", core.DefaultLanes)
	require.True(b, held >= 1 && core.DefaultLanes%held == 0, "OUTBOXKIT_LAYOUT_LANES_HELD must divide %d", core.DefaultLanes)
	groups := make([][]int32, core.DefaultLanes/held)
	for l := range core.DefaultLanes {
		groups[l%len(groups)] = append(groups[l%len(groups)], int32(l))
	}
	// The narrow fetch, pinned to the pending table's primary key in seq order as the adapter's
	// fetch function is pinned to the pending index.
	const narrowFetchDDL = `CREATE FUNCTION narrow_fetch(p_lanes integer[], p_limit integer) RETURNS SETOF outbox
		LANGUAGE sql STABLE SET enable_sort = off SET enable_bitmapscan = off AS $fn$
		SELECT o.* FROM (SELECT seq FROM outbox_pending WHERE lane = ANY(p_lanes) AND parked_at IS NULL
			AND (next_attempt_at IS NULL OR next_attempt_at <= now()) ORDER BY seq LIMIT p_limit) AS p
		JOIN outbox AS o USING (seq) ORDER BY seq $fn$`
	type layout struct{ fetch, settle string }
	layouts := map[string]layout{
		"mark": {`SELECT ` + recordCols + ` FROM outbox_fetch($1, now(), 1000) ORDER BY seq`,
			`UPDATE outbox SET published_at = now() WHERE seq = ANY($1) AND lane = ANY($2) AND published_at IS NULL`},
		"narrow": {`SELECT ` + recordCols + ` FROM narrow_fetch($1, 1000) ORDER BY seq`,
			`DELETE FROM outbox_pending WHERE seq = ANY($1) AND lane = ANY($2)`},
		"delete": {`SELECT ` + recordCols + ` FROM outbox_fetch($1, now(), 1000) ORDER BY seq`,
			`DELETE FROM outbox WHERE seq = ANY($1) AND lane = ANY($2)`},
	}
	layouts["toast"] = layouts["mark"]
	const triggerRowDDL = pendingDDL + `;
		CREATE FUNCTION outbox_pending_row() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO outbox_pending (seq, lane) VALUES (NEW.seq, NEW.lane); RETURN NULL; END $$;
		CREATE TRIGGER outbox_pending_row AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_pending_row()`
	const triggerStmtDDL = pendingDDL + `;
		CREATE FUNCTION outbox_pending_stmt() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO outbox_pending (seq, lane) SELECT seq, lane FROM new_rows; RETURN NULL; END $$;
		CREATE TRIGGER outbox_pending_stmt AFTER INSERT ON outbox REFERENCING NEW TABLE AS new_rows
			FOR EACH STATEMENT EXECUTE FUNCTION outbox_pending_stmt()`
	const toastDDL = `ALTER TABLE outbox ALTER COLUMN payload SET STORAGE EXTERNAL, SET (toast_tuple_target = 128)`
	// The prototype measures the layouts as they were before migration 0008 chose one: its
	// pending table and trigger go first (the raw statements here would fire the trigger), and
	// the outbox's pending index, which a new outbox no longer has, comes back.
	const before0008 = `DROP TRIGGER outbox_pending_sync ON outbox; DROP TABLE outbox_pending; ` + legacyPendingIndex
	drain := func(name string) float64 {
		b.StopTimer()
		_, d := migratedStore(b, dbOptions{maxConns: 2}, &Options{})
		_, err := d.pool.Exec(ctx, before0008)
		require.NoError(b, err)
		if name == "toast" {
			_, err := d.pool.Exec(ctx, toastDDL)
			require.NoError(b, err)
		}
		seed(b, d, core.DefaultLanes, n)
		if name == "narrow" {
			for _, sql := range []string{pendingDDL, narrowFetchDDL, `INSERT INTO outbox_pending (seq, lane) SELECT seq, lane FROM outbox`,
				`VACUUM ANALYZE outbox_pending`, `CHECKPOINT`} {
				_, err := d.pool.Exec(ctx, sql)
				require.NoError(b, err)
			}
		}
		b.StartTimer()
		l := layouts[name]
		start := time.Now()
		got, empty := 0, 0
		for g := 0; empty < len(groups); g = (g + 1) % len(groups) {
			rows, err := d.pool.Query(ctx, l.fetch, groups[g])
			recs, err := scanRecords(rows, err, 1000)
			require.NoError(b, err)
			var seqs []int64
			for _, r := range recs {
				seqs = append(seqs, r.Seq)
			}
			if len(seqs) == 0 {
				empty++ // every group empty in a row: drained
				continue
			}
			empty = 0
			tag, err := d.pool.Exec(ctx, l.settle, seqs, groups[g])
			require.NoError(b, err)
			require.Equal(b, int64(len(seqs)), tag.RowsAffected())
			got += len(seqs)
		}
		elapsed := time.Since(start)
		require.Equal(b, n, got)
		return float64(n) / elapsed.Seconds()
	}
	produceRate := func(variant string) float64 {
		narrow := variant == "narrow"
		b.StopTimer()
		_, d := migratedStore(b, dbOptions{maxConns: int32(clients) + 2}, &Options{})
		defer d.pool.Close() // now, not at the benchmark's end: rounds of 16 clients run out of server connections
		_, err := d.pool.Exec(ctx, before0008)
		require.NoError(b, err)
		if ddl := map[string]string{"narrow": pendingDDL, "toast": toastDDL, "trigger_row": triggerRowDDL,
			"trigger_stmt": triggerStmtDDL}[variant]; ddl != "" {
			_, err := d.pool.Exec(ctx, ddl)
			require.NoError(b, err)
		}
		payload := make([]byte, 1024)
		_, _ = rand.Read(payload)
		b.StartTimer()
		elapsed := produce(b, txs, d.pool, clients, false, nil, func(ctx context.Context, tx pgx.Tx, i int64) error {
			var id [13]byte
			_, _ = rand.Read(id[:])
			agg := strconv.FormatInt(i, 10)
			key := "order/" + agg
			lane := driver.LaneOf(key, core.DefaultLanes)
			const insert = `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane)
				VALUES ($1, 'order', $2, 'order.created', $3, $4, '{}', $5) RETURNING seq, lane`
			sql := insert
			if narrow { // one statement, one round trip: the pending row from the outbox row's RETURNING
				sql = `WITH o AS (` + insert + `) INSERT INTO outbox_pending (seq, lane) SELECT seq, lane FROM o`
			}
			_, err := tx.Exec(ctx, sql, hex.EncodeToString(id[:]), agg, key, payload, lane)
			return err
		})
		return float64(txs) / elapsed.Seconds()
	}
	res := map[string][]float64{}
	order := []string{"mark", "narrow", "toast", "delete", "produce", "produce_narrow", "produce_toast",
		"produce_trigger_row", "produce_trigger_stmt"}
	if list := os.Getenv("OUTBOXKIT_LAYOUT_VARIANTS"); list != "" {
		names := strings.Split(list, ",")
		order = slices.DeleteFunc(order, func(v string) bool { return !slices.Contains(names, v) })
	}
	for r := range rounds {
		if r%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]float64{}
		for _, v := range order {
			switch v {
			case "produce":
				got[v] = produceRate("")
			case "produce_narrow":
				got[v] = produceRate("narrow")
			case "produce_toast":
				got[v] = produceRate("toast")
			case "produce_trigger_row":
				got[v] = produceRate("trigger_row")
			case "produce_trigger_stmt":
				got[v] = produceRate("trigger_stmt")
			default:
				got[v] = drain(v)
			}
			res[v] = append(res[v], got[v])
		}
		for _, q := range [][2]string{{"narrow", "mark"}, {"narrow", "delete"}, {"toast", "mark"}, {"toast", "delete"},
			{"produce_narrow", "produce"}, {"produce_toast", "produce"}, {"produce_trigger_row", "produce"},
			{"produce_trigger_stmt", "produce"}} {
			if x, ok := got[q[0]]; ok {
				if y, ok := got[q[1]]; ok {
					res[q[0]+"/"+q[1]] = append(res[q[0]+"/"+q[1]], x/y)
				}
			}
		}
		b.Logf("round %d: drain events/s mark %.0f narrow %.0f toast %.0f delete %.0f; producer tx/s %.0f, with pending row %.0f, toasted %.0f, row trigger %.0f, statement trigger %.0f",
			r, got["mark"], got["narrow"], got["toast"], got["delete"], got["produce"], got["produce_narrow"], got["produce_toast"],
			got["produce_trigger_row"], got["produce_trigger_stmt"])
	}
	for k, v := range res {
		b.ReportMetric(median(v), k)
	}
	b.ReportMetric(0, "ns/op")
}
