package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/capacity"
	"github.com/outboxkit/outbox/sinks/kafka"
)

const benchEvents, benchKeys, benchBatch = 5000, 64, 500

const benchPartitions = 6

func benchPayload() []byte {
	p := make([]byte, 1024)
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return p
}

// BenchmarkRelayToKafka publishes benchEvents events (1 KiB, 64 keys) to a 6-partition topic of
// the kfake cluster process several ways in every iteration, interleaved:
//
//   - relay_pg: one core.Relay (batch 500, default InFlight) drains them, committed
//     beforehand, from PostgreSQL through the Kafka sink (fetch, send, mark per batch),
//   - relay_mem: the same relay draining the in-memory adapter (the relay and sink without a
//     database),
//   - sink: the sink alone, Send calls of 500 messages,
//   - bare_sync: a bare franz-go loop, ProduceSync of 500 records at a time with the same key,
//     value and headers (built inside the timed section), i.e. what a relay batch does,
//   - bare_async: Produce of every record at once, then Flush (the producer's ceiling).
//
// Run (needs PostgreSQL and the kfake cluster):
//
//	go test -run '^$' -bench RelayToKafka -benchtime 3x -count 3 ./sinks/kafka/
func BenchmarkRelayToKafka(b *testing.B) {
	cl := newClient(b)
	benchRelayToKafka(b, cl, newTopic(b, benchPartitions), benchEvents)
}

// BenchmarkRelayToKafkaLatency is BenchmarkRelayToKafka against a broker that answers every
// produce request after a lognormal delay of the design document's capacity model (12 ms
// median, 80 ms p99: capacity.Model), as a replicated cluster with acks=all does, instead of
// kfake's ~1 ms. The cluster is kfake in this process (3 brokers), delaying each produce
// request in a control function (each request draws its own delay; kfake replies to the
// requests of one connection in order). 20,000 events per way and iteration.
//
//	go test -run '^$' -bench RelayToKafkaLatency -benchtime 3x -count 3 ./sinks/kafka/
func BenchmarkRelayToKafkaLatency(b *testing.B) {
	c, delayed := latencyCluster(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(b, err)
	b.Cleanup(cl.Close)
	topic := fmt.Sprintf("latency-%d", time.Now().UnixNano())
	_, err = kadm.NewClient(cl).CreateTopic(context.Background(), benchPartitions, 1, nil, topic)
	require.NoError(b, err)
	benchRelayToKafka(b, cl, topic, 4*benchEvents)
	require.Positive(b, delayed.Load(), "produce requests went through the delay")
}

// latencyCluster is a kfake cluster in this process (3 brokers, benchPartitions partitions per
// new topic) that answers every produce request after a delay drawn from capacity.Model; the
// counter counts the delayed requests.
func latencyCluster(b *testing.B) (*kfake.Cluster, *atomic.Int64) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(benchPartitions))
	require.NoError(b, err)
	b.Cleanup(c.Close)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	var delayed atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		d := capacity.Model.Sample(rng)
		mu.Unlock()
		delayed.Add(1)
		c.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false // then handled as usual
	})
	return c, &delayed
}

// benchRelayToKafka runs the ways of BenchmarkRelayToKafka with n events each per iteration
// against topic, through cl.
func benchRelayToKafka(b *testing.B, cl *kgo.Client, topic string, n int) {
	ctx := context.Background()
	_, _, _, store := pgSchema(b)
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(b, err)
	mem, err := memory.New(nil)
	require.NoError(b, err)
	memOb, err := core.NewOutbox[*memory.Tx](ctx, mem, nil)
	require.NoError(b, err)
	sink, err := kafka.New(cl, &kafka.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	payload := benchPayload()
	events := func() []core.Event {
		evs := make([]core.Event, n)
		for i := range evs {
			evs[i] = core.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % benchKeys), Type: "order.changed", Payload: payload}
		}
		return evs
	}
	messages := func(prefix string) []core.Message {
		evs := events()
		ms := make([]core.Message, len(evs))
		for i := range evs {
			evs[i].ID = fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), i)
			ms[i] = core.Message{Record: driver.Record{Event: evs[i], CreatedAt: time.Now()}, Destination: topic,
				DedupID: evs[i].ID, GroupID: "order/" + evs[i].AggregateID}
		}
		return ms
	}
	drain := func(st driver.RelayStore) time.Duration {
		r, err := core.NewRelay(st, sink, core.StaticRouter{Default: topic}, &core.RelayOptions{
			BatchSize: benchBatch, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- r.Run(rctx) }()
		for r.Stats().Published < uint64(n) {
			time.Sleep(time.Millisecond)
		}
		d := time.Since(start)
		cancel()
		require.NoError(b, <-done)
		return d
	}
	relayPG := func() time.Duration {
		require.NoError(b, store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := ob.Write(ctx, tx, events()...)
			return err
		}))
		return drain(store)
	}
	relayMem := func() time.Duration {
		require.NoError(b, mem.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := memOb.Write(ctx, tx, events()...)
			return err
		}))
		return drain(mem)
	}
	sinkOnly := func() time.Duration {
		ms := messages("sink")
		start := time.Now()
		for i := 0; i < len(ms); i += benchBatch {
			for _, err := range sink.Send(ctx, ms[i:min(i+benchBatch, len(ms))]) {
				require.NoError(b, err)
			}
		}
		return time.Since(start)
	}
	records := func(ms []core.Message) []*kgo.Record {
		recs := make([]*kgo.Record, len(ms))
		for i := range ms {
			recs[i] = &kgo.Record{Topic: topic, Key: []byte(ms[i].GroupID), Value: ms[i].Payload,
				Headers: kafka.EncodeHeaders(&ms[i], kafka.DefaultSource, "")}
		}
		return recs
	}
	bareSync := func() time.Duration {
		ms := messages("sync")
		start := time.Now()
		recs := records(ms)
		for i := 0; i < len(recs); i += benchBatch {
			require.NoError(b, cl.ProduceSync(ctx, recs[i:min(i+benchBatch, len(recs))]...).FirstErr())
		}
		return time.Since(start)
	}
	bareAsync := func() time.Duration {
		ms := messages("async")
		start := time.Now()
		var mu sync.Mutex
		var first error
		for _, r := range records(ms) {
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			})
		}
		require.NoError(b, cl.Flush(ctx))
		require.NoError(b, first)
		return time.Since(start)
	}
	ways := []struct {
		name string
		run  func() time.Duration
		t    time.Duration
	}{{"relay_pg", relayPG, 0}, {"relay_mem", relayMem, 0}, {"sink", sinkOnly, 0}, {"bare_sync", bareSync, 0}, {"bare_async", bareAsync, 0}}
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
	b.ReportMetric(ways[3].t.Seconds()/ways[0].t.Seconds(), "relay_pg/bare_sync")
	b.ReportMetric(ways[3].t.Seconds()/ways[1].t.Seconds(), "relay_mem/bare_sync")
	b.ReportMetric(ways[3].t.Seconds()/ways[2].t.Seconds(), "sink/bare_sync")
}

// BenchmarkConsumerToPostgresInbox consumes 10,000 records (1 KiB, 64 keys, 6 partitions, a
// new topic per iteration) with a fresh consumer group and applies each through the PostgreSQL
// inbox (per record: horizon, version gate, inbox row, one INSERT of effect), and reports
// records/s from the consumer's start until the last one is applied: inbox_msgs/s with the
// default options (up to MaxBatch 100 records of a partition per inbox transaction),
// unbatched_inbox_msgs/s with MaxBatch 1 (one transaction per record). Interleaved with them,
// bare_inbox applies the same messages by calling core.Inbox.Process directly from 6
// goroutines (one per partition, one transaction per message): the unbatched inbox's own
// ceiling on this database.
//
//	go test -run '^$' -bench ConsumerToPostgres -benchtime 3x -count 3 ./sinks/kafka/
func BenchmarkConsumerToPostgresInbox(b *testing.B) {
	ctx := context.Background()
	_, schema, _, store := pgSchema(b)
	inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
	require.NoError(b, err)
	n := 2 * benchEvents
	sink, err := kafka.New(newClient(b), nil)
	require.NoError(b, err)
	payload := benchPayload()
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	effect := func(ctx context.Context, tx pgx.Tx, ev *core.Event) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
			ev.ID, ev.AggregateID, ev.AggregateVersion, os.Getpid())
		return err
	}
	messages := func(round string) []core.Message {
		msgs := make([]core.Message, n)
		for j := range msgs {
			k := fmt.Sprint(j % benchKeys)
			ev := core.Event{ID: fmt.Sprintf("%s-%d-%d", round, time.Now().UnixNano(), j), AggregateType: "order", AggregateID: k,
				AggregateVersion: int64(j/benchKeys + 1), Type: "order.changed", Payload: payload}
			msgs[j] = core.Message{Record: driver.Record{Event: ev}, Destination: "", DedupID: ev.ID, GroupID: "order/" + k}
		}
		return msgs
	}
	consumer := func(i, maxBatch int) time.Duration {
		topic := newTopic(b, benchPartitions)
		msgs := messages(topic)
		for j := range msgs {
			msgs[j].Destination = topic
		}
		for j := 0; j < n; j += benchBatch {
			for _, err := range sink.Send(ctx, msgs[j:j+benchBatch]) {
				require.NoError(b, err)
			}
		}
		c, err := kafka.NewConsumer(topic+"-g", []string{topic}, inbox, fmt.Sprintf("bench-consumer-%d", i),
			func(ctx context.Context, tx pgx.Tx, d *kafka.Delivery) error { return effect(ctx, tx, &d.Event) },
			&kafka.ConsumerOptions{
				ClientOptions: []kgo.Opt{kgo.SeedBrokers(brokers(b)...), kgo.FetchMaxWait(50 * time.Millisecond)},
				MaxBatch:      maxBatch,
				Logger:        slog.New(slog.DiscardHandler),
			})
		require.NoError(b, err)
		start := time.Now()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		for c.Stats().Applied < uint64(n) {
			time.Sleep(time.Millisecond)
		}
		d := time.Since(start)
		cancel()
		require.NoError(b, <-done)
		return d
	}
	bare := func(i int) time.Duration {
		msgs := messages(fmt.Sprint("bare", i))
		name := fmt.Sprintf("bench-bare-%d", i)
		start := time.Now()
		var wg sync.WaitGroup
		for g := 0; g < int(benchPartitions); g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := g; j < n; j += int(benchPartitions) {
					ev := &msgs[j].Event
					_, err := inbox.Process(ctx, name, core.InboxMessage{EventID: ev.ID, Payload: ev.Payload,
						Entity: "order/" + ev.AggregateID + fmt.Sprint("/", g), Version: ev.AggregateVersion},
						func(ctx context.Context, tx pgx.Tx, _ core.InboxMessage) error { return effect(ctx, tx, ev) })
					if err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	var tConsumer, tUnbatched, tBare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			tConsumer += consumer(3*i, 0)
			tUnbatched += consumer(3*i+1, 1)
			tBare += bare(i)
		} else {
			tBare += bare(i)
			tUnbatched += consumer(3*i+1, 1)
			tConsumer += consumer(3*i, 0)
		}
	}
	b.ReportMetric(float64(n*b.N)/tConsumer.Seconds(), "inbox_msgs/s")
	b.ReportMetric(float64(n*b.N)/tUnbatched.Seconds(), "unbatched_inbox_msgs/s")
	b.ReportMetric(float64(n*b.N)/tBare.Seconds(), "bare_inbox_msgs/s")
}
