package nats_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// handlerLog records the handler's calls per event ID and the transaction of each.
type handlerLog struct {
	mu    sync.Mutex
	calls map[string]int
	txs   map[string]*memory.Tx
}

func newHandlerLog() *handlerLog {
	return &handlerLog{calls: map[string]int{}, txs: map[string]*memory.Tx{}}
}

func (l *handlerLog) record(id string, tx *memory.Tx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[id]++
	l.txs[id] = tx
}

func (l *handlerLog) get(id string) (int, *memory.Tx) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls[id], l.txs[id]
}

// gateBatch publishes a gate message, which the consumer pulls alone and whose handler
// (gate) blocks, then msgs, which the server delivers into the same pull meanwhile; once all
// of them are delivered it lets the gate's handler return, so that the consumer takes msgs,
// already arrived, together. The consumer must pull at least 1+len(msgs) messages at a time.
type gateBatch struct {
	gate    core.Message
	release chan struct{}
	entered chan struct{}
}

func newGateBatch(subject string) *gateBatch {
	return &gateBatch{gate: message(subject, "gate", 0), release: make(chan struct{}), entered: make(chan struct{}, 1)}
}

// hold is called first by the handler: it blocks the gate's call until release.
func (g *gateBatch) hold(d *natssink.Delivery) {
	if d.Event.ID == g.gate.ID {
		g.entered <- struct{}{}
		<-g.release
	}
}

func (g *gateBatch) publish(t *testing.T, f *consumerFixture, durable string, msgs ...core.Message) {
	t.Helper()
	f.send(t, g.gate)
	<-g.entered
	f.send(t, msgs...)
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 1+len(msgs)
	}, 10*time.Second, 5*time.Millisecond, "the messages reach the pull of the gate")
	close(g.release)
}

// TestConsumerBatchOneTransaction: the messages of a pull that have arrived go through the
// inbox in one transaction, none is acknowledged before it committed, and while it runs
// longer than AckWait the server is told they are in progress, so none is delivered again
// (not even to a second instance of the durable consumer that pulls meanwhile).
func TestConsumerBatchOneTransaction(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	durable := unique("D")
	g := newGateBatch(f.subject)
	msgs := []core.Message{message(f.subject, "a", 0), message(f.subject, "b", 0), message(f.subject, "c", 0), message(f.subject, "d", 0)}
	last := msgs[len(msgs)-1].ID
	log := newHandlerLog()
	blockLast := make(chan struct{})
	h := func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		g.hold(d)
		log.record(d.Event.ID, tx)
		if d.Event.ID == last {
			<-blockLast
		}
		return tx.Incr(d.Event.ID)
	}
	o := func() *natssink.ConsumerOptions {
		return &natssink.ConsumerOptions{AckWait: 2 * time.Second, FetchWait: 3 * time.Second}
	}
	c1, _ := f.run(t, durable, h, o())
	var unblock sync.Once
	// Registered after f.run: runs first when the test fails, so Run can return.
	t.Cleanup(func() { unblock.Do(func() { close(blockLast) }) })
	g.publish(t, f, durable, msgs...)
	require.Eventually(t, func() bool { n, _ := log.get(last); return n == 1 }, 10*time.Second, 5*time.Millisecond)

	// The batch's transaction is open (its last handler blocks): a second instance pulls.
	c2, _ := f.run(t, durable, h, o())
	time.Sleep(5 * time.Second) // 2.5 × AckWait: a redelivery would have come
	_, tx0 := log.get(msgs[0].ID)
	for _, m := range msgs {
		n, tx := log.get(m.ID)
		require.Equal(t, 1, n, "not delivered again while in progress")
		require.Same(t, tx0, tx, "one inbox transaction")
		require.Zero(t, f.store.Counter(m.ID), "not committed yet")
	}
	p, ap := ackPending(t, f.stream, durable)
	require.Zero(t, p)
	require.Equal(t, len(msgs), ap, "none acknowledged before the commit")
	require.Zero(t, c2.Stats().Received)

	unblock.Do(func() { close(blockLast) })
	require.Eventually(t, func() bool { return c1.Stats().Applied == uint64(1+len(msgs)) }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 0
	}, 10*time.Second, 10*time.Millisecond)
	for _, m := range msgs {
		require.Equal(t, 1, f.store.Counter(m.ID))
	}
	require.Zero(t, c1.Stats().Failed)
	require.Zero(t, c2.Stats().Received)
}

// TestConsumerBatchPoisonAlone: a batch with a poison message in the middle (its event ID
// was applied with another payload: core.ErrDigestMismatch) fails as a whole and is tried one
// message at a time: the poison message is dead-lettered at once, alone, without its handler
// running; the others are applied once and acknowledged.
func TestConsumerBatchPoisonAlone(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	dlq := newStream(t, f.js, jetstream.StreamConfig{Subjects: []string{"dlq." + f.subject}})
	durable := unique("D")
	g := newGateBatch(f.subject)
	msgs := []core.Message{message(f.subject, "a", 0), message(f.subject, "b", 0), message(f.subject, "c", 0), message(f.subject, "d", 0)}
	poison := msgs[1]
	ctx := context.Background()
	_, err := f.inbox.Process(ctx, "billing", core.InboxMessage{EventID: poison.ID, Tenant: poison.Tenant, Payload: []byte("another payload")},
		func(context.Context, *memory.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)

	log := newHandlerLog()
	c, _ := f.run(t, durable, func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		g.hold(d)
		log.record(d.Event.ID, tx)
		return tx.Incr(d.Event.ID)
	}, &natssink.ConsumerOptions{FetchWait: 3 * time.Second, RetryBackoff: 50 * time.Millisecond})
	g.publish(t, f, durable, msgs...)

	require.Eventually(t, func() bool {
		s := c.Stats()
		return s.Applied == uint64(1+len(msgs)-1) && s.DeadLettered == 1 // the gate and all but the poison
	}, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 0
	}, 10*time.Second, 10*time.Millisecond)
	raw, err := readStream(ctx, dlq, 1)
	require.NoError(t, err)
	require.Len(t, raw, 1)
	require.Equal(t, poison.ID, raw[0].Header.Get(natssink.HeaderID))
	require.Contains(t, raw[0].Header.Get(natssink.HeaderDeadLetterError), "different payload")
	require.Equal(t, "1", raw[0].Header.Get(natssink.HeaderDeadLetterAttempts))

	// The message before the poison ran in the failed batch, then alone; the poison's handler
	// never ran; the ones after it ran alone only.
	for i, want := range []int{2, 0, 1, 1} {
		n, _ := log.get(msgs[i].ID)
		require.Equal(t, want, n, "handler calls of message %d", i)
	}
	for _, m := range msgs {
		want := 1
		if m.ID == poison.ID {
			want = 0
		}
		require.Equal(t, want, f.store.Counter(m.ID), m.ID)
	}
	s := c.Stats()
	require.Equal(t, uint64(1), s.Failed, "the failed batch")
	require.Equal(t, uint64(1+len(msgs)), s.Received)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, uint64(1+len(msgs)), c.Stats().Received, "nothing delivered again")
}
