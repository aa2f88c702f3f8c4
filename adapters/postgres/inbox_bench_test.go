package postgres

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// inboxLayouts are the inbox layouts the inbox benchmarks compare: a plain table, and the
// partitioned inbox (daily partitions).
var inboxLayouts = []struct {
	name string
	part *Partitioning
}{{"plain", nil}, {"partitioned", &Partitioning{}}}

// seedIdentities writes n records of consumer "c", as an inbox holds them (a 36-byte UUID as
// event ID, the SHA-256 digest, no source or tenant), all occurred and processed at at (a
// partitioned inbox's partition of at must exist), then vacuums, analyses and checkpoints.
func seedIdentities(ctx context.Context, tb testing.TB, s *Store[pgx.Tx], n int, at time.Time) {
	tb.Helper()
	const step = 1_000_000 // a statement at a time, so that the server's memory stays small
	for lo := 0; lo < n; lo += step {
		_, err := s.db.exec(ctx, `INSERT INTO `+s.n.inbox+` (consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
			SELECT 'c', md5(g::text)::uuid::text, sha256(g::text::bytea), 'queue:' || g, 1, $3, $3
			FROM generate_series($1::bigint, $2::bigint - 1) AS g`, lo, min(lo+step, n), at)
		require.NoError(tb, err)
	}
	for _, sql := range []string{"VACUUM ANALYZE " + s.n.inbox, "CHECKPOINT"} {
		_, err := s.db.exec(ctx, sql)
		require.NoError(tb, err)
	}
}

// inboxBytes is the size of the schema's inbox (table, partitions, TOAST and indexes).
func inboxBytes(ctx context.Context, tb testing.TB, s *Store[pgx.Tx]) int64 {
	tb.Helper()
	var v int64
	require.NoError(tb, queryRow(ctx, s.db, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = $1 AND c.relkind = 'r' AND c.relname LIKE 'inbox%' AND c.relname NOT IN ('inbox_horizons', 'inbox_versions')`,
		[]any{s.n.rawSchema}, &v))
	return v
}

// BenchmarkInboxReclaim compares how Inbox.Prune reclaims OUTBOXKIT_BENCH_INBOX_RECLAIM
// (default 10,000,000) records of one consumer, processed three days ago, on a durable
// server: the plain inbox deletes them, MaxPruneLimit (100,000) a statement; the partitioned
// one (daily partitions, Options.InboxPartitioning) drops their partition. Reported per
// layout: bytes per record (table and indexes, vacuumed), the records reclaimed per second, the
// WAL the prune wrote, and the inbox's bytes after it, without a VACUUM.
//
//	go test ./adapters/postgres -run '^$' -bench '^BenchmarkInboxReclaim$' -benchtime 1x -count 3
func BenchmarkInboxReclaim(b *testing.B) {
	testDSN(b)
	n := 10_000_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_INBOX_RECLAIM")); err == nil && v > 0 {
		n = v
	}
	for _, layout := range inboxLayouts {
		b.Run(layout.name, func(b *testing.B) {
			ctx := context.Background()
			var total time.Duration
			var wal, before, after int64
			for range b.N {
				b.StopTimer()
				s, _ := migratedStore(b, dbOptions{}, &Options{InboxPartitioning: layout.part})
				var now time.Time
				require.NoError(b, queryRow(ctx, s.db, s.q.now, nil, &now))
				at := now.Add(-72 * time.Hour)
				if layout.part != nil {
					r, _ := s.inboxRanges()
					old := r.at(at)
					require.NoError(b, s.createPartition(ctx, s.db, old))
					at = old.lo.Add(time.Hour)
				}
				seedIdentities(ctx, b, s, n, at)
				in, err := core.NewInbox(ctx, s, nil)
				require.NoError(b, err)
				var lsn string
				require.NoError(b, queryRow(ctx, s.db, `SELECT pg_current_wal_lsn()::text`, nil, &lsn))
				before += inboxBytes(ctx, b, s)
				b.StartTimer()
				began := time.Now()
				got, err := in.Prune(ctx, "c", now.Add(-time.Hour), core.MaxPruneLimit)
				total += time.Since(began)
				b.StopTimer()
				require.NoError(b, err)
				require.Equal(b, n, got, "records reclaimed")
				var w int64
				require.NoError(b, queryRow(ctx, s.db, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, []any{lsn}, &w))
				wal += w
				after += inboxBytes(ctx, b, s)
				b.StartTimer()
			}
			runs := float64(b.N)
			b.ReportMetric(float64(before)/runs/float64(n), "bytes/record")
			b.ReportMetric(float64(n)*runs/total.Seconds(), "records/s")
			b.ReportMetric(total.Seconds()/runs, "prune_s")
			b.ReportMetric(float64(wal)/runs/(1<<20), "wal_MiB")
			b.ReportMetric(float64(after)/runs/(1<<20), "after_MiB")
		})
	}
}

// BenchmarkInboxPartitionedApply is BenchmarkInboxApply's consumers=8/set=100 on each inbox
// layout: the partitioned inbox locks every key and looks for it in every partition before it
// inserts. "partitioned" has its current partition and 7 empty ones ahead; "daily+30d" also
// holds 30 earlier daily partitions of 100,000 records each, as a daily inbox kept for 30 days
// does; "weekly+30d" the same 3,000,000 records in 4 earlier weekly partitions (Interval
// 168h). msgs/s is the metric.
//
//	go test ./adapters/postgres -run '^$' -bench '^BenchmarkInboxPartitionedApply$' -benchtime 20000x -count 3
func BenchmarkInboxPartitionedApply(b *testing.B) {
	testDSN(b)
	type layout struct {
		name string
		part *Partitioning
		past int // earlier partitions, with 3,000,000 records between them
	}
	for _, l := range []layout{
		{"plain", nil, 0},
		{"partitioned", &Partitioning{}, 0},
		{"daily+30d", &Partitioning{}, 30},
		{"weekly+30d", &Partitioning{Interval: 7 * 24 * time.Hour, Ahead: 1}, 4},
	} {
		b.Run(l.name, func(b *testing.B) {
			ctx := context.Background()
			s, d := migratedStore(b, dbOptions{maxConns: 10}, &Options{InboxPartitioning: l.part})
			if l.past > 0 {
				r, _ := s.inboxRanges()
				var now time.Time
				require.NoError(b, queryRow(ctx, s.db, s.q.now, nil, &now))
				p := r.at(now)
				for range l.past {
					p = r.at(p.lo.Add(-time.Hour))
					require.NoError(b, s.createPartition(ctx, s.db, p))
					_, err := s.db.exec(ctx, `INSERT INTO `+s.n.inbox+` (consumer, event_id, digest, outcome, occurred_at, processed_at)
						SELECT 'bench', md5($1 || g::text)::uuid::text, sha256(g::text::bytea), 1, $2, $2
						FROM generate_series(1, $3::int) AS g`, p.name, p.lo.Add(time.Hour), 3_000_000/l.past)
					require.NoError(b, err)
				}
				_, err := s.db.exec(ctx, "VACUUM ANALYZE "+s.n.inbox)
				require.NoError(b, err)
			}
			_, err := d.pool.Exec(ctx, `CREATE TABLE bench_effects (id text PRIMARY KEY)`)
			require.NoError(b, err)
			in, err := core.NewInbox[pgx.Tx](ctx, s, nil)
			require.NoError(b, err)
			testkit.InboxApplySet(b, in, 8, 100, func(ctx context.Context, tx pgx.Tx, applied []core.InboxMessage) error {
				ids := make([]string, len(applied))
				for i, m := range applied {
					ids[i] = m.EventID
				}
				_, err := tx.Exec(ctx, `INSERT INTO bench_effects (id) SELECT unnest($1::text[])`, ids)
				return err
			})
		})
	}
}
