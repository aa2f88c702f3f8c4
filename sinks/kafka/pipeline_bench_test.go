package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// BenchmarkPipeline is the whole path a user cares about: producers commit events (1 KiB, 64
// keys) in PostgreSQL at a steady rate; one core.Relay with default options publishes them
// through the Kafka sink to a kfake cluster in this process that answers every produce request
// after the capacity model's delay (12 ms p50, 80 ms p99: latencyCluster); one Consumer with
// default options applies them through the inbox of another schema of the same server (horizon,
// version gate, inbox row, one INSERT of effect). Sub-benchmarks by the producers' rate:
// rate=1000 and rate=5000 (8 producers, one event per transaction), rate=max (8 producers,
// 10 events per transaction, as fast as they go); each producer calls Outbox.Notify after its
// commit, as examples/postgres does, so the relay is woken rather than polling. Each runs
// OUTBOXKIT_BENCH_SECONDS (default 10) of production, then waits until every event is
// applied, and reports:
//
//   - events/s: events applied / time from the first commit to the last effect,
//   - produced/s: the producers' achieved rate,
//   - p50_ms, p99_ms: commit → effect, from COMMIT returning to the consumer's handler call
//     for the event (inside its inbox transaction, whose commit follows), and its three parts:
//     pickup_ (COMMIT returning → the relay's Sink.Send call with the event), send_ (that call
//     → its return: the brokers' acknowledgement) and consume_ (→ the handler call),
//   - cpu_us/event: the process's user+system CPU per event (producers, relay, consumer and the
//     broker all run in this process; PostgreSQL's CPU is not counted), and max_rss_MB: the
//     process's peak resident set.
//
// Run (needs PostgreSQL):
//
//	OUTBOXKIT_BENCH_SECONDS=10 go test -run '^$' -bench Pipeline -benchtime 1x -count 3 ./sinks/kafka/
func BenchmarkPipeline(b *testing.B) {
	for _, rate := range []int{1000, 5000, 0} {
		name := "rate=max"
		if rate > 0 {
			name = "rate=" + strconv.Itoa(rate)
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				benchPipeline(b, rate)
			}
		})
	}
}

func benchPipeline(b *testing.B, rate int) {
	ctx := context.Background()
	seconds := 10
	if v := os.Getenv("OUTBOXKIT_BENCH_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(b, err)
		seconds = n
	}
	c, delayed := latencyCluster(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(b, err)
	b.Cleanup(cl.Close)
	topic := fmt.Sprintf("pipeline-%d", time.Now().UnixNano())
	_, err = kadm.NewClient(cl).CreateTopic(ctx, benchPartitions, 1, nil, topic)
	require.NoError(b, err)

	_, _, _, producer := pgSchema(b)
	_, inboxSchema, _, consumerStore := pgSchema(b)
	ob, err := core.NewOutbox(ctx, producer, nil)
	require.NoError(b, err)
	inbox, err := core.NewInbox[pgx.Tx](ctx, consumerStore, nil)
	require.NoError(b, err)
	sink, err := kafka.New(cl, nil)
	require.NoError(b, err)
	quiet := slog.New(slog.DiscardHandler)
	// stamps: when the relay handed each event to the sink, and when the sink returned.
	var stamps sync.Map // event id -> [2]time.Time
	timed := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		began := time.Now()
		errs := sink.Send(ctx, msgs)
		acked := time.Now()
		for _, m := range msgs {
			stamps.Store(m.ID, [2]time.Time{began, acked})
		}
		return errs
	})
	relay, err := core.NewRelay(producer, timed, core.StaticRouter{Default: topic}, &core.RelayOptions{Logger: quiet})
	require.NoError(b, err)

	var committed sync.Map // event id -> time COMMIT returned
	var mu sync.Mutex
	var latencies, pickup, send, consume []time.Duration
	var applied atomic.Int64
	effects := pgx.Identifier{inboxSchema, "effects"}.Sanitize()
	consumer, err := kafka.NewConsumer(topic+"-g", []string{topic}, inbox, "pipeline",
		func(ctx context.Context, tx pgx.Tx, d *kafka.Delivery) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
				d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion, os.Getpid()); err != nil {
				return err
			}
			if t, ok := committed.Load(d.Event.ID); ok {
				now := time.Now()
				mu.Lock()
				latencies = append(latencies, now.Sub(t.(time.Time)))
				if st, ok := stamps.Load(d.Event.ID); ok {
					st := st.([2]time.Time)
					pickup = append(pickup, st[0].Sub(t.(time.Time)))
					send = append(send, st[1].Sub(st[0]))
					consume = append(consume, now.Sub(st[1]))
				}
				mu.Unlock()
			}
			applied.Add(1)
			return nil
		}, &kafka.ConsumerOptions{ClientOptions: []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchMaxWait(50 * time.Millisecond)},
			Logger: quiet})
	require.NoError(b, err)

	cpu0 := processCPU()
	start := time.Now()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(rctx) })
	wg.Go(func() { _ = consumer.Run(rctx) })

	// The producers: 8 goroutines; at a set rate each commits one event every 8/rate s.
	const producers = 8
	perTx := 1
	if rate == 0 {
		perTx = 10
	}
	payload := benchPayload()
	var produced atomic.Int64
	deadline := start.Add(time.Duration(seconds) * time.Second)
	var pw sync.WaitGroup
	for p := range producers {
		pw.Go(func() {
			var next time.Time
			interval := time.Duration(0)
			if rate > 0 {
				interval = time.Duration(producers) * time.Second / time.Duration(rate)
				next = start.Add(time.Duration(p) * interval / producers)
			}
			for i := 0; time.Now().Before(deadline); i++ {
				if rate > 0 {
					time.Sleep(time.Until(next))
					next = next.Add(interval)
				}
				evs := make([]core.Event, perTx)
				for j := range evs {
					k := (p*7 + i*perTx + j) % benchKeys
					evs[j] = core.Event{AggregateType: "order", AggregateID: strconv.Itoa(k), Type: "order.changed", Payload: payload}
				}
				var out []core.Event
				err := producer.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					var err error
					out, err = ob.Write(ctx, tx, evs...)
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				for _, ev := range out {
					committed.Store(ev.ID, now)
				}
				produced.Add(int64(len(out)))
				if err := ob.Notify(ctx); err != nil { // after the commit, as examples/postgres does
					b.Error(err)
					return
				}
			}
		})
	}
	pw.Wait()
	produceTime := time.Since(start)
	want := produced.Load()
	drainBy := time.Now().Add(5 * time.Minute)
	for applied.Load() < want && time.Now().Before(drainBy) {
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	stop()
	wg.Wait()
	require.GreaterOrEqual(b, applied.Load(), want, "every event applied within 5 minutes of the end of production")
	require.Positive(b, delayed.Load())

	mu.Lock()
	q := func(ds []time.Duration, f float64) float64 {
		if len(ds) == 0 {
			return 0
		}
		slices.Sort(ds)
		return float64(ds[int(f*float64(len(ds)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(float64(applied.Load())/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(want)/produceTime.Seconds(), "produced/s")
	b.ReportMetric(q(latencies, 0.50), "p50_ms")
	b.ReportMetric(q(latencies, 0.99), "p99_ms")
	for _, part := range []struct {
		name string
		ds   []time.Duration
	}{{"pickup", pickup}, {"send", send}, {"consume", consume}} {
		b.ReportMetric(q(part.ds, 0.50), part.name+"_p50_ms")
		b.ReportMetric(q(part.ds, 0.99), part.name+"_p99_ms")
	}
	mu.Unlock()
	b.ReportMetric(float64(cpu.Microseconds())/float64(want), "cpu_us/event")
	b.ReportMetric(maxRSSMB(), "max_rss_MB")
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// maxRSSMB is the process's peak resident set (VmHWM), in MB.
func maxRSSMB() float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err == nil {
				return float64(kb) / 1024
			}
		}
	}
	return 0
}
