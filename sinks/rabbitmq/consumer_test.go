package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// startConsumer runs a consumer of q with handler h and returns it with its stop function
// (which waits for Run to return nil).
func startConsumer(t *testing.T, q string, h rabbitmq.Handler[*memory.Tx], o *rabbitmq.ConsumerOptions) (*rabbitmq.Consumer[*memory.Tx], *memory.Store, func()) {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	o.Logger = slog.New(slog.DiscardHandler)
	c, err := rabbitmq.NewConsumer(brokerURL(t), q, inbox, "tests", h, o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not return after its context was cancelled")
		}
	}
	t.Cleanup(stop)
	return c, store, stop
}

// A message whose handler keeps failing is tried MaxAttempts times, then rejected to the
// queue's dead-letter exchange (DeclareQueue's .dlq holds it, with its body and headers); the
// next message is applied.
func TestConsumerDeadLettersAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	var calls atomic.Int32
	bad := message(q, "a", 0)
	c, store, _ := startConsumer(t, q, func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
		if d.Event.ID == bad.ID {
			calls.Add(1)
			return errors.New("always fails")
		}
		return tx.Incr(d.Event.ID)
	}, &rabbitmq.ConsumerOptions{MaxAttempts: 3, RetryDelay: 20 * time.Millisecond})
	good := message(q, "a", 1)
	require.Equal(t, []error{nil, nil}, newSink(t, nil).Send(context.Background(), []core.Message{bad, good}))
	require.Eventually(t, func() bool { return store.Counter(good.ID) == 1 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, int32(3), calls.Load(), "MaxAttempts attempts")
	dl := getAll(t, channel(t), q+".dlq", 1)[0]
	require.Equal(t, bad.ID, dl.MessageId)
	require.Equal(t, bad.Payload, dl.Body)
	st := c.Stats()
	require.Equal(t, uint64(1), st.DeadLettered)
	require.Equal(t, uint64(3), st.Failed)
	require.Equal(t, uint64(1), st.Applied)
}

// On shutdown, the message in the handler and the prefetched ones are handed back: nothing of
// them was applied, the queue holds them all again, ready, and a new consumer applies them.
func TestConsumerReleasesOnShutdown(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	in := make(chan struct{}, 1)
	var msgs []core.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, message(q, "a", i))
	}
	require.NoError(t, errors.Join(newSink(t, nil).Send(context.Background(), msgs)...))
	c, store, stop := startConsumer(t, q, func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
		select {
		case in <- struct{}{}:
		default:
		}
		<-ctx.Done() // held until shutdown
		return ctx.Err()
	}, &rabbitmq.ConsumerOptions{Prefetch: 10})
	<-in
	stop()
	require.Equal(t, uint64(5), c.Stats().Released, "the held message and the four prefetched ones")
	require.Zero(t, store.Counter(msgs[0].ID))
	n, err := ready(t, q)
	require.NoError(t, err)
	require.Equal(t, 5, n, "all ready again")
	_, store2, _ := startConsumer(t, q, func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
		return tx.Incr(d.Event.ID)
	}, &rabbitmq.ConsumerOptions{})
	require.Eventually(t, func() bool {
		for _, m := range msgs {
			if store2.Counter(m.ID) != 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
}
