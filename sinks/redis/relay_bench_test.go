package redis_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
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
	listen := pgtest.LatencyProxy(b, "redis-bench", addr(b), relayBenchLatency)
	benchRelayToRedis(b, listen)
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
	pgtest.RelayWays(b, pg, sink, dest, relayBenchEvents, bare)
}
