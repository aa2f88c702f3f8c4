package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
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
//   - delete: today's delete-on-publish (settle DELETEs the outbox rows), for reference.
//
// The producer side is measured in the same rounds: 4 clients, OUTBOXKIT_BENCH_TX (default
// 3,000) transactions of one 1 KiB outbox INSERT, without and with the pending-row INSERT.
//
//	PG_DURABLE=1 source scripts/lib/postgres.sh && pg_start
//	go test ./adapters/postgres -run '^$' -bench LayoutPrototype -benchtime 1x -v -timeout 60m
func BenchmarkLayoutPrototype(b *testing.B) {
	testDSN(b)
	n := benchEvents()
	rounds, txs := envInt("OUTBOXKIT_BENCH_ROUNDS", 3), envInt("OUTBOXKIT_BENCH_TX", 3000)
	ctx := context.Background()
	const pendingDDL = `CREATE TABLE outbox_pending (seq bigint PRIMARY KEY, lane integer NOT NULL,
		attempts integer NOT NULL DEFAULT 0, next_attempt_at timestamptz, parked_at timestamptz);
		CREATE INDEX outbox_pending_lane ON outbox_pending (lane, seq)`
	type layout struct{ fetch, settle string }
	layouts := map[string]layout{
		"mark": {`SELECT ` + recordCols + ` FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT 1000`,
			`UPDATE outbox SET published_at = now() WHERE seq = ANY($1) AND published_at IS NULL`},
		"narrow": {`SELECT ` + recordCols + ` FROM outbox JOIN (SELECT seq FROM outbox_pending ORDER BY seq LIMIT 1000) p
			USING (seq) ORDER BY seq`, `DELETE FROM outbox_pending WHERE seq = ANY($1)`},
		"delete": {`SELECT ` + recordCols + ` FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT 1000`,
			`DELETE FROM outbox WHERE seq = ANY($1)`},
	}
	drain := func(name string) float64 {
		b.StopTimer()
		_, d := migratedStore(b, dbOptions{maxConns: 2}, &Options{})
		seed(b, d, core.DefaultLanes, n)
		if name == "narrow" {
			for _, sql := range []string{pendingDDL, `INSERT INTO outbox_pending (seq, lane) SELECT seq, lane FROM outbox`,
				`VACUUM ANALYZE outbox_pending`, `CHECKPOINT`} {
				_, err := d.pool.Exec(ctx, sql)
				require.NoError(b, err)
			}
		}
		b.StartTimer()
		l := layouts[name]
		start := time.Now()
		got := 0
		for {
			rows, err := d.pool.Query(ctx, l.fetch)
			require.NoError(b, err)
			var seqs []int64
			for rows.Next() {
				r, err := scanRecord(rows)
				require.NoError(b, err)
				seqs = append(seqs, r.Seq)
			}
			require.NoError(b, rows.Err())
			if len(seqs) == 0 {
				break
			}
			tag, err := d.pool.Exec(ctx, l.settle, seqs)
			require.NoError(b, err)
			require.Equal(b, int64(len(seqs)), tag.RowsAffected())
			got += len(seqs)
		}
		elapsed := time.Since(start)
		require.Equal(b, n, got)
		return float64(n) / elapsed.Seconds()
	}
	produceRate := func(narrow bool) float64 {
		b.StopTimer()
		_, d := migratedStore(b, dbOptions{maxConns: 6}, &Options{})
		if narrow {
			_, err := d.pool.Exec(ctx, pendingDDL)
			require.NoError(b, err)
		}
		payload := make([]byte, 1024)
		_, _ = rand.Read(payload)
		b.StartTimer()
		saved := b.N // produce runs b.N transactions
		b.N = txs
		defer func() { b.N = saved }()
		elapsed := produce(b, d.pool, 4, false, nil, func(ctx context.Context, tx pgx.Tx, i int64) error {
			var id [13]byte
			_, _ = rand.Read(id[:])
			agg := strconv.FormatInt(i, 10)
			key := "order/" + agg
			lane := core.LaneOf(key, core.DefaultLanes)
			var seq int64
			err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane)
				VALUES ($1, 'order', $2, 'order.created', $3, $4, '{}', $5) RETURNING seq`,
				hex.EncodeToString(id[:]), agg, key, payload, lane).Scan(&seq)
			if err != nil || !narrow {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO outbox_pending (seq, lane) VALUES ($1, $2)`, seq, lane)
			return err
		})
		return float64(txs) / elapsed.Seconds()
	}
	res := map[string][]float64{}
	order := []string{"mark", "narrow", "delete", "produce", "produce_narrow"}
	for r := range rounds {
		if r%2 == 1 {
			slices.Reverse(order)
		}
		got := map[string]float64{}
		for _, v := range order {
			switch v {
			case "produce":
				got[v] = produceRate(false)
			case "produce_narrow":
				got[v] = produceRate(true)
			default:
				got[v] = drain(v)
			}
			res[v] = append(res[v], got[v])
		}
		res["narrow/mark"] = append(res["narrow/mark"], got["narrow"]/got["mark"])
		res["narrow/delete"] = append(res["narrow/delete"], got["narrow"]/got["delete"])
		res["produce_narrow/produce"] = append(res["produce_narrow/produce"], got["produce_narrow"]/got["produce"])
		b.Logf("round %d: drain events/s mark %.0f narrow %.0f delete %.0f; producer tx/s %.0f, with pending row %.0f",
			r, got["mark"], got["narrow"], got["delete"], got["produce"], got["produce_narrow"])
	}
	for k, v := range res {
		b.ReportMetric(median(v), k)
	}
	b.ReportMetric(0, "ns/op")
}
