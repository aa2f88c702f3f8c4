//go:build unix

package capacity_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/capacity"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// BenchmarkCapacity is the capacity model of BENCHMARKS.md: the real SQS sink against an SQS
// endpoint that answers after a lognormal 12 ms p50 / 80 ms p99 delay (capacity.Model; a child
// process, so its CPU is not counted here), a durable PostgreSQL outbox seeded with a backlog of
// OUTBOXKIT_BENCH_EVENTS (default 200,000) events of 1 KiB over 10,000 keys. Each of
// OUTBOXKIT_BENCH_ROUNDS rounds (default 3) runs these phases (by default the first four, bare4
// and catchup), in reversed order every other round, each on a freshly seeded outbox:
//
//   - relay: one core.Relay with default options drains the backlog; events/s, this
//     process's CPU time (user + system) and heap allocations per event, and the relay's mean
//     fetch, send and settle time per batch (RelayStats);
//   - relay8: the same with sqs.Options.Concurrency 8 (the sink's default before it became
//     64);
//   - relay1: the same with RelayOptions.InFlight 1 (one batch at a time, the relay before it
//     was pipelined);
//   - relayU: the default relay with sqs.Options.UnorderedStandard (one key may have several
//     requests in flight to the standard queue);
//   - relayF8, relayB1000, relayD (only when OUTBOXKIT_CAPACITY_PHASES names them): the
//     default relay with RelayOptions.InFlight 8, with BatchSize 1,000 (as many rows in flight
//     as bare4), and with DeleteOnPublish (settling as bare4 does, without a mark's row
//     rewrite);
//   - bare4: the bare client, 4 loops: BEGIN; DELETE … RETURNING 1,000 rows (FOR UPDATE SKIP
//     LOCKED); send them as 100 concurrent ten-entry SendMessageBatch requests; COMMIT. Same
//     figures;
//   - catchup: producers at OUTBOXKIT_CAPACITY_RATE events/s (default 2,000; 16 goroutines, one
//     event per transaction through Outbox.Write) while one relay drains the backlog, until the
//     relay has published all but less than 500 events (caughtUpSlack) of what was
//     committed (at most OUTBOXKIT_BENCH_SECONDS, default 300);
//     then the relay stops and the producers run OUTBOXKIT_CAPACITY_PRODUCE_SECONDS (default 15)
//     more without any drain, on a fresh schedule (not making up what the drain held back). It reports the drain rate, the producers' rate during the drain
//     and without it, the catch-up ratio (drain rate / producers' achieved rate) and the
//     commit-to-publish latency (from COMMIT issued to the sink's acknowledgement) of the events
//     produced during the catch-up. OUTBOXKIT_CAPACITY_DRAIN_LIMIT (events/s) paces the
//     catch-up's sink, as a slower broker would, to see what a bounded drain leaves the
//     producers; OUTBOXKIT_CAPACITY_MAX_RATE (events/s) sets the relay's own limit instead
//     (RelayOptions.MaxRate). The relay's adaptive drain (on by default; its cuts and last
//     limit are logged) is turned off with OUTBOXKIT_CAPACITY_FIXED=1 (RelayOptions.FixedRate).
//     OUTBOXKIT_CAPACITY_NO_CATCHUP=1 leaves this phase out;
//     OUTBOXKIT_CAPACITY_PHASES (comma-separated names, e.g. "bare4,catchup") runs only those.
//
// Medians over the rounds are reported; every round is logged (-test.v). Run with a durable
// server:
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test -c -o /tmp/cap.test ./internal/capacity && /tmp/cap.test -test.run '^$' -test.bench Capacity -test.benchtime 1x -test.timeout 3h -test.v
//
// OUTBOXKIT_CAPACITY_UPSTREAM, when set (e.g. to the SQS emulator's endpoint), makes the
// endpoint forward requests there after the delay instead of answering them itself.
func BenchmarkCapacity(b *testing.B) {
	cfg := loadConfig()
	h := newHarness(b, cfg)

	res := map[string][]float64{}
	add := func(m map[string]float64) {
		keys := make([]string, 0, len(m))
		for k, v := range m {
			res[k] = append(res[k], v)
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var sb strings.Builder
		for _, k := range keys {
			fmt.Fprintf(&sb, " %s=%.4g", k, m[k])
		}
		b.Logf("round:%s", sb.String())
	}
	b.ResetTimer()
	for round := range cfg.rounds {
		var phases []func() map[string]float64
		for _, p := range []struct {
			name string
			run  func() map[string]float64
		}{{"relay", h.relayPhase}, {"relay8", h.relay8Phase}, {"relay1", h.relay1Phase}, {"relayU", h.relayUPhase},
			{"relayF8", h.relayF8Phase}, {"relayB1000", h.relayB1000Phase}, {"relayD", h.relayDPhase}, {"bare4", h.barePhase}, {"catchup", h.catchupPhase}} {
			if h.cfg.phases[p.name] {
				phases = append(phases, p.run)
			}
		}
		if round%2 == 1 {
			slices.Reverse(phases)
		}
		round := map[string]float64{}
		for _, p := range phases {
			for k, v := range p() {
				round[k] = v
			}
		}
		for _, r := range [][2]string{{"relay", "bare4"}, {"relay1", "bare4"}, {"relayU", "relay"}, {"relay", "relay8"}, {"relayF8", "bare4"}, {"relayB1000", "bare4"}, {"relayD", "bare4"}, {"catchup_drain", "bare4"}} {
			if a, ok := round[r[0]+"_events/s"]; ok {
				if b, ok := round[r[1]+"_events/s"]; ok {
					round[r[0]+"/"+r[1]] = a / b
				}
			}
		}
		add(round)
	}
	b.StopTimer()
	for k, v := range res {
		b.ReportMetric(median(v), k)
	}
	b.ReportMetric(0, "ns/op")
}

type benchConfig struct {
	events, rounds      int
	rate                float64
	catchupCap, produce time.Duration
	drainLimit          float64 // OUTBOXKIT_CAPACITY_DRAIN_LIMIT: events/s, 0 for none
	maxRate             int     // OUTBOXKIT_CAPACITY_MAX_RATE: the catch-up relay's RelayOptions.MaxRate
	fixed               bool    // OUTBOXKIT_CAPACITY_FIXED=1: the catch-up relay's RelayOptions.FixedRate
	upstream            string
	phases              map[string]bool // OUTBOXKIT_CAPACITY_PHASES, else the default phases
}

// num is the positive number in the environment variable name, else def.
func num(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

func loadConfig() benchConfig {
	return benchConfig{
		events:     int(num("OUTBOXKIT_BENCH_EVENTS", 200000)),
		rounds:     int(num("OUTBOXKIT_BENCH_ROUNDS", 3)),
		rate:       num("OUTBOXKIT_CAPACITY_RATE", 2000),
		catchupCap: time.Duration(num("OUTBOXKIT_BENCH_SECONDS", 300) * float64(time.Second)),
		drainLimit: num("OUTBOXKIT_CAPACITY_DRAIN_LIMIT", 0),
		maxRate:    int(num("OUTBOXKIT_CAPACITY_MAX_RATE", 0)),
		fixed:      os.Getenv("OUTBOXKIT_CAPACITY_FIXED") == "1",
		produce:    time.Duration(num("OUTBOXKIT_CAPACITY_PRODUCE_SECONDS", 15) * float64(time.Second)),
		phases:     phaseSet(os.Getenv("OUTBOXKIT_CAPACITY_PHASES"), os.Getenv("OUTBOXKIT_CAPACITY_NO_CATCHUP") == "1"),
		upstream:   os.Getenv("OUTBOXKIT_CAPACITY_UPSTREAM"),
	}
}

// phaseSet is the phases a run measures: those listed (comma-separated), else the default ones
// (all but relayF8, relayB1000 and relayD), without the catch-up when noCatchup.
func phaseSet(list string, noCatchup bool) map[string]bool {
	if list == "" {
		list = "relay,relay8,relay1,relayU,bare4"
		if !noCatchup {
			list += ",catchup"
		}
	}
	set := map[string]bool{}
	for _, p := range strings.Split(list, ",") {
		set[strings.TrimSpace(p)] = true
	}
	return set
}

const keys = 10000

type harness struct {
	b      *testing.B
	cfg    benchConfig
	dsn    string
	admin  *pgxpool.Pool
	client *awssqs.Client
	queue  string
}

// newHarness starts the capacity model's endpoint (a child process; it forwards to
// cfg.upstream when set) and connects to the durable PostgreSQL of OUTBOXKIT_POSTGRES_DSN.
func newHarness(b *testing.B, cfg benchConfig) *harness {
	dsn := testkit.Need(b, testkit.PostgresDSN)
	ep := capacity.StartChild(b, capacity.Model, cfg.upstream)
	client := awssqs.NewFromConfig(aws.Config{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("bench", "bench", ""),
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.MaxIdleConns, t.MaxIdleConnsPerHost = 1024, 1024
		})}, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
	h := &harness{b: b, cfg: cfg, dsn: dsn, client: client, queue: ep + "/000000000000/capacity"}
	h.admin = h.pool(2)
	if cfg.upstream != "" {
		out, err := client.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String("capacity-" + randHex())})
		require.NoError(b, err)
		h.queue = aws.ToString(out.QueueUrl)
	}
	return h
}

func (h *harness) pool(maxConns int32) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(h.dsn)
	require.NoError(h.b, err)
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(h.b, err)
	return p
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// payload is 1 KiB of JSON-safe text, so that the sink sends it as is (no base64).
var payload = []byte(`{"order":"` + strings.Repeat("abcdefghijklmnopqrstuvwxyz0123456789", 29)[:1024-12] + `"}`)

// outbox is a fresh migrated outbox holding the backlog; drop removes it.
type outbox struct {
	schema string
	db     *pgxpool.Pool
	store  *postgres.Store[pgx.Tx]
}

// seed creates a schema with a migrated outbox and the backlog (COPY, with the lanes
// core.Outbox computes), then vacuums, analyses and checkpoints, so that every phase starts
// from the same state. Not timed. plain drops the pending layout's table and its trigger for
// earlier versions first (PostgreSQL migration 0008): the bare client is a plain outbox table
// that no library writes, and would otherwise pay that trigger on every row it deletes.
func (h *harness) seed(maxConns int32, plain bool) *outbox {
	h.b.StopTimer()
	defer h.b.StartTimer()
	ctx := context.Background()
	o := &outbox{schema: "cap_" + randHex(), db: h.pool(maxConns)}
	_, err := h.admin.Exec(ctx, "CREATE SCHEMA "+o.schema)
	require.NoError(h.b, err)
	o.store, err = postgres.New(o.db, &postgres.Options{Schema: o.schema})
	require.NoError(h.b, err)
	require.NoError(h.b, o.store.Migrate(ctx))
	if plain {
		_, err := o.db.Exec(ctx, "DROP TRIGGER outbox_pending_sync ON "+o.schema+".outbox; DROP TABLE "+o.schema+".outbox_pending")
		require.NoError(h.b, err)
	}
	rows := make([][]any, h.cfg.events)
	for i := range rows {
		agg := strconv.Itoa(i % keys)
		key := "order/" + agg
		rows[i] = []any{"seed-" + strconv.Itoa(i), "order", agg, int64(i/keys + 1), "order.updated", key,
			payload, "{}", int32(driver.LaneOf(key, core.DefaultLanes))}
	}
	_, err = o.db.CopyFrom(ctx, pgx.Identifier{o.schema, "outbox"},
		[]string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "type", "partition_key", "payload", "headers", "lane"},
		pgx.CopyFromRows(rows))
	require.NoError(h.b, err)
	sqls := []string{"VACUUM ANALYZE " + o.schema + ".outbox", "CHECKPOINT"}
	if !plain { // COPY fired the trigger that wrote the pending rows
		sqls = append([]string{"VACUUM ANALYZE " + o.schema + ".outbox_pending"}, sqls...)
	}
	for _, sql := range sqls {
		_, err := h.admin.Exec(ctx, sql)
		require.NoError(h.b, err)
	}
	return o
}

func (h *harness) drop(o *outbox) {
	h.b.StopTimer()
	defer h.b.StartTimer()
	o.db.Close()
	_, err := h.admin.Exec(context.Background(), "DROP SCHEMA "+o.schema+" CASCADE")
	require.NoError(h.b, err)
}

// usage is this process's CPU time and heap allocation count.
type usage struct {
	cpu    time.Duration
	allocs uint64
}

func now() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), allocs: ms.Mallocs}
}

// perEvent adds name_cpu_us/event and name_allocs/event for n events since u0.
func perEvent(m map[string]float64, name string, u0 usage, n int) {
	u1 := now()
	m[name+"_cpu_us/event"] = float64((u1.cpu - u0.cpu).Microseconds()) / float64(n)
	m[name+"_allocs/event"] = float64(u1.allocs-u0.allocs) / float64(n)
}

// newRelay is a relay with opts (the zero value: default options) under a fresh owner.
func (h *harness) newRelay(o *outbox, sink core.Sink, opts core.RelayOptions) *core.Relay {
	opts.Owner = "cap-" + randHex()
	r, err := core.NewRelay(o.store, sink, core.StaticRouter{Default: h.queue}, &opts)
	require.NoError(h.b, err)
	return r
}

// relayPhase: one relay with default options drains the backlog.
func (h *harness) relayPhase() map[string]float64 {
	return h.drainPhase("relay", core.RelayOptions{}, nil)
}

// relay8Phase: the default relay with the sink's concurrency before it became 64: 8 requests
// in flight per Send.
func (h *harness) relay8Phase() map[string]float64 {
	return h.drainPhase("relay8", core.RelayOptions{}, &sqs.Options{Concurrency: 8})
}

// relay1Phase: the same with one batch in flight (InFlight 1, the relay before pipelining).
func (h *harness) relay1Phase() map[string]float64 {
	return h.drainPhase("relay1", core.RelayOptions{InFlight: 1}, nil)
}

// relayUPhase: the default relay with a sink that lets one key have several requests in
// flight to the (standard) queue (sqs.Options.UnorderedStandard).
func (h *harness) relayUPhase() map[string]float64 {
	return h.drainPhase("relayU", core.RelayOptions{}, &sqs.Options{UnorderedStandard: true})
}

// relayF8Phase: the default relay with 8 batches in flight (RelayOptions.InFlight 8).
func (h *harness) relayF8Phase() map[string]float64 {
	return h.drainPhase("relayF8", core.RelayOptions{InFlight: 8}, nil)
}

// relayB1000Phase: the default relay with batches of 1,000 (RelayOptions.BatchSize), as many
// rows in flight as bare4.
func (h *harness) relayB1000Phase() map[string]float64 {
	return h.drainPhase("relayB1000", core.RelayOptions{BatchSize: 1000}, nil)
}

// relayDPhase: the default relay deleting rows once acknowledged (RelayOptions.DeleteOnPublish),
// as bare4 does: the database's cost of a settle without the row rewrite of a mark.
func (h *harness) relayDPhase() map[string]float64 {
	return h.drainPhase("relayD", core.RelayOptions{DeleteOnPublish: true}, nil)
}

// drainPhase: one relay with opts drains the backlog through a sink with sinkOpts; its figures
// are named after name.
func (h *harness) drainPhase(name string, opts core.RelayOptions, sinkOpts *sqs.Options) map[string]float64 {
	o := h.seed(8, false)
	defer h.drop(o)
	sink, err := sqs.New(h.client, sinkOpts)
	require.NoError(h.b, err)
	r := h.newRelay(o, sink, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	u0 := now()
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	for r.Stats().Published < uint64(h.cfg.events) {
		select {
		case err := <-done:
			h.b.Fatalf("relay stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	m := map[string]float64{name + "_events/s": float64(h.cfg.events) / elapsed.Seconds()}
	perEvent(m, name, u0, h.cfg.events)
	cancel()
	require.NoError(h.b, <-done)
	st := r.Stats()
	m[name+"_failed_attempts"] = float64(st.Failures)
	if st.Fetches > 0 { // where a batch's time goes: mean fetch, send and settle per batch (ms)
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(st.Fetches) }
		m[name+"_fetch_ms/batch"], m[name+"_send_ms/batch"], m[name+"_settle_ms/batch"] = per(st.FetchTime), per(st.SendTime), per(st.SettleTime)
		m[name+"_events/batch"] = float64(h.cfg.events) / float64(st.Fetches)
	}
	return m
}

// barePhase: the bare client, 4 loops of DELETE … RETURNING 1,000 / 100 requests / COMMIT.
func (h *harness) barePhase() map[string]float64 {
	const loops, batch, perRequest = 4, 1000, 10
	o := h.seed(loops+1, true)
	defer h.drop(o)
	ctx := context.Background()
	q := `DELETE FROM ` + o.schema + `.outbox WHERE seq = ANY(ARRAY(SELECT seq FROM ` + o.schema + `.outbox
		ORDER BY seq LIMIT ` + strconv.Itoa(batch) + ` FOR UPDATE SKIP LOCKED))
		RETURNING id, aggregate_type, aggregate_id, aggregate_version, type, partition_key, payload, created_at`
	var sent atomic.Int64
	var failed atomic.Value
	str := func(v string) types.MessageAttributeValue {
		return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	loop := func() error {
		for {
			tx, err := o.db.Begin(ctx)
			if err != nil {
				return err
			}
			rows, _ := tx.Query(ctx, q)
			var entries []types.SendMessageBatchRequestEntry
			for rows.Next() {
				var id, aggType, aggID, typ, key string
				var version int64
				var body []byte
				var created time.Time
				if err := rows.Scan(&id, &aggType, &aggID, &version, &typ, &key, &body, &created); err != nil {
					return err
				}
				meta, err := json.Marshal(map[string]any{"v": 1, "created_at": created.UTC().Format(time.RFC3339Nano), "partition_key": key})
				if err != nil {
					return err
				}
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(len(entries) % perRequest)),
					MessageBody: aws.String(string(body)),
					MessageAttributes: map[string]types.MessageAttributeValue{
						"outbox.id": str(id), "outbox.type": str(typ), "outbox.aggregate": str(aggType + "/" + aggID),
						"outbox.aggregate_version": {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(version, 10))},
						"outbox.meta":              str(string(meta)),
					}})
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if len(entries) == 0 {
				return tx.Rollback(ctx)
			}
			var wg sync.WaitGroup
			var sendErr atomic.Value
			for i := 0; i < len(entries); i += perRequest {
				wg.Go(func() {
					req := entries[i:min(i+perRequest, len(entries))]
					out, err := h.client.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(h.queue), Entries: req})
					if err == nil && (len(out.Failed) > 0 || len(out.Successful) != len(req)) {
						err = fmt.Errorf("bare send: %d failed, %d of %d successful", len(out.Failed), len(out.Successful), len(req))
					}
					if err != nil {
						sendErr.Store(err)
					}
				})
			}
			wg.Wait()
			if err, _ := sendErr.Load().(error); err != nil {
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
			sent.Add(int64(len(entries)))
		}
	}
	u0 := now()
	start := time.Now()
	var wg sync.WaitGroup
	for range loops {
		wg.Go(func() {
			if err := loop(); err != nil {
				failed.Store(err)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		h.b.Fatal(err)
	}
	require.Equal(h.b, int64(h.cfg.events), sent.Load())
	m := map[string]float64{"bare4_events/s": float64(h.cfg.events) / elapsed.Seconds()}
	perEvent(m, "bare4", u0, h.cfg.events)
	return m
}

// latencySink records, for the events whose COMMIT was issued at a time kept in issued, the
// time from then to the sink's acknowledgement.
type latencySink struct {
	core.Sink
	issued sync.Map // event ID → time.Time
	mu     sync.Mutex
	lat    []time.Duration

	per  time.Duration // > 0: at most one event per per (OUTBOXKIT_CAPACITY_DRAIN_LIMIT)
	pmu  sync.Mutex
	next time.Time // when the next event may be sent
}

func (s *latencySink) Send(ctx context.Context, msgs []core.Message) []error {
	if s.per > 0 { // pace the drain, as a slower broker would
		s.pmu.Lock()
		if now := time.Now(); s.next.Before(now) {
			s.next = now
		}
		at := s.next
		s.next = s.next.Add(time.Duration(len(msgs)) * s.per)
		s.pmu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(at)):
		}
	}
	res := s.Sink.Send(ctx, msgs)
	t := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range msgs {
		if res[k] != nil {
			continue
		}
		if v, ok := s.issued.LoadAndDelete(msgs[k].ID); ok {
			s.lat = append(s.lat, t.Sub(v.(time.Time)))
		}
	}
	return res
}

// caughtUpSlack is how many committed events may still be unpublished when the catch-up counts
// as done: RelayOptions.BatchSize's default when it was defined (500), kept so that the figures
// stay comparable.
const caughtUpSlack = 500

// catchupPhase: producers at a steady rate while one relay drains the backlog, then the same
// producers without any drain.

func (h *harness) catchupPhase() map[string]float64 {
	const producers = 16
	o := h.seed(8, false)
	defer h.drop(o)
	ctx := context.Background()
	pdb := h.pool(producers)
	defer pdb.Close()
	ob, err := core.NewOutbox(ctx, o.store, nil)
	require.NoError(h.b, err)
	inner, err := sqs.New(h.client, nil)
	require.NoError(h.b, err)
	sink := &latencySink{Sink: inner}
	if h.cfg.drainLimit > 0 {
		sink.per = time.Duration(float64(time.Second) / h.cfg.drainLimit)
	}
	r := h.newRelay(o, sink, core.RelayOptions{MaxRate: h.cfg.maxRate, FixedRate: h.cfg.fixed})

	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var next, produced atomic.Int64
	var failed atomic.Value
	tag := randHex()
	start := time.Now()
	interval := float64(time.Second) / h.cfg.rate
	// Event i is due at at + (i - from) × interval. The schedule starts afresh for the producers'
	// run without a drain: otherwise they would first make up what the drain held them back
	// from, and measure their top speed, not the asked rate.
	type schedule struct {
		at   time.Time
		from int64
	}
	var sched atomic.Pointer[schedule]
	sched.Store(&schedule{start, 0})
	var wg sync.WaitGroup
	for range producers {
		wg.Go(func() {
			for pctx.Err() == nil {
				i := next.Add(1) - 1
				sc := sched.Load()
				if d := time.Until(sc.at.Add(time.Duration(float64(i-sc.from) * interval))); d > 0 {
					select {
					case <-pctx.Done():
						return
					case <-time.After(d):
					}
				}
				agg := strconv.Itoa(int(i) % keys)
				ev := core.Event{ID: "p-" + tag + "-" + strconv.FormatInt(i, 10), AggregateType: "order", AggregateID: agg,
					Type: "order.updated", PartitionKey: "order/" + agg, Payload: payload}
				err := pgx.BeginFunc(ctx, pdb, func(tx pgx.Tx) error {
					if _, err := ob.Write(ctx, tx, ev); err != nil {
						return err
					}
					sink.issued.Store(ev.ID, time.Now())
					return nil
				})
				if err != nil {
					failed.Store(err)
					return
				}
				produced.Add(1)
			}
		})
	}

	rctx, stopRelay := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	caughtUp := 0.0
	var elapsed time.Duration
	var atCatchup int64
	for {
		p := produced.Load()
		// Caught up: what is left is less than one batch. While producers write, the relay is
		// always a few milliseconds' worth of events behind, so "nothing left" may never hold.
		if int64(h.cfg.events)+p-int64(r.Stats().Published) < caughtUpSlack {
			caughtUp, atCatchup, elapsed = 1, p, time.Since(start)
			break
		}
		if time.Since(start) > h.cfg.catchupCap {
			atCatchup, elapsed = p, time.Since(start)
			break
		}
		select {
		case err := <-done:
			h.b.Fatalf("relay stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	rs := r.Stats()
	published := rs.Published
	if !h.cfg.fixed {
		h.b.Logf("catchup: adaptive rate: %d cuts, limit now %.0f events/s (0: none), paced %s", rs.RateCuts, rs.RateLimit, rs.PaceTime)
	}
	if rs.Fetches > 0 {
		h.b.Logf("catchup: per batch: fetch %s, send %s, settle %s (%d batches)", rs.FetchTime/time.Duration(rs.Fetches),
			rs.SendTime/time.Duration(rs.Fetches), rs.SettleTime/time.Duration(rs.Fetches), rs.Fetches)
	}
	stopRelay()
	require.NoError(h.b, <-done)
	sink.mu.Lock()
	lat := slices.Clone(sink.lat)
	sink.mu.Unlock()

	// The same producers, no drain running, on a fresh schedule.
	sched.Store(&schedule{time.Now(), next.Load()})
	p0, t0 := produced.Load(), time.Now()
	time.Sleep(h.cfg.produce)
	alone := float64(produced.Load()-p0) / time.Since(t0).Seconds()
	stopProducers()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil && pctx.Err() == nil {
		h.b.Fatal(err)
	}

	drain := float64(published) / elapsed.Seconds()
	during := float64(atCatchup) / elapsed.Seconds()
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	return map[string]float64{
		"catchup_drain_events/s": drain, "catchup_producers_events/s": during, "producers_alone_events/s": alone,
		"catchup_ratio": drain / during, "producers_during/alone": during / alone, "catchup_caught_up": caughtUp,
		"catchup_seconds": elapsed.Seconds(), "catchup_p50_ms": q(0.50), "catchup_p99_ms": q(0.99),
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
