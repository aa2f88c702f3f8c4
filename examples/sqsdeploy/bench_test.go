package sqsdeploy_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// settleCounter counts the records the relay marked published and closes done at target.
type settleCounter struct {
	driver.RelayStore
	target    int64
	published atomic.Int64
	once      sync.Once
	done      chan struct{}
}

func (s *settleCounter) Settle(ctx context.Context, p driver.SettleParams) error {
	if err := s.RelayStore.Settle(ctx, p); err != nil {
		return err
	}
	if s.published.Add(int64(len(p.Published))) >= s.target {
		s.once.Do(func() { close(s.done) })
	}
	return nil
}

// BenchmarkRelayToSQS compares, in every iteration and in alternating order, ways of sending N
// events (1 KiB payloads, 64 partition keys, the same attributes) to a standard SQS queue on
// the emulator:
//
//   - relay: one core.Relay (default options: batches of 500) draining N events committed in the
//     PostgreSQL outbox through the sqs sink (default options: 10 entries per request, 8
//     requests in flight), timed from Run until all N were marked published in the outbox;
//   - relay_x2: the same with two relays in the process (each fetches and settles while the
//     other sends); both are registered beforehand so each claims half of the lanes at once;
//   - sink: the sqs sink alone (Send calls of 500, as the relay makes them), no database;
//   - bare: a hand-written sequential aws-sdk-go-v2 SendMessageBatch loop (10 entries per
//     request), building comparable attributes, reading and marking nothing;
//   - bare_c8: the same loop over 8 goroutines (the sink's default concurrency).
//
// It reports msgs/s for each and the relay/bare throughput ratios. Writing the events before a
// relay phase and purging the queue after each phase are not timed. Run:
//
//	go test -run '^$' -bench RelayToSQS -benchtime 3x -count 3 ./examples/sqsdeploy/
func BenchmarkRelayToSQS(b *testing.B) {
	const n, keys, txSize = 5000, 64, 500
	ep := awsEndpoint(b)
	admin := pool(b, 2)
	db := pool(b, 8)
	ctx := context.Background()
	store, err := postgres.New(db, &postgres.Options{Schema: schema(b, admin, "sqsd_bench_")})
	require.NoError(b, err)
	require.NoError(b, store.Migrate(ctx))
	outbox, err := core.NewOutbox(ctx, store, nil)
	require.NoError(b, err)
	sq := sqsClient(ep, nil)
	url, _ := queue(b, sq, randName("bench-"))
	sink, err := sqs.New(sq, nil)
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}

	// The N events; write stores them with new IDs (the outbox refuses a duplicate ID).
	evs := make([]core.Event, n)
	for j := range evs {
		evs[j] = core.Event{ID: randName("ev-"), AggregateType: "order", AggregateID: strconv.Itoa(j % keys),
			AggregateVersion: int64(j/keys + 1), Type: "order.updated", PartitionKey: "order/" + strconv.Itoa(j%keys), Payload: payload}
	}
	write := func() {
		b.StopTimer()
		defer b.StartTimer()
		for i := 0; i < n; i += txSize {
			batch := slices.Clone(evs[i:min(i+txSize, n)])
			for k := range batch {
				batch[k].ID = ""
			}
			require.NoError(b, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				_, err := outbox.Write(ctx, tx, batch...)
				return err
			}))
		}
	}
	var failures uint64 // failed delivery attempts the relays recorded (retried with backoff)
	relay := func(workers int) time.Duration {
		counter := &settleCounter{RelayStore: store, target: n, done: make(chan struct{})}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, workers)
		relays := make([]*core.Relay, workers)
		for w := range relays {
			r, err := core.NewRelay(counter, sink, core.StaticRouter{Default: url}, &core.RelayOptions{Owner: randName("bench-relay-")})
			require.NoError(b, err)
			if workers > 1 { // registered beforehand, so that each claims its share of the lanes at once
				_, err := store.Heartbeat(ctx, driver.HeartbeatParams{Owner: r.Owner(), TTL: time.Minute})
				require.NoError(b, err)
			}
			relays[w] = r
		}
		start := time.Now()
		for _, r := range relays {
			go func() { done <- r.Run(rctx) }()
		}
		select {
		case <-counter.done:
		case err := <-done:
			b.Fatalf("relay stopped early: %v", err)
		}
		elapsed := time.Since(start)
		cancel()
		for range relays {
			require.NoError(b, <-done)
		}
		for _, r := range relays {
			failures += r.Stats().Failures
		}
		return elapsed
	}
	bare := func(workers int) time.Duration {
		start := time.Now()
		chunks := make(chan []core.Event)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for chunk := range chunks {
					entries := make([]types.SendMessageBatchRequestEntry, len(chunk))
					for k, ev := range chunk {
						meta, err := json.Marshal(map[string]any{"v": 1, "partition_key": ev.PartitionKey})
						if err != nil {
							panic(err)
						}
						str := func(v string) types.MessageAttributeValue {
							return types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
						}
						entries[k] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), MessageBody: aws.String(string(ev.Payload)),
							MessageAttributes: map[string]types.MessageAttributeValue{
								"outbox.id": str(ev.ID), "outbox.type": str(ev.Type), "outbox.aggregate": str(ev.AggregateType + "/" + ev.AggregateID),
								"outbox.aggregate_version": {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(ev.AggregateVersion, 10))},
								"outbox.meta":              str(string(meta)),
							}}
					}
					out, err := sq.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
					if err != nil || len(out.Failed) > 0 || len(out.Successful) != len(entries) {
						panic("bare send failed")
					}
				}
			})
		}
		for i := 0; i < len(evs); i += 10 {
			chunks <- evs[i:min(i+10, len(evs))]
		}
		close(chunks)
		wg.Wait()
		return time.Since(start)
	}
	sinkOnly := func() time.Duration {
		msgs := make([]core.Message, n)
		now := time.Now().UTC()
		for j, ev := range evs {
			msgs[j] = core.Message{Record: driver.Record{Event: ev, CreatedAt: now}, Destination: url, DedupID: ev.ID, GroupID: ev.PartitionKey}
		}
		start := time.Now()
		for i := 0; i < n; i += 500 {
			for _, err := range sink.Send(ctx, msgs[i:min(i+500, n)]) {
				require.NoError(b, err)
			}
		}
		return time.Since(start)
	}
	purge := func() {
		b.StopTimer()
		_, err := sq.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		require.NoError(b, err)
		b.StartTimer()
	}

	var tRelay, tRelay2, tSink, tBare, tBare8 time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		phases := []func(){
			func() { write(); tRelay += relay(1); purge() },
			func() { write(); tRelay2 += relay(2); purge() },
			func() { tSink += sinkOnly(); purge() },
			func() { tBare += bare(1); purge() },
			func() { tBare8 += bare(8); purge() },
		}
		if i%2 == 1 {
			slices.Reverse(phases)
		}
		for _, p := range phases {
			p()
		}
	}
	total := float64(n * b.N)
	b.ReportMetric(total/tRelay.Seconds(), "relay_msgs/s")
	b.ReportMetric(total/tRelay2.Seconds(), "relay_x2_msgs/s")
	b.ReportMetric(total/tSink.Seconds(), "sink_msgs/s")
	b.ReportMetric(total/tBare.Seconds(), "bare_msgs/s")
	b.ReportMetric(total/tBare8.Seconds(), "bare_c8_msgs/s")
	b.ReportMetric(tBare.Seconds()/tRelay.Seconds(), "relay/bare")
	b.ReportMetric(tBare8.Seconds()/tRelay.Seconds(), "relay/bare_c8")
	b.ReportMetric(tBare.Seconds()/tRelay2.Seconds(), "relay_x2/bare")
	b.ReportMetric(float64(failures), "relay_failed_attempts")
}
