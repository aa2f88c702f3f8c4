package postgres

// Benchmarks against a real server (skipped when OUTBOXKIT_POSTGRES_DSN is unset; not run in
// CI). For figures that claim durability, start the server with PG_DURABLE=1 (fsync and
// synchronous_commit on):
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test ./adapters/postgres -run '^$' -bench 'Drain|Produce' -count 3 -timeout 60m
//
// BenchmarkDrain seeds OUTBOXKIT_BENCH_EVENTS (default 200,000) committed events of ~1 KiB over
// 10,000 keys, then measures draining them: through core.Relay with 1, 2 and 4 relays (mark
// and delete modes) into a null sink, and, in the same run, the raw-SQL ceiling: a
// DELETE ... RETURNING loop of 1,000 rows per statement on a bare table of the same rows
// (bare_table_delete_returning). BenchmarkProduce measures producer
// transactions: one domain row, versus one domain row plus one outbox row, versus that plus a
// Notify after each commit (with a listener connected). BenchmarkDrain also runs the relays
// with Options.AsyncSettle and a raw UPDATE ... RETURNING loop (the ceiling of marking rows).
//
// BenchmarkLatency measures commit-to-publish latency at 1,000 events/s (wake-ups versus
// polling); BenchmarkDrainBacklog compares the drain rate of a 10k and a 1M backlog:
//
//	OUTBOXKIT_BENCH_SECONDS=30 go test ./adapters/postgres -run '^$' -bench Latency -benchtime 1x
//	go test ./adapters/postgres -run '^$' -bench DrainBacklog -benchtime 1x -timeout 60m

import (
	"context"
	"crypto/rand"
	"fmt"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"os"
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

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
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
			payload, "{}", int32(driver.LaneOf(key, lanes))}
	}
	_, err := d.pool.CopyFrom(ctx, pgx.Identifier{d.schema, "outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "type", "partition_key", "payload", "headers", "lane"},
		pgx.CopyFromRows(rows))
	require.NoError(b, err)
	vacuumSeeded(ctx, b, d)
}

func BenchmarkDrain(b *testing.B) {
	testDSN(b)
	n := benchEvents()
	for _, c := range []struct {
		workers int
		delete  bool
		async   bool
		metrics bool
	}{{1, false, false, false}, {1, false, false, true}, {1, false, true, false}, {2, false, false, false}, {4, false, false, false}, {1, true, false, false}, {1, true, true, false}} {
		mode := "mark"
		if c.delete {
			mode = "delete"
		}
		if c.async {
			mode += "/async_settle"
		}
		var mp metric.MeterProvider // nil: the global no-op provider
		if c.metrics {
			// An SDK provider with a reader, as the relay daemon runs it: every instrument records.
			mode += "_metrics"
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}
		b.Run(fmt.Sprintf("relay/%s/workers=%d", mode, c.workers), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				s, d := migratedStore(b, dbOptions{maxConns: int32(4 * c.workers)}, &Options{AsyncSettle: c.async})
				seed(b, d, core.DefaultLanes, n)
				b.StartTimer()
				total += drainWithRelays(b, s, c.workers, c.delete, n, mp)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
	for _, raw := range []struct {
		name, sql string
		bare      bool
	}{
		// The relay anyone would write by hand, on a bare table of the same rows (its primary
		// key on seq, no trigger, no other index): the ceiling the relay is compared with.
		{"bare_table_delete_returning", `DELETE FROM outbox_bare WHERE seq IN (
					SELECT seq FROM outbox_bare ORDER BY seq LIMIT 1000) RETURNING ` + recordCols, true},
		// The same loop on the migrated outbox, whose DELETE also fires the pending layout's
		// trigger: not a ceiling (slower than the relay), kept to show that cost.
		{"raw_delete_returning", `DELETE FROM outbox WHERE seq IN (
					SELECT seq FROM outbox ORDER BY seq LIMIT 1000) RETURNING ` + recordCols, false},
		// The ceiling of marking by rewriting rows: the same loop, setting published_at.
		{"raw_update_returning", `UPDATE outbox SET published_at = now() WHERE seq = ANY(ARRAY(
					SELECT seq FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT 1000))
					AND published_at IS NULL RETURNING ` + recordCols, false},
	} {
		b.Run(raw.name, func(b *testing.B) { rawDrain(b, n, raw.sql, raw.bare) })
	}
}

// bareTable copies the seeded outbox into outbox_bare, a table of the same columns and rows
// with only a primary key on seq, vacuumed, analysed and checkpointed like the outbox.
const bareTable = `CREATE TABLE outbox_bare AS TABLE outbox;
	ALTER TABLE outbox_bare ADD PRIMARY KEY (seq);
	VACUUM ANALYZE outbox_bare;
	CHECKPOINT`

// legacyPendingIndex is the outbox's pending index of migration 0001, which Migrate drops on a
// new outbox since migration 0008 (DropLegacy): benchmarks of the layout before it
// create it again.
const legacyPendingIndex = `CREATE INDEX IF NOT EXISTS outbox_pending_idx ON outbox (seq) WHERE published_at IS NULL;
	CREATE INDEX IF NOT EXISTS outbox_failed_idx ON outbox (partition_key, seq)
		WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`

// rawDrain runs sql (one batch of at most 1,000 rows, returning recordCols) until it returns no
// row, on n seeded events (copied to a bare table first when bare), and reports the rate.
func rawDrain(b *testing.B, n int, sql string, bare bool) {
	var total time.Duration
	for range b.N {
		b.StopTimer()
		_, d := migratedStore(b, dbOptions{maxConns: 2}, &Options{})
		// The layout before migration 0008 (the ceiling of marking rows is measured on it): its
		// pending index, which a new outbox no longer has.
		_, err := d.pool.Exec(context.Background(), legacyPendingIndex)
		require.NoError(b, err)
		seed(b, d, core.DefaultLanes, n)
		if bare {
			for _, stmt := range strings.Split(bareTable, ";") {
				_, err := d.pool.Exec(context.Background(), stmt)
				require.NoError(b, err)
			}
		}
		b.StartTimer()
		start := time.Now()
		got := 0
		for {
			// Decoded as the relay's fetch decodes its rows.
			rows, err := d.pool.Query(context.Background(), sql)
			recs, err := scanRecords(rows, err, 1000)
			require.NoError(b, err)
			k := len(recs)
			got += k
			if k == 0 {
				break
			}
		}
		total += time.Since(start)
		require.Equal(b, n, got)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
}

// drainWithRelays runs workers relays until n events were marked, and returns the time taken.
func drainWithRelays(b *testing.B, s *Store[pgx.Tx], workers int, del bool, n int, mp metric.MeterProvider) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relays := make([]*core.Relay, workers)
	for i := range relays {
		r, err := core.NewRelay(s, nullSink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
			Owner: fmt.Sprintf("bench-%d", i), BatchSize: 1000, PollInterval: 10 * time.Millisecond,
			DeleteOnPublish: del, MeterProvider: mp,
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
				elapsed := produce(b, b.N, d.pool, clients, notify, ob.Notify, func(ctx context.Context, tx pgx.Tx, i int64) error {
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

// produce runs n transactions over clients goroutines and returns the wall time.
// With notify, each transaction is followed by a Notify call (after the commit, as documented).
func produce(b *testing.B, n int, pool *pgxpool.Pool, clients int, notify bool, notifyFunc func(context.Context) error,
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
				if i > int64(n) {
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

// benchSeconds is the producing time of BenchmarkLatency: OUTBOXKIT_BENCH_SECONDS, default 30.
func benchSeconds() time.Duration {
	if n, err := strconv.ParseFloat(os.Getenv("OUTBOXKIT_BENCH_SECONDS"), 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second))
	}
	return 30 * time.Second
}

// pollOnly hides the store's Waker capability: the relay can only poll.
type pollOnly struct{ driver.RelayStore }

// latencyHeader carries the time (Unix µs) at which the producer issued COMMIT.
const latencyHeader = "bench-commit-us"

// BenchmarkLatency measures commit-to-publish latency at a steady 1,000 events/s (8 producer
// goroutines, one event per transaction, each followed by Outbox.Notify), for
// OUTBOXKIT_BENCH_SECONDS (default 30) per variant:
//
//   - wakeups: relays woken by LISTEN/NOTIFY, PollInterval 1s (latency comes from NOTIFY);
//   - wakeups/async_settle: the same with Options.AsyncSettle (the relay's marks do not wait
//     for the WAL flush);
//   - polling: the store's Waker hidden, PollInterval 100ms.
//
// Latency is the sink's receive time minus the time COMMIT returned to the producer (clamped at
// 0: a relay may see a commit before its producer does), reported as p50/p99/max in ms; the
// "commit-" metrics are the same from the moment COMMIT was issued (an upper bound including the
// commit's own WAL flush).
func BenchmarkLatency(b *testing.B) {
	testDSN(b)
	for _, c := range []struct {
		name    string
		workers int
		poll    time.Duration
		wake    bool
		async   bool
	}{
		{"wakeups/workers=1", 1, time.Second, true, false},
		{"wakeups/workers=1/async_settle", 1, time.Second, true, true},
		{"wakeups/workers=2", 2, time.Second, true, false},
		{"polling_100ms/workers=1", 1, 100 * time.Millisecond, false, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			var fromCommit, fromIssue []time.Duration
			var rate float64
			for range b.N {
				a, z, r := latencyRun(b, c.workers, c.poll, c.wake, c.async, benchSeconds())
				fromCommit, fromIssue = append(fromCommit, a...), append(fromIssue, z...)
				rate += r
			}
			rep := func(prefix string, d []time.Duration) {
				slices.Sort(d)
				ms := func(q float64) float64 {
					return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
				}
				b.ReportMetric(ms(0.50), prefix+"p50-ms")
				b.ReportMetric(ms(0.99), prefix+"p99-ms")
				b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, prefix+"max-ms")
			}
			rep("", fromCommit)
			rep("commit-", fromIssue)
			b.ReportMetric(rate/float64(b.N), "produced/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// latencyRun produces at 1,000 events/s for dur with relays running, waits until every event
// was published, and returns the latencies (from commit return and from commit issue) and the
// achieved production rate.
func latencyRun(b *testing.B, workers int, poll time.Duration, wake, async bool, dur time.Duration) (fromCommit, fromIssue []time.Duration, rate float64) {
	b.StopTimer()
	defer b.StartTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, d := migratedStore(b, dbOptions{maxConns: 16}, &Options{AsyncSettle: async})
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(b, err)
	n := int(dur / time.Millisecond)
	committed := make([]time.Time, n)
	issued := make([]time.Time, n)
	received := make([]time.Time, n)
	var recvMu sync.Mutex
	var got atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		now := time.Now()
		recvMu.Lock()
		for _, m := range msgs {
			i, err := strconv.Atoi(m.Record.AggregateID)
			if err == nil && i >= 0 && i < n && received[i].IsZero() {
				received[i] = now
				got.Add(1)
			}
		}
		recvMu.Unlock()
		return make([]error, len(msgs))
	})
	var store driver.RelayStore = s
	if !wake {
		store = pollOnly{s}
	}
	var wg sync.WaitGroup
	relays := make([]*core.Relay, workers)
	for i := range relays {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
			Owner: fmt.Sprintf("lat-%d", i), PollInterval: poll,
		})
		require.NoError(b, err)
		relays[i] = r
		wg.Go(func() { _ = r.Run(ctx) })
	}
	defer wg.Wait()
	defer cancel()
	// Wait until the lanes are balanced (each relay holds its share; with several relays the
	// first one releases lanes at its next renewal, up to RenewInterval later, and the others
	// claim them at theirs), so that neither claiming nor rebalancing is measured.
	share := (core.DefaultLanes + workers - 1) / workers
	for {
		time.Sleep(10 * time.Millisecond)
		held, balanced := 0, true
		for _, r := range relays {
			l := r.Stats().Lanes
			held += l
			balanced = balanced && l <= share
		}
		balanced = balanced && held == core.DefaultLanes
		if balanced {
			break
		}
	}
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	var next atomic.Int64
	var failed atomic.Value
	var pwg sync.WaitGroup
	start := time.Now()
	for range 8 {
		pwg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
				var t0 time.Time
				err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
					t0 = time.Now()
					_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i),
						Type: "order.created", Payload: payload,
						Headers: map[string]string{latencyHeader: strconv.FormatInt(t0.UnixMicro(), 10)}})
					t0 = time.Now()
					return err
				})
				if err != nil {
					failed.Store(err)
					return
				}
				committed[i], issued[i] = time.Now(), t0
				if err := ob.Notify(ctx); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	pwg.Wait()
	rate = float64(n) / time.Since(start).Seconds()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for got.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got.Load() < int64(n) {
		st, err := s.Stats(ctx)
		for _, r := range relays {
			b.Logf("relay %s: %+v", r.Owner(), r.Stats())
		}
		b.Fatalf("%d of %d events published a minute after the last commit (outbox stats %+v, %v)", got.Load(), n, st, err)
	}
	recvMu.Lock()
	defer recvMu.Unlock()
	for i := range n {
		fromCommit = append(fromCommit, max(0, received[i].Sub(committed[i])))
		fromIssue = append(fromIssue, received[i].Sub(issued[i]))
	}
	return fromCommit, fromIssue, rate
}

// seedSeries writes n events like seed, with one INSERT ... SELECT over generate_series (same
// ~1 KiB payload in every row, keys and lanes as core.Outbox assigns them), then vacuums,
// analyses and checkpoints.
func seedSeries(b *testing.B, d *testDB, n int) {
	b.Helper()
	seedSeriesAt(b, d, n, nil)
}

// seedSeriesAt is seedSeries with every event created at *at and published a minute later
// (published_at set: no pending row), or, when at is nil, created now and unpublished.
func seedSeriesAt(b *testing.B, d *testDB, n int, at *time.Time) {
	b.Helper()
	ctx := context.Background()
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	lanes := make([]int32, benchKeys)
	for i := range lanes {
		lanes[i] = int32(driver.LaneOf("order/"+strconv.Itoa(i), core.DefaultLanes))
	}
	_, err := d.pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, lane, created_at, published_at)
		SELECT 'ev-' || g, 'order', (g % $3)::text, 'order.created', 'order/' || (g % $3), $1::bytea, ($2::int[])[g % $3 + 1],
			coalesce($5::timestamptz, now()), $5::timestamptz + interval '1 minute'
		FROM generate_series(0, $4::int - 1) AS g`, payload, lanes, benchKeys, n, at)
	require.NoError(b, err)
	vacuumSeeded(ctx, b, d)
}

// drainRate runs one relay (mark mode, batch 1,000, null sink) until want more events were
// published and returns the steady rate: events per second between the first settled batch and
// the last, so that start-up (lease claim) is not counted.
func drainRate(b *testing.B, s driver.RelayStore, want int) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const batch = 1000
	r, err := core.NewRelay(s, nullSink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
		Owner: randomName("drain-"), BatchSize: batch, PollInterval: 10 * time.Millisecond,
	})
	require.NoError(b, err)
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	var t1 time.Time
	var first uint64
	for {
		p := r.Stats().Published
		if t1.IsZero() && p > 0 {
			t1, first = time.Now(), p
		}
		if p >= uint64(want) {
			return float64(p-first) / time.Since(t1).Seconds()
		}
		time.Sleep(500 * time.Microsecond)
	}
}

// BenchmarkDrainBacklog compares the steady drain rate of one relay (mark mode, null sink,
// ~1 KiB payloads) on a 10,000-event backlog (all of it drained) with the rate over 50,000
// events of a 1,000,000-event backlog, in OUTBOXKIT_BENCH_ROUNDS (default 3) interleaved rounds
// (small, large, small, large, ...; the large table is seeded once and each round drains its
// next 50,000 events). It reports the medians and their ratio (large/small), and logs each
// round. OUTBOXKIT_BENCH_LARGE overrides the large backlog size.
func BenchmarkDrainBacklog(b *testing.B) {
	testDSN(b)
	rounds := 3
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	large := 1000000
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_LARGE")); err == nil && n > 0 {
		large = n
	}
	const small, window = 10000, 50000
	require.GreaterOrEqual(b, large, rounds*window)
	for range b.N {
		b.StopTimer()
		big, bd := migratedStore(b, dbOptions{maxConns: 4}, &Options{})
		seedSeries(b, bd, large)
		var rs, rl []float64
		for i := range rounds {
			s, d := migratedStore(b, dbOptions{maxConns: 4}, &Options{})
			seedSeries(b, d, small)
			b.StartTimer()
			rs = append(rs, drainRate(b, s, small))
			rl = append(rl, drainRate(b, big, window))
			b.StopTimer()
			b.Logf("round %d: backlog=%d %.0f events/s, backlog=%d %.0f events/s", i+1, small, rs[i], large, rl[i])
		}
		ms, ml := median(rs), median(rl)
		b.ReportMetric(ms, "small-events/s")
		b.ReportMetric(ml, "large-events/s")
		b.ReportMetric(ml/ms, "large/small")
	}
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// BenchmarkInboxApply measures core.Inbox of distinct, unversioned messages with a one-INSERT
// handler: serial (one consumer) and with 8 concurrent consumers of one consumer name, one
// transaction per message (Process, batch=1) or 100 per transaction (ProcessBatch, batch=100:
// the handler's INSERT per message; ProcessSet, set=100: one INSERT of the batch's effects).
// msgs/s is the metric.
func BenchmarkInboxApply(b *testing.B) {
	for _, par := range []int{1, 8} {
		for _, batch := range []int{1, 100, -100} { // -100: ProcessSet, 100 at a time
			name := fmt.Sprintf("consumers=%d/batch=%d", par, batch)
			if batch < 0 {
				name = fmt.Sprintf("consumers=%d/set=%d", par, -batch)
			}
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				s, d := migratedStore(b, dbOptions{maxConns: 10}, nil)
				if _, err := d.pool.Exec(ctx, `CREATE TABLE bench_effects (id text PRIMARY KEY)`); err != nil {
					b.Fatal(err)
				}
				in, err := core.NewInbox[pgx.Tx](ctx, s, nil)
				if err != nil {
					b.Fatal(err)
				}
				handler := func(ctx context.Context, tx pgx.Tx, msg core.InboxMessage) error {
					_, err := tx.Exec(ctx, `INSERT INTO bench_effects (id) VALUES ($1)`, msg.EventID)
					return err
				}
				if batch < 0 { // the same effect, one INSERT for the whole batch
					testkit.InboxApplySet(b, in, par, -batch, func(ctx context.Context, tx pgx.Tx, applied []core.InboxMessage) error {
						ids := make([]string, len(applied))
						for i, m := range applied {
							ids[i] = m.EventID
						}
						_, err := tx.Exec(ctx, `INSERT INTO bench_effects (id) SELECT unnest($1::text[])`, ids)
						return err
					})
					return
				}
				testkit.InboxApply(b, in, par, batch, handler)
			})
		}
	}
}

// vacuumSeeded vacuums and analyses a freshly seeded outbox, and its pending table (migration
// 0008's trigger wrote its rows) unless a benchmark dropped it, then checkpoints, so that every
// run starts from the same state.
func vacuumSeeded(ctx context.Context, b *testing.B, d *testDB) {
	sqls := []string{"VACUUM ANALYZE outbox", "CHECKPOINT"}
	var pending bool
	require.NoError(b, d.pool.QueryRow(ctx, `SELECT to_regclass('outbox_pending') IS NOT NULL`).Scan(&pending))
	if pending {
		sqls = append([]string{"VACUUM ANALYZE outbox_pending"}, sqls...)
	}
	for _, sql := range sqls {
		_, err := d.pool.Exec(ctx, sql)
		require.NoError(b, err)
	}
}
