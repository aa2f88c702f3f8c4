package postgres

// Benchmarks against a real server (skipped when OUTBOXKIT_POSTGRES_DSN is unset; not run in
// CI). For figures that claim durability, start the server with PG_DURABLE=1 (fsync and
// synchronous_commit on):
//
//	PG_DURABLE=1 source scripts/lib/postgres.sh && pg_start
//	go test ./adapters/postgres -run '^$' -bench 'Drain|Produce' -count 3 -timeout 60m
//
// BenchmarkDrain seeds OUTBOXKIT_BENCH_EVENTS (default 200,000) committed events of ~1 KiB over
// 10,000 keys, then measures draining them: through core.Relay with 1, 2 and 4 relays (mark
// and delete modes) into a null sink, and, in the same run, the raw-SQL ceiling (a bare
// DELETE ... RETURNING loop, 1,000 rows per statement). BenchmarkProduce measures producer
// transactions: one domain row, versus one domain row plus one outbox row, versus that plus a
// Notify after each commit (with a listener connected).

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

const benchKeys = 10000

func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 200000
}

var nullSink = core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
	return make([]error, len(msgs))
})

// seed writes n events as core.Outbox would (same lanes), with COPY, then vacuums, analyses and
// checkpoints so that every variant starts from the same state.
func seed(b *testing.B, d *testDB, lanes, n int) {
	b.Helper()
	ctx := context.Background()
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	rows := make([][]any, n)
	for i := range rows {
		agg := strconv.Itoa(i % benchKeys)
		key := "order/" + agg
		rows[i] = []any{fmt.Sprintf("ev-%d", i), "order", agg, int64(0), "order.created", key,
			payload, "{}", int32(core.LaneOf(key, lanes))}
	}
	_, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.schema, "outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "type", "partition_key", "payload", "headers", "lane"},
		pgx.CopyFromRows(rows))
	require.NoError(b, err)
	for _, sql := range []string{"VACUUM ANALYZE outbox", "CHECKPOINT"} {
		_, err := d.pool.Exec(ctx, sql)
		require.NoError(b, err)
	}
}

func BenchmarkDrain(b *testing.B) {
	testDSN(b)
	n := benchEvents()
	for _, c := range []struct {
		workers int
		delete  bool
	}{{1, false}, {2, false}, {4, false}, {1, true}} {
		mode := "mark"
		if c.delete {
			mode = "delete"
		}
		b.Run(fmt.Sprintf("relay/%s/workers=%d", mode, c.workers), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				s, d := migratedStore(b, dbOptions{maxConns: int32(4 * c.workers)}, &Options{})
				seed(b, d, core.DefaultLanes, n)
				b.StartTimer()
				total += drainWithRelays(b, s, c.workers, c.delete, n)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
	b.Run("raw_delete_returning", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			b.StopTimer()
			_, d := migratedStore(b, dbOptions{maxConns: 2}, &Options{})
			seed(b, d, core.DefaultLanes, n)
			b.StartTimer()
			start := time.Now()
			got := 0
			for {
				rows, err := d.pool.Query(context.Background(), `DELETE FROM outbox WHERE seq IN (
					SELECT seq FROM outbox ORDER BY seq LIMIT 1000) RETURNING `+recordCols)
				require.NoError(b, err)
				k := 0
				for rows.Next() {
					_, err := scanRecord(rows)
					require.NoError(b, err)
					k++
				}
				require.NoError(b, rows.Err())
				got += k
				if k == 0 {
					break
				}
			}
			total += time.Since(start)
			require.Equal(b, n, got)
		}
		b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
	})
}

// drainWithRelays runs workers relays until n events were marked, and returns the time taken.
func drainWithRelays(b *testing.B, s *Store[pgx.Tx], workers int, del bool, n int) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relays := make([]*core.Relay, workers)
	for i := range relays {
		r, err := core.NewRelay(s, nullSink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
			Owner: fmt.Sprintf("bench-%d", i), BatchSize: 1000, PollInterval: 10 * time.Millisecond,
			DeleteOnPublish: del,
		})
		require.NoError(b, err)
		relays[i] = r
	}
	start := time.Now()
	var wg sync.WaitGroup
	for _, r := range relays {
		wg.Go(func() { _ = r.Run(ctx) })
	}
	for {
		var done uint64
		for _, r := range relays {
			done += r.Stats().Published
		}
		if done >= uint64(n) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return elapsed
}

func BenchmarkProduce(b *testing.B) {
	testDSN(b)
	ctx := context.Background()
	s, d := migratedStore(b, dbOptions{maxConns: 20}, &Options{})
	_, err := d.pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL,
		amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(b, err)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(b, err)
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	// A listener, as a relay would hold, so that notifications are delivered somewhere.
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	wake, err := s.Wakeups(lctx)
	require.NoError(b, err)
	go func() {
		for {
			select {
			case <-lctx.Done():
				return
			case <-wake:
			}
		}
	}()
	for _, clients := range []int{1, 4, 16} {
		for _, variant := range []string{"domain", "domain+outbox", "domain+outbox+notify"} {
			withOutbox := variant != "domain"
			notify := variant == "domain+outbox+notify"
			b.Run(fmt.Sprintf("clients=%d/%s", clients, variant), func(b *testing.B) {
				b.ResetTimer()
				elapsed := produce(b, d.pool, clients, notify, ob.Notify, func(ctx context.Context, tx pgx.Tx, i int64) error {
					if _, err := tx.Exec(ctx, `INSERT INTO orders (customer, amount) VALUES ($1, $2)`,
						"customer-"+strconv.FormatInt(i%1000, 10), i); err != nil {
						return err
					}
					if !withOutbox {
						return nil
					}
					_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order",
						AggregateID: strconv.FormatInt(i, 10), Type: "order.created", Payload: payload})
					return err
				})
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tx/s")
			})
		}
	}
}

// produce runs b.N transactions over clients goroutines and returns the wall time.
// With notify, each transaction is followed by a Notify call (after the commit, as documented).
func produce(b *testing.B, pool *pgxpool.Pool, clients int, notify bool, notifyFunc func(context.Context) error,
	fn func(context.Context, pgx.Tx, int64) error) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var failed atomic.Value
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fn(ctx, tx, i) }); err != nil {
					failed.Store(err)
					return
				}
				if notify {
					if err := notifyFunc(ctx); err != nil {
						failed.Store(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	return elapsed
}
