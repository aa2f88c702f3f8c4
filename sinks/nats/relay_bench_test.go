package nats_test

import (
	"context"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/testkit"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// relayBenchEvents is how many events every way of the relay benchmarks publishes per
// iteration: 5 batches of the relay's default BatchSize for each of its default 4 loops.
const relayBenchEvents = 20000

// relayBenchLatency is the delay the latency benchmarks add to every byte from the server:
// the median broker answer of the design document's capacity model (capacity.Model, 12 ms).
const relayBenchLatency = 12 * time.Millisecond

// BenchmarkRelayToNATS publishes relayBenchEvents events (1 KiB, 64 keys) to a fresh stream
// (file storage) per way and iteration of the test server, several ways, interleaved (their
// order reversed every other iteration):
//
//   - relay_pg: one core.Relay with default options (BatchSize 1000, InFlight 4) drains them,
//     committed beforehand, from PostgreSQL through the sink with default options
//     (Concurrency 4, MaxInFlight 256; a round holds one message per key),
//   - sink: the sink alone, Send calls of 1000 messages from 4 goroutines (each with the
//     keys of one relay loop: key mod 4),
//   - bare: nats.go's jetstream alone, the same 4 goroutines and calls of 1000: each
//     PublishMsgAsync's its 1000 messages (built by the sink's own encoding, Nats-Msg-Id
//     included) at once, then waits for every PubAck,
//   - bare_1: the same with one goroutine (one batch at a time).
//
// It reports msgs/s per way, relay_pg/bare and relay_pg/bare_1 (issue 32's figure: ≥ 0.8),
// sink/bare, and the relay's mean time per batch in the sink (relay_send_ms/batch) and in the
// database (relay_db_ms/batch: fetch and settle).
//
// The sink keeps one message per key in flight (a round holds one message of each key, and
// the rounds of one Send share keys, so they run one after another): a Send of 1000 messages
// over the ~16 keys of one relay loop is ~63 rounds of one PubAck round trip each, while bare
// has all 1000 in flight. The sink is bounded by keys / round trip (64 keys at 12 ms: ~5.3k
// msgs/s) whatever the client could do; bare keeps no per-key order when a publish fails and a
// later one of its key is stored.
//
//	go test -run '^$' -bench 'RelayToNATS$' -benchtime 2x -count 3 ./sinks/nats/
func BenchmarkRelayToNATS(b *testing.B) {
	benchRelayToNATS(b, testkit.Need(b, testkit.NATSURL), false)
}

// BenchmarkRelayToNATSAtomic is BenchmarkRelayToNATS with the sink's Options.AtomicBatch, on
// streams created with AllowAtomicPublish, against the nats-server of this module's version
// in the test binary (atomic batches need 2.12 or later; every way, bare included, runs
// against that server): a Send's messages go out as atomic batches of whole keys, one round
// trip each, instead of rounds of one message per key.
//
//	go test -run '^$' -bench 'RelayToNATSAtomic' -benchtime 2x -count 3 ./sinks/nats/
func BenchmarkRelayToNATSAtomic(b *testing.B) {
	benchRelayToNATS(b, atomicURL(b), true)
}

// BenchmarkRelayToNATSAtomicLatency is BenchmarkRelayToNATSAtomic behind the 12 ms latency
// proxy of BenchmarkRelayToNATSLatency.
func BenchmarkRelayToNATSAtomicLatency(b *testing.B) {
	u, err := url.Parse(atomicURL(b))
	require.NoError(b, err)
	u.Host = pgtest.LatencyProxy(b, "nats-atomic-bench", u.Host, relayBenchLatency)
	benchRelayToNATS(b, u.String(), true)
}

// BenchmarkRelayToNATSLatency is BenchmarkRelayToNATS with every connection (the sink's and
// the bare loops') going through an in-process toxiproxy proxy whose latency toxic delays
// every byte from the server by 12 ms (relayBenchLatency), so that every PubAck arrives 12 ms
// late, as from a replicated stream. toxiproxy, not a delay inside the server: the test server
// runs as its own process. A toxic delays a connection's bytes in order, so the capacity
// model's 80 ms tail (a slow answer that does not hold back the next) is not modelled: a
// fixed 12 ms is.
//
//	go test -run '^$' -bench 'RelayToNATSLatency$' -benchtime 2x -count 3 ./sinks/nats/
func BenchmarkRelayToNATSLatency(b *testing.B) {
	u, err := url.Parse(testkit.Need(b, testkit.NATSURL))
	require.NoError(b, err)
	listen := pgtest.LatencyProxy(b, "nats-bench", u.Host, relayBenchLatency)
	u.Host = listen
	benchRelayToNATS(b, u.String(), false)
}

// benchRelayToNATS runs the ways of BenchmarkRelayToNATS against the server at addr, with
// Options.AtomicBatch and streams that allow it when atomic is set.
func benchRelayToNATS(b *testing.B, addr string, atomic bool) {
	ctx := context.Background()
	pg := pgtest.New(b, "nats_")
	nc, err := nats.Connect(addr, nats.Name(b.Name()), nats.DontRandomize(), nats.IgnoreDiscoveredServers())
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	sink, err := natssink.New(nc, &natssink.Options{Logger: slog.New(slog.DiscardHandler), AtomicBatch: atomic})
	require.NoError(b, err)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4*core.DefaultBatchSize))
	require.NoError(b, err)
	bare := func() func(dest string, batch []core.Message) error {
		return func(_ string, batch []core.Message) error {
			futs := make([]jetstream.PubAckFuture, len(batch))
			for i := range batch {
				var err error
				if futs[i], err = js.PublishMsgAsync(natssink.Encode(&batch[i], natssink.DefaultSource, "")); err != nil {
					return err
				}
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return err
				}
			}
			return nil
		}
	}
	dest := func() (string, func()) {
		subject := unique("relaybench") + ".events"
		name := unique("RB")
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, AllowAtomicPublish: atomic})
		require.NoError(b, err)
		return subject, func() {
			s, err := js.Stream(ctx, name)
			require.NoError(b, err)
			n, err := streamMsgs(ctx, s)
			require.NoError(b, err)
			require.GreaterOrEqual(b, n, relayBenchEvents, "messages in %s", name)
			require.NoError(b, js.DeleteStream(ctx, name))
		}
	}
	pgtest.RelayWays(b, pg, sink, dest, relayBenchEvents, bare)
}
