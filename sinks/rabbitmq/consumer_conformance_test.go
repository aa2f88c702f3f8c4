package rabbitmq_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// TestConsumerConformance runs the consumer suite against the consumer on the test node: a
// queue declared with DeclareQueue (its dead-letter exchange and queue), the sink of this
// package to publish, and the in-memory inbox. Pending is the queue's messages, ready and
// unacknowledged, from rabbitmqctl list_queues (AMQP counts only the ready ones, the
// management API's statistics lag); DeadLetters the ready messages of the dead-letter queue,
// which has no consumer.
//
// It runs with the default options (batches of the deliveries received, MaxBatch 32 with the
// default Prefetch) and with MaxBatch 1 (one inbox transaction per message).
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	for name, maxBatch := range map[string]int{"default": 0, "MaxBatch1": 1} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			runConsumerConformance(t, maxBatch)
		})
	}
}

func runConsumerConformance(t *testing.T, maxBatch int) {
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		q := newQueue(t, nil)
		sink := newSink(t, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
		ch := channel(t)
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: q,
			Sink:        sink,
			PublishUndecodable: func(ctx context.Context) error {
				return ch.PublishWithContext(ctx, "", q, true, false, amqp.Publishing{Body: []byte("not an outbox message"), DeliveryMode: amqp.Persistent})
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				c, err := rabbitmq.NewConsumer(brokerURL(t), q, inbox, consumer, func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
					return h(ctx, tx, &d.Event)
				}, &rabbitmq.ConsumerOptions{MaxBatch: maxBatch, RetryDelay: 100 * time.Millisecond, MaxAttempts: 20, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				t.Cleanup(func() {
					cancel()
					require.NoError(t, <-done)
				})
			},
			Pending:     func(ctx context.Context) (int, error) { return pending(ctx, t, q) },
			DeadLetters: func(ctx context.Context) (int, error) { return ready(t, q+".dlq") },
		}
	})
	conformance.RunConsumer(t, h)
}
