package redis_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// txLog records, per event ID, the transactions a handler ran in.
type txLog struct {
	mu  sync.Mutex
	txs map[string][]*memory.Tx
}

func (l *txLog) handler(ctx context.Context, tx *memory.Tx, d *redissink.Delivery) error {
	l.mu.Lock()
	if l.txs == nil {
		l.txs = map[string][]*memory.Tx{}
	}
	l.txs[d.Event.ID] = append(l.txs[d.Event.ID], tx)
	l.mu.Unlock()
	return tx.Incr(d.Event.ID)
}

func (l *txLog) get(id string) []*memory.Tx {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*memory.Tx(nil), l.txs[id]...)
}

// TestBatchOneTransaction: the entries of one read are applied in one inbox transaction
// (default MaxBatch) and all acknowledged; with MaxBatch 1 each has a transaction of its own.
func TestBatchOneTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxBatch int
		txs      int
	}{{0, 1}, {2, 3}, {1, 5}} {
		cl := newClient(t)
		stream, group := newStream(t), "g"
		var msgs []core.Message
		for i := range 5 {
			msgs = append(msgs, message(stream, "k", i))
		}
		publish(t, cl, msgs...)
		store, inbox := newInbox(t)
		var l txLog
		c, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", l.handler, &redissink.ConsumerOptions{
			Name: "c", MaxBatch: tc.maxBatch, Block: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		stop := run(t, c)
		require.Eventually(t, func() bool { return c.Stats().Acked == 5 }, 10*time.Second, 10*time.Millisecond)
		stop()
		require.Zero(t, pendingCount(t, cl, stream, group))
		txs := map[*memory.Tx]bool{}
		for _, m := range msgs {
			got := l.get(m.ID)
			require.Len(t, got, 1, "MaxBatch %d: applied once", tc.maxBatch)
			txs[got[0]] = true
			require.Equal(t, 1, store.Counter(m.ID))
		}
		require.Len(t, txs, tc.txs, "MaxBatch %d: inbox transactions", tc.maxBatch)
		st := c.Stats()
		require.Equal(t, uint64(5), st.Applied)
		require.Zero(t, st.Failed)
	}
}

// TestBatchWithPoisonEntry: one read of three entries whose middle one the inbox refuses for
// good (its event ID was recorded with another payload: core.ErrDigestMismatch). The batch
// fails as a whole at it; tried one at a time, the two others are applied once (the first
// entry's batch attempt rolled back) and only the poison entry goes to the dead-letter stream, on its first
// delivery. Everything is acknowledged.
func TestBatchWithPoisonEntry(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream, group := newStream(t), "g"
	first, poison, last := message(stream, "a", 0), message(stream, "b", 0), message(stream, "c", 0)
	store, inbox := newInbox(t)
	_, err := inbox.Process(context.Background(), "svc", core.InboxMessage{EventID: poison.ID, Tenant: poison.Tenant, Payload: []byte("another payload")},
		func(context.Context, *memory.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	publish(t, cl, first, poison, last)
	var l txLog
	c, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", l.handler, &redissink.ConsumerOptions{
		Name: "c", Block: 50 * time.Millisecond, RetryBackoff: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	stop := run(t, c)
	require.Eventually(t, func() bool { return c.Stats().Acked == 3 }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond) // nothing more happens
	stop()
	require.Zero(t, pendingCount(t, cl, stream, group))

	for _, m := range []core.Message{first, last} {
		require.Equal(t, 1, store.Counter(m.ID), "applied once")
	}
	txs := l.get(first.ID)
	require.Len(t, txs, 2, "in the failed batch (rolled back), then alone")
	require.NotSame(t, txs[0], txs[1])
	require.Len(t, l.get(last.ID), 1, "the batch stopped before it; then alone")
	require.Equal(t, 0, store.Counter(poison.ID))
	require.Len(t, l.get(poison.ID), 0, "the inbox refused it before its handler")

	dlq, evs := readStream(t, cl, stream+".dlq")
	require.Len(t, dlq, 1, "only the poison entry")
	require.Equal(t, poison.ID, evs[0].ID)
	require.Equal(t, "1", dlq[0].Values[redissink.FieldDeadLetterDeliveries])
	require.Contains(t, dlq[0].Values[redissink.FieldDeadLetterError], "different payload")
	st := c.Stats()
	require.Equal(t, uint64(2), st.Applied)
	require.Equal(t, uint64(1), st.DeadLettered)
	require.Equal(t, uint64(1), st.Failed, "the batch, the poison entry's one attempt")
	require.Equal(t, uint64(3), st.Received)
}
