package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
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

// A batch whose fourth message is poison (its event ID was recorded with another payload,
// core.ErrDigestMismatch): the batch's transaction rolls back, its messages are tried one at a
// time in queue order, the poison one is rejected to the dead-letter queue at once (its
// handler never runs) and alone, and the five others are applied once each, in version order
// (none Stale) and acknowledged.
func TestConsumerBatchWithAPoisonMessage(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	var mu sync.Mutex
	calls := map[string]int{}
	// BatchWait lets the six messages, published in one Send after the consumer started, make
	// one batch.
	c, store, _ := startConsumer(t, q, func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
		mu.Lock()
		calls[d.Event.ID]++
		mu.Unlock()
		return tx.Incr(d.Event.ID)
	}, &rabbitmq.ConsumerOptions{Prefetch: 10, MaxBatch: 6, BatchWait: time.Second, RetryDelay: 20 * time.Millisecond})
	var msgs []core.Message
	for i := 0; i < 6; i++ {
		msgs = append(msgs, message(q, "a", i))
	}
	poison := msgs[3]
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	_, err = inbox.Process(context.Background(), "tests", core.InboxMessage{EventID: poison.ID, Tenant: poison.Tenant, Payload: []byte("another payload")},
		func(context.Context, *memory.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)

	require.NoError(t, errors.Join(newSink(t, nil).Send(context.Background(), msgs)...))
	require.Eventually(t, func() bool { return c.Stats().Applied == 5 && c.Stats().DeadLettered == 1 },
		20*time.Second, 20*time.Millisecond)
	dl := getAll(t, channel(t), q+".dlq", 1)[0]
	require.Equal(t, poison.ID, dl.MessageId)
	require.Equal(t, poison.Payload, dl.Body)
	mu.Lock()
	for i, m := range msgs {
		switch {
		case i < 3: // in the batch (rolled back), then alone
			require.Equal(t, 2, calls[m.ID], "message %d", i)
		case i == 3:
			require.Zero(t, calls[m.ID], "the poison message's handler never runs")
		default: // behind the poison message: the batch stopped before them
			require.Equal(t, 1, calls[m.ID], "message %d", i)
		}
	}
	mu.Unlock()
	for i, m := range msgs {
		want := 1
		if i == 3 {
			want = 0
		}
		require.Equal(t, want, store.Counter(m.ID), "message %d applied", i)
	}
	st := c.Stats()
	require.Equal(t, uint64(6), st.Received)
	require.Equal(t, uint64(5), st.Applied)
	require.Zero(t, st.Stale, "applied in queue order")
	require.Equal(t, uint64(1), st.DeadLettered)
	require.Equal(t, uint64(1), st.Failed, "the batch")
	require.Eventually(t, func() bool {
		n, err := pending(context.Background(), t, q)
		return err == nil && n == 0
	}, 30*time.Second, 100*time.Millisecond, "all settled")
	n, err := ready(t, q+".dlq")
	require.NoError(t, err)
	require.Zero(t, n, "only the poison message was dead-lettered")
}
