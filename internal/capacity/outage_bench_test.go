//go:build unix

package capacity_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// BenchmarkOutage is the outage accumulation of BENCHMARKS.md (issue 33): on a durable
// PostgreSQL, producers write at a steady OUTBOXKIT_OUTAGE_RATE events/s (default 5,000; 16
// goroutines, OUTBOXKIT_OUTAGE_PER_TX events per Outbox.Write transaction, default 10; 1 KiB
// payloads over 10,000 keys) while no relay runs, until OUTBOXKIT_OUTAGE_PENDING events
// (default 5,000,000) are pending; then one relay with default options (FixedRate with
// OUTBOXKIT_OUTAGE_FIXED=1) starts, sending through the SQS sink to the capacity model's
// 12/80 ms endpoint, while the producers go on at the same rate, until less than 500 events
// are pending (at most OUTBOXKIT_OUTAGE_CATCHUP_SECONDS, default 3,600). Then the producers
// stop and core.CleanupOutbox (retention 1 ms) removes the published rows, followed by a
// VACUUM of the schema's tables (what autovacuum would do later).
//
// It runs for each layout of OUTBOXKIT_OUTAGE_LAYOUTS (default "plain,partitioned": the
// outbox as migrated by default, and with postgres.Options.Partitioning, daily partitions),
// one after the other, each in a fresh schema dropped afterwards, and logs, per layout: the
// fill's and the catch-up's rates, the catch-up ratio (drain / producers' rate meanwhile), the
// producers' rate kept, commit → publish p50/p99 of the events written during the catch-up,
// the schema's bytes (tables, indexes, the pending table) and the WAL written at the end of
// the fill, the largest during the catch-up, at its end, and after cleanup and VACUUM, the
// dead tuples (largest, and at each point) and autovacuum runs, cleanup's time, and the
// process's largest RSS and Go heap during the catch-up (the relay runs in this process,
// beside the producers). Every 30 s a progress line is logged (-test.v).
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test -c -o /tmp/cap.test ./internal/capacity && cd internal/capacity
//	/tmp/cap.test -test.run '^$' -test.bench Outage -test.benchtime 1x -test.timeout 3h -test.v
func BenchmarkOutage(b *testing.B) {
	cfg := outageConfig{
		pending: int64(num("OUTBOXKIT_OUTAGE_PENDING", 5_000_000)),
		rate:    num("OUTBOXKIT_OUTAGE_RATE", 5000),
		perTx:   int(num("OUTBOXKIT_OUTAGE_PER_TX", 10)),
		cap:     time.Duration(num("OUTBOXKIT_OUTAGE_CATCHUP_SECONDS", 3600) * float64(time.Second)),
		fixed:   os.Getenv("OUTBOXKIT_OUTAGE_FIXED") == "1",
	}
	layouts := os.Getenv("OUTBOXKIT_OUTAGE_LAYOUTS")
	if layouts == "" {
		layouts = "plain,partitioned"
	}
	h := newHarness(b, loadConfig())
	b.ResetTimer()
	for range b.N {
		for _, layout := range strings.Split(layouts, ",") {
			layout = strings.TrimSpace(layout)
			require.Contains(b, []string{"plain", "partitioned"}, layout, "OUTBOXKIT_OUTAGE_LAYOUTS")
			m := h.outage(cfg, layout)
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			var sb strings.Builder
			for _, k := range keys {
				fmt.Fprintf(&sb, "\n  %s = %.6g", k, m[k])
				b.ReportMetric(m[k], layout+"_"+k)
			}
			b.Logf("outage %s:%s", layout, sb.String())
		}
	}
	b.ReportMetric(0, "ns/op")
}

type outageConfig struct {
	pending int64
	rate    float64
	perTx   int
	cap     time.Duration
	fixed   bool
}

// footprint is what the database holds for one schema at one moment.
type footprint struct {
	tables, indexes, pending int64 // bytes: heap and TOAST, indexes, outbox_pending (with its indexes)
	wal                      int64 // WAL bytes written since the run began
	dead, autovacuums        int64 // n_dead_tup and autovacuum_count, summed over the schema's tables
}

func (h *harness) footprint(ctx context.Context, schema, walStart string) footprint {
	var f footprint
	err := h.admin.QueryRow(ctx, `
		SELECT coalesce(sum(pg_table_size(c.oid)), 0)::bigint, coalesce(sum(pg_indexes_size(c.oid)), 0)::bigint,
		       coalesce(sum(pg_total_relation_size(c.oid)) FILTER (WHERE c.relname = 'outbox_pending'), 0)::bigint,
		       pg_wal_lsn_diff(pg_current_wal_lsn(), $2::pg_lsn)::bigint
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind = 'r'`, schema, walStart).Scan(&f.tables, &f.indexes, &f.pending, &f.wal)
	require.NoError(h.b, err)
	err = h.admin.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint, coalesce(sum(autovacuum_count), 0)::bigint
		FROM pg_stat_user_tables WHERE schemaname = $1`, schema).Scan(&f.dead, &f.autovacuums)
	require.NoError(h.b, err)
	return f
}

// raise keeps, field by field, the larger of f's and g's sizes and dead tuples.
func (f *footprint) raise(g footprint) {
	f.tables, f.indexes, f.pending = max(f.tables, g.tables), max(f.indexes, g.indexes), max(f.pending, g.pending)
	f.dead = max(f.dead, g.dead)
}

func (f footprint) add(m map[string]float64, at string) {
	m[at+"_tables_MiB"] = float64(f.tables) / (1 << 20)
	m[at+"_indexes_MiB"] = float64(f.indexes) / (1 << 20)
	m[at+"_pending_table_MiB"] = float64(f.pending) / (1 << 20)
	m[at+"_wal_MiB"] = float64(f.wal) / (1 << 20)
	m[at+"_dead_tuples"] = float64(f.dead)
	m[at+"_autovacuum_runs"] = float64(f.autovacuums)
}

// memory returns this process's resident set and Go heap (objects) in bytes.
func memory() (rss, heap int64) {
	if b, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			pages, _ := strconv.ParseInt(f[1], 10, 64)
			rss = pages * int64(os.Getpagesize())
		}
	}
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return rss, int64(s[0].Value.Uint64())
}

// outage runs the outage accumulation on one layout.
func (h *harness) outage(cfg outageConfig, layout string) map[string]float64 {
	const producers, sample = 16, 10 * time.Second
	ctx := context.Background()
	h.b.StopTimer()
	defer h.b.StartTimer()
	schema := "outage_" + randHex()
	_, err := h.admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(h.b, err)
	defer func() {
		_, err := h.admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		require.NoError(h.b, err)
	}()
	db := h.pool(producers + 8)
	defer db.Close()
	opts := &postgres.Options{Schema: schema}
	if layout == "partitioned" {
		opts.Partitioning = &postgres.Partitioning{}
	}
	store, err := postgres.New(db, opts)
	require.NoError(h.b, err)
	require.NoError(h.b, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(h.b, err)
	var walStart string
	require.NoError(h.b, h.admin.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walStart))

	inner, err := sqs.New(h.client, nil)
	require.NoError(h.b, err)
	sink := &ageSink{Sink: inner}

	// Producers: transaction t is due at start + t × interval, whatever the relay does.
	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var next, produced atomic.Int64
	var failed atomic.Value
	tag := randHex()
	interval := float64(time.Second) * float64(cfg.perTx) / cfg.rate
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			evs := make([]core.Event, cfg.perTx)
			for pctx.Err() == nil {
				t := next.Add(1) - 1
				if d := time.Until(start.Add(time.Duration(float64(t) * interval))); d > 0 {
					select {
					case <-pctx.Done():
						return
					case <-time.After(d):
					}
				}
				for j := range evs {
					i := t*int64(cfg.perTx) + int64(j)
					agg := strconv.Itoa(int(i % keys))
					evs[j] = core.Event{ID: "o-" + tag + "-" + strconv.FormatInt(i, 10), AggregateType: "order", AggregateID: agg,
						Type: "order.updated", PartitionKey: "order/" + agg, Payload: payload}
				}
				err := pgx.BeginFunc(pctx, db, func(tx pgx.Tx) error {
					_, err := ob.Write(pctx, tx, evs...)
					return err
				})
				if err != nil {
					if pctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
				produced.Add(int64(cfg.perTx))
			}
		})
	}
	check := func() {
		if err, _ := failed.Load().(error); err != nil {
			h.b.Fatalf("producer: %v", err)
		}
	}

	// The outage: no relay until cfg.pending events are pending.
	lastLog := time.Now()
	for produced.Load() < cfg.pending {
		check()
		time.Sleep(100 * time.Millisecond)
		if time.Since(lastLog) >= 30*time.Second {
			lastLog = time.Now()
			h.b.Logf("outage %s: %d pending after %s", layout, produced.Load(), time.Since(start).Round(time.Second))
		}
	}
	fillTime := time.Since(start)
	m := map[string]float64{}
	atFill := produced.Load()
	m["fill_seconds"] = fillTime.Seconds()
	m["fill_events/s"] = float64(atFill) / fillTime.Seconds()
	before := h.footprint(ctx, schema, walStart)
	before.add(m, "1_outage_end")
	m["bytes/event"] = float64(before.tables+before.indexes) / float64(atFill)
	m["wal_bytes/event_written"] = float64(before.wal) / float64(atFill)

	// The catch-up: one relay, producers going on.
	var since time.Time
	require.NoError(h.b, h.admin.QueryRow(ctx, "SELECT now()").Scan(&since))
	sink.since.Store(&since)
	r := h.newRelay(&outbox{schema: schema, db: db, store: store}, sink, core.RelayOptions{FixedRate: cfg.fixed})
	rctx, stopRelay := context.WithCancel(ctx)
	done := make(chan error, 1)
	catchStart := time.Now()
	p0 := produced.Load()
	go func() { done <- r.Run(rctx) }()
	var peak footprint
	var peakRSS, peakHeap int64
	lastSample := time.Time{}
	caughtUp := 0.0
	for {
		check()
		p := produced.Load()
		if p-int64(r.Stats().Published) < caughtUpSlack {
			caughtUp = 1
			break
		}
		if time.Since(catchStart) > cfg.cap {
			break
		}
		if rss, heap := memory(); rss > peakRSS || heap > peakHeap {
			peakRSS, peakHeap = max(peakRSS, rss), max(peakHeap, heap)
		}
		if time.Since(lastSample) >= sample {
			lastSample = time.Now()
			f := h.footprint(ctx, schema, walStart)
			peak.raise(f)
			if time.Since(lastLog) >= 30*time.Second {
				lastLog = time.Now()
				h.b.Logf("outage %s: catch-up %s: %d pending, published %d, rss %d MiB, dead tuples %d, autovacuums %d",
					layout, time.Since(catchStart).Round(time.Second), p-int64(r.Stats().Published), r.Stats().Published,
					peakRSS>>20, f.dead, f.autovacuums)
			}
		}
		select {
		case err := <-done:
			h.b.Fatalf("relay stopped: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	catchTime := time.Since(catchStart)
	published := r.Stats().Published
	during := produced.Load() - p0
	// A graceful stop: the batches in flight finish and are settled.
	sctx, cancelShutdown := context.WithTimeout(ctx, time.Minute)
	require.NoError(h.b, r.Shutdown(sctx))
	cancelShutdown()
	require.NoError(h.b, <-done)
	stopRelay()
	stopProducers()
	wg.Wait()
	check()
	after := h.footprint(ctx, schema, walStart)
	peak.raise(after)
	peak.wal, peak.autovacuums = after.wal, after.autovacuums
	peak.add(m, "2_catchup_peak")
	after.add(m, "3_catchup_end")
	m["catchup_caught_up"] = caughtUp
	m["catchup_seconds"] = catchTime.Seconds()
	m["catchup_drain_events/s"] = float64(published) / catchTime.Seconds()
	m["catchup_producers_events/s"] = float64(during) / catchTime.Seconds()
	m["catchup_ratio"] = float64(published) / float64(during)
	m["producers_kept"] = float64(during) / catchTime.Seconds() / cfg.rate
	m["catchup_peak_rss_MiB"] = float64(peakRSS) / (1 << 20)
	m["catchup_peak_heap_MiB"] = float64(peakHeap) / (1 << 20)
	if rs := r.Stats(); rs.Fetches > 0 {
		h.b.Logf("outage %s: per batch: fetch %s, send %s, settle %s (%d batches); rate cuts %d", layout,
			rs.FetchTime/time.Duration(rs.Fetches), rs.SendTime/time.Duration(rs.Fetches), rs.SettleTime/time.Duration(rs.Fetches),
			rs.Fetches, rs.RateCuts)
	}
	m["catchup_p50_ms"], m["catchup_p99_ms"] = sink.quantile(0.50), sink.quantile(0.99)

	// Reclaim: cleanup of every published row, then VACUUM (autovacuum's work, done now).
	cleanStart := time.Now()
	deleted, err := core.CleanupOutbox(ctx, store, &core.CleanupOptions{Retention: time.Millisecond})
	require.NoError(h.b, err)
	m["cleanup_seconds"] = time.Since(cleanStart).Seconds()
	m["cleanup_rows"] = float64(deleted)
	cleaned := h.footprint(ctx, schema, walStart)
	cleaned.add(m, "4_after_cleanup")
	vacuum, err := vacuumAll(ctx, h.admin, schema)
	require.NoError(h.b, err)
	vacStart := time.Now()
	_, err = h.admin.Exec(ctx, vacuum)
	require.NoError(h.b, err)
	m["vacuum_seconds"] = time.Since(vacStart).Seconds()
	h.footprint(ctx, schema, walStart).add(m, "5_after_vacuum")
	return m
}

// vacuumAll is a VACUUM of every table of schema (partitions through their parent).
func vacuumAll(ctx context.Context, db *pgxpool.Pool, schema string) (string, error) {
	rows, err := db.Query(ctx, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition`, schema)
	if err != nil {
		return "", err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	return "VACUUM " + strings.Join(names, ", "), nil
}

// ageSink records, in a histogram of 2% buckets, the age at acknowledgement (from the event's
// CreatedAt, the database clock at its transaction's start, to the sink's acknowledgement)
// of every event created after since: the commit → publish latency plus the transaction's
// length, without keeping anything per event (a catch-up holds millions in flight).
type ageSink struct {
	core.Sink
	since  atomic.Pointer[time.Time]
	mu     sync.Mutex
	counts [1200]uint64 // bucket k: ages in [1.02^(k-1), 1.02^k) ms; bucket 0: below 1 ms
	n      uint64
}

func (s *ageSink) Send(ctx context.Context, msgs []core.Message) []error {
	res := s.Sink.Send(ctx, msgs)
	since := s.since.Load()
	if since == nil {
		return res
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range msgs {
		if res[k] != nil || msgs[k].CreatedAt.Before(*since) {
			continue
		}
		ms := float64(now.Sub(msgs[k].CreatedAt).Microseconds()) / 1000
		b := 0
		if ms >= 1 {
			b = min(int(math.Log(ms)/math.Log(1.02))+1, len(s.counts)-1)
		}
		s.counts[b]++
		s.n++
	}
	return res
}

// quantile is the upper bound (ms) of the bucket holding quantile q.
func (s *ageSink) quantile(q float64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(s.n)))
	var seen uint64
	for b, c := range s.counts {
		if seen += c; seen >= want {
			return math.Pow(1.02, float64(b))
		}
	}
	return math.Inf(1)
}
