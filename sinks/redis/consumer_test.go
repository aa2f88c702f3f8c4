package redis_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// applied records the deliveries a handler applied.
type applied struct {
	mu  sync.Mutex
	got []redissink.Delivery
}

func (a *applied) handler(ctx context.Context, tx *memory.Tx, d *redissink.Delivery) error {
	a.mu.Lock()
	a.got = append(a.got, *d)
	a.mu.Unlock()
	return tx.Incr(d.Event.ID)
}

func (a *applied) list() []redissink.Delivery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]redissink.Delivery(nil), a.got...)
}

func newInbox(t *testing.T) (*memory.Store, *core.Inbox[*memory.Tx]) {
	t.Helper()
	s, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), s, nil)
	require.NoError(t, err)
	return s, inbox
}

// run starts c until the test ends.
func run(t *testing.T, c *redissink.Consumer[*memory.Tx]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func publish(t *testing.T, cl *goredis.Client, msgs ...core.Message) {
	t.Helper()
	sink, err := redissink.New(cl, nil)
	require.NoError(t, err)
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
}

func pendingCount(t *testing.T, cl *goredis.Client, stream, group string) int64 {
	t.Helper()
	p, err := cl.XPending(context.Background(), stream, group).Result()
	require.NoError(t, err)
	return p.Count
}

// TestDeadConsumerEntriesClaimed: consumer A reads three entries and dies without
// acknowledging them. Consumer B leaves them alone while they have been idle less than
// MinIdle, then claims them (XAUTOCLAIM), applies each once and acknowledges it.
func TestDeadConsumerEntriesClaimed(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream, group := newStream(t), "g"
	ctx := context.Background()
	msgs := []core.Message{message(stream, "a", 0), message(stream, "a", 1), message(stream, "b", 0)}
	publish(t, cl, msgs...)
	require.NoError(t, cl.XGroupCreateMkStream(ctx, stream, group, "0").Err())
	read, err := cl.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: group, Consumer: "A", Streams: []string{stream, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.Len(t, read[0].Messages, 3)
	readAt := time.Now() // A dies here, its three entries pending

	store, inbox := newInbox(t)
	var a applied
	const minIdle = 2 * time.Second
	c, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", a.handler, &redissink.ConsumerOptions{
		Name: "B", MinIdle: minIdle, ClaimInterval: 50 * time.Millisecond, Block: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	run(t, c)

	time.Sleep(time.Until(readAt.Add(minIdle / 2)))
	require.Empty(t, a.list(), "claimed before MinIdle")
	require.Equal(t, int64(3), pendingCount(t, cl, stream, group))

	require.Eventually(t, func() bool { return len(a.list()) == 3 && pendingCount(t, cl, stream, group) == 0 }, 20*time.Second, 20*time.Millisecond)
	require.GreaterOrEqual(t, time.Since(readAt), minIdle)
	for i, d := range a.list() {
		require.Equal(t, msgs[i].ID, d.Event.ID, "stream order")
		require.Equal(t, int64(2), d.Deliveries, "read by A, claimed by B")
		require.Equal(t, 1, store.Counter(d.Event.ID))
	}
	st := c.Stats()
	require.Equal(t, uint64(3), st.Claimed)
	require.Equal(t, uint64(3), st.Applied)
	require.Equal(t, uint64(3), st.Acked)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, a.list(), 3, "applied once")
}

// TestMaxDeliveriesDeadLetters: an entry whose handler always fails is tried MaxDeliveries
// times, then appended to the dead-letter stream with its fields and the outbox.dlq fields, and
// acknowledged; the entry behind it (delivered once with it, never attempted meanwhile) is
// applied afterwards, not dead-lettered.
func TestMaxDeliveriesDeadLetters(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream, group := newStream(t), "g"
	bad, good := message(stream, "a", 0), message(stream, "b", 0)
	publish(t, cl, bad, good)
	store, inbox := newInbox(t)
	var a applied
	c, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", func(ctx context.Context, tx *memory.Tx, d *redissink.Delivery) error {
		if d.Event.ID == bad.ID {
			return errors.New("handler refuses")
		}
		return a.handler(ctx, tx, d)
	}, &redissink.ConsumerOptions{Name: "c", MaxDeliveries: 3, RetryBackoff: 20 * time.Millisecond, Block: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	run(t, c)
	require.Eventually(t, func() bool { return len(a.list()) == 1 && pendingCount(t, cl, stream, group) == 0 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, good.ID, a.list()[0].Event.ID)
	require.Equal(t, int64(2), a.list()[0].Deliveries, "read with the bad entry, then once from the pending list")
	require.Equal(t, 1, store.Counter(good.ID))
	require.Equal(t, 0, store.Counter(bad.ID))

	dlq, evs := readStream(t, cl, stream+".dlq")
	require.Len(t, dlq, 1)
	require.Equal(t, bad.ID, evs[0].ID)
	require.Equal(t, bad.Payload, evs[0].Payload)
	v := dlq[0].Values
	require.Equal(t, stream, v[redissink.FieldDeadLetterStream])
	require.Equal(t, "3", v[redissink.FieldDeadLetterDeliveries])
	require.Contains(t, v[redissink.FieldDeadLetterError], "handler refuses")
	orig, _ := readStream(t, cl, stream)
	require.Equal(t, orig[0].ID, v[redissink.FieldDeadLetterID])
	st := c.Stats()
	require.Equal(t, uint64(1), st.DeadLettered)
	require.Equal(t, uint64(3), st.Failed)
}

// TestShutdownLeavesEntryPending: an attempt cut short by shutdown is not acknowledged; the
// consumer started again under the same name takes the entry up at once (its own pending
// list) and applies it once.
func TestShutdownLeavesEntryPending(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream, group := newStream(t), "g"
	m := message(stream, "a", 0)
	publish(t, cl, m)
	store, inbox := newInbox(t)
	started := make(chan struct{})
	block, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", func(ctx context.Context, tx *memory.Tx, d *redissink.Delivery) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, &redissink.ConsumerOptions{Name: "c", Block: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	stop := run(t, block)
	<-started
	stop()
	require.Equal(t, int64(1), pendingCount(t, cl, stream, group))
	require.Equal(t, 0, store.Counter(m.ID))

	var a applied
	again, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", a.handler,
		&redissink.ConsumerOptions{Name: "c", Block: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	run(t, again)
	require.Eventually(t, func() bool { return len(a.list()) == 1 && pendingCount(t, cl, stream, group) == 0 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(2), a.list()[0].Deliveries)
	require.Equal(t, 1, store.Counter(m.ID))
	require.Zero(t, again.Stats().Claimed, "its own pending entry, not a claim")
}

// TestTrimmedPendingEntry: an entry trimmed from the stream while pending comes back from the
// pending list without fields; the consumer counts it, acknowledges it and goes on.
func TestTrimmedPendingEntry(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream, group := newStream(t), "g"
	ctx := context.Background()
	first, second := message(stream, "a", 0), message(stream, "a", 1)
	publish(t, cl, first)
	require.NoError(t, cl.XGroupCreateMkStream(ctx, stream, group, "0").Err())
	read, err := cl.XReadGroup(ctx, &goredis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{stream, ">"}, Count: 10, Block: -1}).Result()
	require.NoError(t, err)
	require.NoError(t, cl.XDel(ctx, stream, read[0].Messages[0].ID).Err())
	publish(t, cl, second)
	store, inbox := newInbox(t)
	var a applied
	c, err := redissink.NewConsumer(cl, stream, group, inbox, "svc", a.handler,
		&redissink.ConsumerOptions{Name: "c", Block: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	run(t, c)
	require.Eventually(t, func() bool { return len(a.list()) == 1 && pendingCount(t, cl, stream, group) == 0 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, second.ID, a.list()[0].Event.ID)
	require.Equal(t, 0, store.Counter(first.ID))
	require.Equal(t, uint64(1), c.Stats().Trimmed)
}

// The options and arguments are checked one by one.
func TestNewConsumerRefusesBadOptions(t *testing.T) {
	t.Parallel()
	cl := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer cl.Close()
	_, inbox := newInbox(t)
	var a applied
	for field, o := range map[string]redissink.ConsumerOptions{
		"Count": {Count: -1}, "MaxBatch": {MaxBatch: -1}, "Block": {Block: time.Microsecond}, "RetryBackoff": {RetryBackoff: -1},
		"MinIdle": {MinIdle: -1}, "ClaimInterval": {ClaimInterval: -1}, "MaxDeliveries": {MaxDeliveries: -1},
	} {
		_, err := redissink.NewConsumer(cl, "s", "g", inbox, "svc", a.handler, &o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, field)
		require.Equal(t, field, oe.Field)
	}
	for field, build := range map[string]func() error{
		"client": func() error {
			_, err := redissink.NewConsumer[*memory.Tx](nil, "s", "g", inbox, "svc", a.handler, nil)
			return err
		},
		"stream": func() error { _, err := redissink.NewConsumer(cl, "", "g", inbox, "svc", a.handler, nil); return err },
		"group":  func() error { _, err := redissink.NewConsumer(cl, "s", "", inbox, "svc", a.handler, nil); return err },
		"handler": func() error {
			_, err := redissink.NewConsumer[*memory.Tx](cl, "s", "g", inbox, "svc", nil, nil)
			return err
		},
	} {
		var oe *core.OptionError
		require.ErrorAs(t, build(), &oe, field)
		require.Equal(t, field, oe.Field)
	}
}
