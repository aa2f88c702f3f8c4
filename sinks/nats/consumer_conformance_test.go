package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// TestConsumerConformance runs the consumer suite against the JetStream consumer on the test
// server: a stream of one subject with a duplicate window of 100ms that every publish of the
// suite waits out (so the suite's resends of an event ID reach the consumer and the inbox
// deduplicates them, as happens to resends past the window), a dead-letter stream covering "dlq." + that subject, the
// sink of this package to publish, and the in-memory inbox. A message is pending while the
// durable consumer has it undelivered (NumPending) or unacknowledged (NumAckPending: a Nak'ed
// message stays there until it is acknowledged or terminated); before the consumer exists,
// every message of the stream is pending. The consumer has the default MaxBatch (the messages
// of a pull that have arrived go through the inbox in one transaction).
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	conformance.RunConsumer(t, consumerHarness(0))
}

// TestConsumerConformanceMaxBatch1 runs the suite with MaxBatch 1: one message per pull and
// per inbox transaction.
func TestConsumerConformanceMaxBatch1(t *testing.T) {
	t.Parallel()
	conformance.RunConsumer(t, consumerHarness(1))
}

// consumerHarness is the harness of TestConsumerConformance, the consumer with maxBatch.
func consumerHarness(maxBatch int) conformance.ConsumerHarness[*memory.Tx] {
	return testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		nc := connect(t)
		js := newJS(t, nc)
		subject := unique("c") + ".events"
		// A duplicate window of 100ms, which every Send of the suite waits out first (see
		// the sink below).
		stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: 100 * time.Millisecond})
		dlq := newStream(t, js, jetstream.StreamConfig{Subjects: []string{"dlq." + subject}})
		durable := unique("D")
		sink, err := natssink.New(nc, nil)
		require.NoError(t, err)
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: subject,
			// The suite's resends of an event ID (redelivery-noop, poison-digest-conflict)
			// must reach the consumer, as resends past the stream's duplicate window do:
			// within it the stream drops them (TestDuplicateWithinWindowStoredOnce).
			Sink: core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
				time.Sleep(250 * time.Millisecond)
				return sink.Send(ctx, msgs)
			}),
			PublishUndecodable: func(ctx context.Context) error {
				_, err := js.Publish(ctx, subject, []byte("not an outbox message"))
				return err
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				c, err := natssink.NewConsumer(js, stream.CachedInfo().Config.Name, durable, inbox, consumer,
					func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error { return h(ctx, tx, &d.Event) },
					&natssink.ConsumerOptions{RetryBackoff: 100 * time.Millisecond, MaxDeliver: 3, FetchWait: 200 * time.Millisecond, MaxBatch: maxBatch,
						Logger: slog.New(slog.DiscardHandler)})
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
				cons, err := stream.Consumer(ctx, durable)
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					return streamMsgs(ctx, stream)
				}
				if err != nil {
					return 0, err
				}
				info, err := cons.Info(ctx)
				if err != nil {
					return 0, err
				}
				return int(info.NumPending) + info.NumAckPending, nil
			},
			DeadLetters: func(ctx context.Context) (int, error) { return streamMsgs(ctx, dlq) },
		}
	})
}
