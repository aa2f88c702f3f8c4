package rabbitmq_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// TestConformance runs the sink suite against the test node: a durable queue reached through
// the default exchange (Destination = the queue's name), read back with basic.get and decoded
// as the consumer does. One queue keeps the order of what one channel published, so it is
// ordered per key. The failure hooks: a routing key that no binding of amq.direct matches (the
// mandatory message is returned: permanent ErrUnroutable), and a queue at its x-max-length of
// 0 with x-overflow=reject-publish (the broker nacks: retryable). RabbitMQ has no
// deduplication id, so the dedup case is not offered.
func TestConformance(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			q := newQueue(t, nil)
			sink := newSink(t, &rabbitmq.Options{MaxMessageBytes: maxBytes, Logger: slog.New(slog.DiscardHandler)})
			ch := channel(t)
			var got []conformance.ReceivedMessage
			var full sync.Once
			fullQueue := q + "-full"
			return conformance.SinkFixture{
				Sink:        sink,
				Destination: q,
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					for len(got) < atLeast && ctx.Err() == nil {
						d, ok, err := ch.Get(q, true)
						if err != nil {
							return nil, err
						}
						if !ok {
							select {
							case <-ctx.Done():
							case <-time.After(20 * time.Millisecond):
							}
							continue
						}
						ev, _, err := rabbitmq.DecodeDelivery(&d)
						if err != nil {
							return nil, err
						}
						got = append(got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers, Key: ev.PartitionKey})
					}
					return slices.Clone(got), nil
				},
				RejectPermanent: func(m *core.Message) { m.Destination = "amq.direct/no-binding-" + q },
				RejectRetryable: func(m *core.Message) {
					full.Do(func() {
						newQueueNamed(t, fullQueue, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
					})
					m.Destination = fullQueue
				},
			}
		},
		Ordered:         true,
		MaxMessageBytes: maxBytes,
		ErrTooLarge:     rabbitmq.ErrMessageTooLarge,
	})
}

// newQueueNamed declares queue with args (no dead-letter path) and deletes it when the test
// ends.
func newQueueNamed(t testing.TB, queue string, args amqp.Table) {
	t.Helper()
	ch := channel(t)
	_, err := ch.QueueDeclare(queue, true, false, false, false, args)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = channel(t).QueueDelete(queue, false, false, false) })
}
