package rabbitmq_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// relayBenchEvents is how many events every way of the relay benchmarks publishes per
// iteration: 5 batches of the relay's default BatchSize for each of its default 4 loops.
const relayBenchEvents = 20000

// relayBenchLatency is the delay the latency benchmarks add to every byte from the broker:
// the median broker answer of the design document's capacity model (capacity.Model, 12 ms).
const relayBenchLatency = 12 * time.Millisecond

// BenchmarkRelayToRabbitMQ publishes relayBenchEvents events (1 KiB, 64 keys) to a fresh
// durable queue per way and iteration of the test node, several ways, interleaved (their
// order reversed every other iteration):
//
//   - relay_pg: one core.Relay with default options (BatchSize 1000, InFlight 4) drains them,
//     committed beforehand, from PostgreSQL through the sink with default options
//     (Concurrency 8, batches of 256 per channel),
//   - sink: the sink alone, Send calls of 1000 messages from 4 goroutines (each with the
//     keys of one relay loop: key mod 4),
//   - bare: amqp091 alone, the same 4 goroutines and calls of 1000: each publishes its 1000
//     messages (built by the sink's own encoding, mandatory, persistent) on its channel in
//     confirm mode, then waits for every confirm,
//   - bare_1: the same with one goroutine (Kafka's bare_sync: one batch at a time).
//
// It reports msgs/s per way, relay_pg/bare and relay_pg/bare_1 (issue 32's figure: ≥ 0.8),
// sink/bare, and the relay's mean time per batch in the sink (relay_send_ms/batch) and in the
// database (relay_db_ms/batch: fetch and settle).
//
//	go test -run '^$' -bench 'RelayToRabbitMQ$' -benchtime 2x -count 3 ./sinks/rabbitmq/
func BenchmarkRelayToRabbitMQ(b *testing.B) {
	benchRelayToRabbitMQ(b, brokerURL(b))
}

// BenchmarkRelayToRabbitMQLatency is BenchmarkRelayToRabbitMQ with every connection (the
// sink's and the bare loops') going through an in-process toxiproxy proxy whose latency
// toxic delays every byte from the broker by 12 ms (relayBenchLatency), so that every
// publisher confirm arrives 12 ms late, as from a broker that replicates before confirming.
// toxiproxy, not a delay inside the broker: RabbitMQ runs as its own process. A toxic delays
// a connection's bytes in order, so the capacity model's 80 ms tail (a slow answer that does
// not hold back the next) is not modelled: a fixed 12 ms is.
//
//	go test -run '^$' -bench 'RelayToRabbitMQLatency$' -benchtime 2x -count 3 ./sinks/rabbitmq/
func BenchmarkRelayToRabbitMQLatency(b *testing.B) {
	u, err := url.Parse(brokerURL(b))
	require.NoError(b, err)
	listen := pgtest.LatencyProxy(b, "rabbitmq-bench", u.Host, relayBenchLatency)
	u.Host = listen
	benchRelayToRabbitMQ(b, u.String())
}

// benchRelayToRabbitMQ runs the ways of BenchmarkRelayToRabbitMQ against the broker at addr.
func benchRelayToRabbitMQ(b *testing.B, addr string) {
	ctx := context.Background()
	pg := pgtest.New(b, "rabbitmq_")
	quiet := slog.New(slog.DiscardHandler)
	sink, err := rabbitmq.New(addr, &rabbitmq.Options{Logger: quiet})
	require.NoError(b, err)
	b.Cleanup(func() { _ = sink.Close() })
	conn, err := amqp.Dial(addr)
	require.NoError(b, err)
	b.Cleanup(func() { _ = conn.Close() })
	bare := func() func(dest string, batch []core.Message) error {
		ch, err := conn.Channel()
		require.NoError(b, err)
		require.NoError(b, ch.Confirm(false))
		return func(dest string, batch []core.Message) error {
			dcs := make([]*amqp.DeferredConfirmation, len(batch))
			for i := range batch {
				p, _ := rabbitmq.Publishing(&batch[i], rabbitmq.DefaultSource, "")
				if dcs[i], err = ch.PublishWithDeferredConfirmWithContext(ctx, "", dest, true, false, p); err != nil {
					return err
				}
			}
			for i, dc := range dcs {
				if !dc.Wait() {
					return fmt.Errorf("message %d nacked", i)
				}
			}
			return nil
		}
	}
	dest := func() (string, func()) {
		q := queueName(b)
		ch, err := conn.Channel()
		require.NoError(b, err)
		defer ch.Close()
		_, err = ch.QueueDeclare(q, true, false, false, false, nil)
		require.NoError(b, err)
		return q, func() {
			ch, err := conn.Channel()
			require.NoError(b, err)
			defer ch.Close()
			n, err := ch.QueueDelete(q, false, false, false)
			require.NoError(b, err)
			require.GreaterOrEqual(b, n, relayBenchEvents, "messages in %s", q)
		}
	}
	pgtest.RelayWays(b, pg, sink, dest, relayBenchEvents, bare)
}
