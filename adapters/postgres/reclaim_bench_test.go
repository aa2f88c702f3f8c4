package postgres

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// BenchmarkReclaim compares how core.CleanupOutbox reclaims OUTBOXKIT_BENCH_RECLAIM (default
// 1,000,000) published events of ~1 KiB, three days old, on a durable server: the plain outbox
// deletes them in batches (DefaultPruneLimit rows a statement); the partitioned one (daily
// partitions, Options.Partitioning) drops their sealed partition and their IDs' rows of the
// side table. The events are written as published rows (published_at set, no pending row),
// as the earlier layout left them, then vacuumed, analysed and checkpointed. Reported per
// layout: rows reclaimed per second, the WAL the cleanup wrote, and the schema's bytes
// (tables and indexes) before and after it, without a VACUUM.
//
//	go test ./adapters/postgres -run '^$' -bench '^BenchmarkReclaim$' -benchtime 1x -count 3
func BenchmarkReclaim(b *testing.B) {
	testDSN(b)
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_RECLAIM")); err == nil && v > 0 {
		n = v
	}
	for _, partitioned := range []bool{false, true} {
		name := "plain"
		opts := &Options{}
		if partitioned {
			name, opts.Partitioning = "partitioned", &Partitioning{}
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			var total time.Duration
			var wal, before, after int64
			for range b.N {
				b.StopTimer()
				s, d := migratedStore(b, dbOptions{}, opts)
				var now time.Time
				require.NoError(b, d.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
				at := now.Add(-72 * time.Hour)
				if partitioned {
					old := s.partitionAt(at)
					require.NoError(b, s.createPartition(ctx, s.db, old))
					at = old.lo.Add(time.Hour)
					_, err := d.pool.Exec(ctx, `INSERT INTO outbox_ids (id, created_at)
						SELECT 'ev-' || g, $1::timestamptz FROM generate_series(0, $2::int - 1) AS g`, at, n)
					require.NoError(b, err)
				}
				seedSeriesAt(b, d, n, &at)
				size := func() int64 {
					var v int64
					require.NoError(b, d.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
						FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
						WHERE ns.nspname = $1 AND c.relkind = 'r'`, d.schema).Scan(&v))
					return v
				}
				var lsn string
				require.NoError(b, d.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn))
				before += size()
				b.StartTimer()
				began := time.Now()
				got, err := core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Hour})
				total += time.Since(began)
				b.StopTimer()
				require.NoError(b, err)
				require.Equal(b, n, got, "rows reclaimed")
				var w int64
				require.NoError(b, d.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, lsn).Scan(&w))
				wal += w
				after += size()
				b.StartTimer()
			}
			runs := float64(b.N)
			b.ReportMetric(float64(n)*runs/total.Seconds(), "rows/s")
			b.ReportMetric(total.Seconds()/runs, "cleanup_s")
			b.ReportMetric(float64(wal)/runs/(1<<20), "wal_MiB")
			b.ReportMetric(float64(before)/runs/(1<<20), "before_MiB")
			b.ReportMetric(float64(after)/runs/(1<<20), "after_MiB")
		})
	}
}
