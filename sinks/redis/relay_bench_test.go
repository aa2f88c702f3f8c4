package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/pgtest"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// relayBenchEvents is how many events every way of the relay benchmarks publishes per
// iteration: 5 batches of the relay's default BatchSize for each of its default 4 loops.
const relayBenchEvents = 20000

// relayBenchLatency is the delay the latency benchmarks add to every byte from the server:
// the median broker answer of the design document's capacity model (capacity.Model, 12 ms).
const relayBenchLatency = 12 * time.Millisecond

// BenchmarkRelayToRedis appends relayBenchEvents events (1 KiB, 64 keys) to a fresh stream per
// way and iteration of the test server (appendonly yes, as scripts/lib starts it), several
// ways, interleaved (their order reversed every other iteration):
//
//   - relay_pg: one core.Relay with default options (BatchSize 1000, InFlight 4) drains them,
//     committed beforehand, from PostgreSQL through the sink with default options (one
//     pipeline of XADDs per stream and Send call),
//   - sink: the sink alone, Send calls of 1000 messages from 4 goroutines (each with the
//     keys of one relay loop: key mod 4),
//   - bare: go-redis alone, the same 4 goroutines and calls of 1000: each sends its 1000
//     XADDs (the sink's own fields) in one pipeline,
//   - bare_1: the same with one goroutine (one batch at a time).
//
// It reports msgs/s per way, relay_pg/bare and relay_pg/bare_1 (issue 32's figure: ≥ 0.8),
// sink/bare, and the relay's mean time per batch in the sink (relay_send_ms/batch) and in the
// database (relay_db_ms/batch: fetch and settle).
//
//	go test -run '^$' -bench 'RelayToRedis$' -benchtime 2x -count 3 ./sinks/redis/
func BenchmarkRelayToRedis(b *testing.B) {
	benchRelayToRedis(b, addr(b))
}

// BenchmarkRelayToRedisLatency is BenchmarkRelayToRedis with every connection (the sink's and
// the bare loops') going through an in-process toxiproxy proxy whose latency toxic delays
// every byte from the server by 12 ms (relayBenchLatency), so that every pipeline's replies
// arrive 12 ms late, as from a distant or replicated (WAIT) server. toxiproxy, not a delay
// inside the server: the test server runs as its own process. A toxic delays a connection's
// bytes in order, so the capacity model's 80 ms tail (a slow answer that does not hold back
// the next) is not modelled: a fixed 12 ms is.
//
//	go test -run '^$' -bench 'RelayToRedisLatency$' -benchtime 2x -count 3 ./sinks/redis/
func BenchmarkRelayToRedisLatency(b *testing.B) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "redis-bench", "127.0.0.1:0", addr(b))
	require.NoError(b, p.Start())
	b.Cleanup(p.Stop)
	_, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, relayBenchLatency.Milliseconds())))
	require.NoError(b, err)
	benchRelayToRedis(b, p.Listen)
}

// benchRelayToRedis runs the ways of BenchmarkRelayToRedis against the server at addr.
func benchRelayToRedis(b *testing.B, addr string) {
	ctx := context.Background()
	pg := pgtest.New(b, "redis_")
	cl := goredis.NewClient(&goredis.Options{Addr: addr})
	b.Cleanup(func() { _ = cl.Close() })
	sink, err := redissink.New(cl, &redissink.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	bare := func() func(dest string, batch []core.Message) error {
		return func(dest string, batch []core.Message) error {
			pipe := cl.Pipeline()
			for i := range batch {
				f, _ := redissink.EncodeFields(&batch[i], redissink.DefaultSource, "")
				pipe.XAdd(ctx, &goredis.XAddArgs{Stream: dest, Values: f})
			}
			_, err := pipe.Exec(ctx)
			return err
		}
	}
	dest := func() (string, func()) {
		stream := newStream(b)
		return stream, func() {
			n, err := cl.XLen(ctx, stream).Result()
			require.NoError(b, err)
			require.GreaterOrEqual(b, n, int64(relayBenchEvents), "entries in %s", stream)
			require.NoError(b, cl.Del(ctx, stream).Err())
		}
	}
	relayWays(b, pg, sink, dest, relayBenchEvents, bare)
}

// relayWays runs the ways of the relay benchmarks (see BenchmarkRelayToRabbitMQ) with n events
// each per iteration: dest gives each run a fresh destination and its check-and-cleanup
// (called after the run, untimed), bare a bare publisher of the broker's client for one
// goroutine.
func relayWays(b *testing.B, pg pgtest.Schema, sink core.Sink, dest func() (string, func()), n int,
	bare func() func(dest string, batch []core.Message) error) {
	const keys, loops = 64, core.DefaultInFlight
	batch := core.DefaultBatchSize
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, pg.Store, nil)
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	events := func() []core.Event {
		evs := make([]core.Event, n)
		for i := range evs {
			evs[i] = core.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % keys), Type: "order.changed", Payload: payload}
		}
		return evs
	}
	// parts splits the messages by key mod goroutines, in order.
	parts := func(d string, goroutines int) [][]core.Message {
		evs := events()
		out := make([][]core.Message, goroutines)
		stamp := time.Now().UnixNano()
		for i := range evs {
			evs[i].ID = fmt.Sprintf("%s-%d-%d", d, stamp, i)
			m := core.Message{Record: driver.Record{Event: evs[i], CreatedAt: time.Now()}, Destination: d,
				DedupID: evs[i].ID, GroupID: "order/" + evs[i].AggregateID}
			g := i % keys % goroutines
			out[g] = append(out[g], m)
		}
		return out
	}
	// run calls send on every batch of every part, one goroutine per part.
	run := func(ps [][]core.Message, send func(g int, batch []core.Message) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(ps))
		for g, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < len(p) && errs[g] == nil; i += batch {
					errs[g] = send(g, p[i:min(i+batch, len(p))])
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		for _, err := range errs {
			require.NoError(b, err)
		}
		return d
	}
	var sendTime, dbTime time.Duration
	var sends, fetches uint64
	relayPG := func() time.Duration {
		d, done := dest()
		defer done()
		require.NoError(b, pg.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := ob.Write(ctx, tx, events()...)
			return err
		}))
		r, err := core.NewRelay(pg.Store, sink, core.StaticRouter{Default: d}, &core.RelayOptions{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		t := pgtest.TimeRun(b, uint64(n), r.Run, func() uint64 { return r.Stats().Published })
		st := r.Stats()
		require.Zero(b, st.Failures+st.Parked, "%+v", st)
		sendTime += st.SendTime
		dbTime += st.FetchTime + st.SettleTime
		sends += st.Sends
		fetches += st.Fetches
		return t
	}
	sinkOnly := func() time.Duration {
		d, done := dest()
		defer done()
		return run(parts(d, loops), func(_ int, ms []core.Message) error {
			for _, err := range sink.Send(ctx, ms) {
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	bareN := func(goroutines int) func() time.Duration {
		return func() time.Duration {
			d, done := dest()
			defer done()
			senders := make([]func(string, []core.Message) error, goroutines)
			for g := range senders {
				senders[g] = bare()
			}
			return run(parts(d, goroutines), func(g int, ms []core.Message) error { return senders[g](d, ms) })
		}
	}
	ways := []struct {
		name string
		run  func() time.Duration
		t    time.Duration
	}{{"relay_pg", relayPG, 0}, {"sink", sinkOnly, 0}, {"bare", bareN(loops), 0}, {"bare_1", bareN(1), 0}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ways {
			w := &ways[k]
			if i%2 == 1 {
				w = &ways[len(ways)-1-k]
			}
			w.t += w.run()
		}
	}
	total := float64(n * b.N)
	for _, w := range ways {
		b.ReportMetric(total/w.t.Seconds(), w.name+"_msgs/s")
	}
	b.ReportMetric(ways[2].t.Seconds()/ways[0].t.Seconds(), "relay_pg/bare")
	b.ReportMetric(ways[3].t.Seconds()/ways[0].t.Seconds(), "relay_pg/bare_1")
	b.ReportMetric(ways[2].t.Seconds()/ways[1].t.Seconds(), "sink/bare")
	b.ReportMetric(float64(sendTime.Milliseconds())/float64(max(sends, 1)), "relay_send_ms/batch")
	b.ReportMetric(float64(dbTime.Milliseconds())/float64(max(fetches, 1)), "relay_db_ms/batch")
}
