package kafka_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// TestConsumerConformance runs the consumer suite against the Kafka consumer on the kfake
// cluster: a topic of 2 partitions and its dead-letter topic, the sink of this package to
// publish, and the in-memory inbox. A message is acknowledged when the group's committed
// offset passed it.
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		topic := newTopic(t, 2)
		dlt := topic + ".dlt"
		createTopic(t, dlt, 1)
		group := topic + "-g"
		cl := newClient(t)
		sink, err := kafka.New(cl, nil)
		require.NoError(t, err)
		adm := kadm.NewClient(cl)
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: topic,
			Sink:        sink,
			PublishUndecodable: func(ctx context.Context) error {
				return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("raw"), Value: []byte("not an outbox record")}).FirstErr()
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				c, err := kafka.NewConsumer(group, []string{topic}, inbox, consumer, func(ctx context.Context, tx *memory.Tx, d *kafka.Delivery) error {
					return h(ctx, tx, &d.Event)
				}, &kafka.ConsumerOptions{
					ClientOptions: []kgo.Opt{kgo.SeedBrokers(brokers(t)...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
						kgo.FetchMaxWait(200 * time.Millisecond)},
					CommitInterval: 100 * time.Millisecond, RetryBackoff: 100 * time.Millisecond, MaxAttempts: 3,
					Logger: slog.New(slog.DiscardHandler),
				})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				t.Cleanup(func() {
					cancel()
					require.NoError(t, <-done)
				})
			},
			Pending: func(ctx context.Context) (int, error) {
				ends, err := adm.ListEndOffsets(ctx, topic)
				if err != nil {
					return 0, err
				}
				committed, err := adm.FetchOffsets(ctx, group)
				if err != nil {
					return 0, err
				}
				n := int64(0)
				err = ends.Error()
				ends.Each(func(o kadm.ListedOffset) {
					at := int64(0) // nothing committed: the topic is new, its log starts at 0
					if co, ok := committed.Lookup(topic, o.Partition); ok && co.Err == nil {
						at = co.At
					}
					n += o.Offset - at
				})
				return int(n), err
			},
			DeadLetters: func(ctx context.Context) (int, error) {
				ends, err := adm.ListEndOffsets(ctx, dlt)
				if err != nil {
					return 0, err
				}
				n := int64(0)
				ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
				return int(n), ends.Error()
			},
		}
	})
	conformance.RunConsumer(t, h)
}
