package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// applied records the handler's calls; its views keep, per partition key, the aggregate
// versions whose effect committed, in commit order. A call's effect committed when the
// store's counter of its event is set; within a batch a later record can fail after the
// handler ran for an earlier one, and the rollback is followed by a retry that calls the
// handler again: the last call of an event is the one that committed (commits follow calls in
// order).
type applied struct {
	store *memory.Store
	mu    sync.Mutex
	calls []call
}

type call struct {
	key, id string
	version int64
}

func (a *applied) add(key, id string, v int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call{key: key, id: id, version: v})
}

// keys returns, per partition key, the versions that committed, in order.
func (a *applied) keys() map[string][]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	last := map[string]int{}
	for i, c := range a.calls {
		last[c.id] = i
	}
	out := map[string][]int64{}
	for i, c := range a.calls {
		if last[c.id] == i && a.store.Counter("applied:"+c.id) > 0 {
			out[c.key] = append(out[c.key], c.version)
		}
	}
	return out
}

func (a *applied) count() int {
	n := 0
	for _, vs := range a.keys() {
		n += len(vs)
	}
	return n
}

// requireInOrder: every key's versions 1..perKey applied once each, in order.
func (a *applied) requireInOrder(t *testing.T, keys, perKey int) {
	t.Helper()
	got := a.keys()
	require.Len(t, got, keys)
	for k, vs := range got {
		want := make([]int64, perKey)
		for i := range want {
			want[i] = int64(i + 1)
		}
		require.Equal(t, want, vs, "key %s", k)
	}
}

type consumerEnv struct {
	store   *memory.Store
	inbox   *core.Inbox[*memory.Tx]
	applied *applied
}

func newConsumerEnv(t *testing.T) *consumerEnv {
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	return &consumerEnv{store: store, inbox: inbox, applied: &applied{store: store}}
}

// start runs a consumer of topic in group until stop is called or the test ends. fail, when
// not nil, decides whether a delivery's handler fails.
func (e *consumerEnv) start(t *testing.T, group, topic string, opts *kafka.ConsumerOptions, fail func(d *kafka.Delivery) error) (c *kafka.Consumer[*memory.Tx], stop func()) {
	t.Helper()
	if opts == nil {
		opts = &kafka.ConsumerOptions{}
	}
	opts.ClientOptions = append(opts.ClientOptions, kgo.SeedBrokers(brokers(t)...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	c, err := kafka.NewConsumer(group, []string{topic}, e.inbox, "kafka-test", func(ctx context.Context, tx *memory.Tx, d *kafka.Delivery) error {
		if fail != nil {
			if err := fail(d); err != nil {
				return err
			}
		}
		if err := tx.Incr("applied:" + d.Event.ID); err != nil {
			return err
		}
		e.applied.add(d.Event.PartitionKey, d.Event.ID, d.Event.AggregateVersion)
		return nil
	}, opts)
	require.NoError(t, err)
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
	return c, stop
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func produce(t *testing.T, topic string, keys, from, to int) {
	t.Helper()
	sink, err := kafka.New(newClient(t), nil)
	require.NoError(t, err)
	var msgs []core.Message
	for i := from; i < to; i++ {
		for k := 0; k < keys; k++ {
			msgs = append(msgs, message(topic, fmt.Sprint("k", k), i))
		}
	}
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
}

func TestConsumerAppliesOnceInOrderAndCommitsAfterTheInbox(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 3)
	produce(t, topic, 5, 0, 20)
	produce(t, topic, 5, 10, 12) // a relay's resend: duplicates
	e := newConsumerEnv(t)
	group := topic + "-g"
	c, stop := e.start(t, group, topic, &kafka.ConsumerOptions{MaxPollRecords: 7}, nil)
	eventually(t, "110 records processed", func() bool { st := c.Stats(); return st.Applied+st.Duplicate == 110 })
	stop()
	st := c.Stats()
	require.Equal(t, uint64(100), st.Applied)
	require.Equal(t, uint64(10), st.Duplicate)
	require.Zero(t, st.Failed)
	e.applied.requireInOrder(t, 5, 20)

	adm := kadm.NewClient(newClient(t))
	ctx := context.Background()
	committed, err := adm.FetchOffsets(ctx, group)
	require.NoError(t, err)
	ends, err := adm.ListEndOffsets(ctx, topic)
	require.NoError(t, err)
	ends.Each(func(o kadm.ListedOffset) {
		co, ok := committed.Lookup(topic, o.Partition)
		require.True(t, ok, "partition %d committed", o.Partition)
		require.Equal(t, o.Offset, co.At, "partition %d committed to its end", o.Partition)
	})
}

// TestConsumerDeadLettersAfterMaxAttempts: a record that keeps failing goes to the dead-letter
// topic after MaxAttempts and its partition moves on; a record that is not an outbox record
// (produced raw by kcat) goes there at once.
func TestConsumerDeadLettersAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	createTopic(t, topic+".dlt", 1)
	produce(t, topic, 1, 0, 3)
	kcat(t, "not an outbox record\n", "-P", "-t", topic, "-k", "raw", "-H", "origin=kcat")
	produce(t, topic, 1, 3, 5)
	poison := message(topic, "k0", 1).ID
	e := newConsumerEnv(t)
	var mu sync.Mutex
	var attempts []int
	boom := errors.New("boom")
	c, stop := e.start(t, topic+"-g", topic, &kafka.ConsumerOptions{MaxAttempts: 3, RetryBackoff: 10 * time.Millisecond},
		func(d *kafka.Delivery) error {
			if d.Event.ID != poison {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, d.Attempt)
			return boom
		})
	eventually(t, "4 applied, 2 dead-lettered", func() bool { st := c.Stats(); return st.Applied == 4 && st.DeadLettered == 2 })
	stop()
	require.Equal(t, []int{1, 2, 3}, attempts)
	require.Zero(t, e.store.Counter("applied:"+poison), "the failed attempts rolled back")
	require.Equal(t, []int64{1, 3, 4, 5}, e.applied.keys()["order/k0"], "the partition moved on in order")

	dlt := consume(t, topic+".dlt", 2)
	require.Equal(t, poison, header(dlt[0], kafka.HeaderID))
	require.Equal(t, "3", header(dlt[0], kafka.HeaderDeadLetterAttempts))
	require.Equal(t, topic, header(dlt[0], kafka.HeaderDeadLetterTopic))
	require.Equal(t, "1", header(dlt[0], kafka.HeaderDeadLetterOffset))
	require.Contains(t, header(dlt[0], kafka.HeaderDeadLetterError), "boom")
	require.Equal(t, "raw", string(dlt[1].Key))
	require.Equal(t, "not an outbox record", string(dlt[1].Value))
	require.Equal(t, "1", header(dlt[1], kafka.HeaderDeadLetterAttempts))
	require.Equal(t, "kcat", header(dlt[1], "origin"))
	require.Contains(t, header(dlt[1], kafka.HeaderDeadLetterError), "CloudEvents")
}

func TestConsumerPauseResume(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 2)
	e := newConsumerEnv(t)
	c, err := kafka.NewConsumer(topic+"-g", []string{topic}, e.inbox, "kafka-test",
		func(ctx context.Context, tx *memory.Tx, d *kafka.Delivery) error { return tx.Incr("n") },
		&kafka.ConsumerOptions{ClientOptions: []kgo.Opt{kgo.SeedBrokers(brokers(t)...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100 * time.Millisecond)}})
	require.NoError(t, err)
	c.Pause()
	produce(t, topic, 2, 0, 5)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	time.Sleep(1500 * time.Millisecond) // a paused consumer fetches nothing
	require.Zero(t, c.Stats().Received)
	c.Resume()
	eventually(t, "10 applied after Resume", func() bool { return c.Stats().Applied == 10 })
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 10, e.store.Counter("n"))
}

// TestConsumerGroupRebalanceAppliesEachOnceInOrder: a second member joins mid-stream and the
// first leaves; both share one inbox. Every event is applied exactly once, in order per key.
func TestConsumerGroupRebalanceAppliesEachOnceInOrder(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 6)
	e := newConsumerEnv(t)
	group := topic + "-g"
	slow := func(*kafka.Delivery) error { time.Sleep(time.Millisecond); return nil }
	c1, stop1 := e.start(t, group, topic, &kafka.ConsumerOptions{MaxPollRecords: 20}, slow)
	produce(t, topic, 12, 0, 30)
	eventually(t, "first member started", func() bool { return c1.Stats().Applied > 50 })
	c2, _ := e.start(t, group, topic, &kafka.ConsumerOptions{MaxPollRecords: 20}, slow)
	v := 30
	eventually(t, "second member got records", func() bool {
		if c2.Stats().Received > 0 {
			return true
		}
		// Keep records coming until the second member's partitions get some: its join can
		// take seconds on a loaded machine, and the first member drains what is there in less.
		produce(t, topic, 12, v, v+1)
		v++
		time.Sleep(100 * time.Millisecond)
		return false
	})
	stop1()
	versions := v + 20
	produce(t, topic, 12, v, versions)
	eventually(t, "every record processed", func() bool {
		s1, s2 := c1.Stats(), c2.Stats()
		return s1.Applied+s2.Applied+s1.Stale+s2.Stale >= uint64(12*versions)
	})
	// Exactly once: every effect counter is 1. In order per key: the inbox's version gate
	// records an event that comes after a newer version of its key as Stale, without its
	// effect, so a reordering would leave a counter at 0 and Stale above 0.
	require.Zero(t, c1.Stats().Stale+c2.Stats().Stale)
	// Revokes commit what the worker did before they complete: the new owner starts right
	// after it, so nothing reaches the inbox twice.
	require.Zero(t, c1.Stats().Duplicate+c2.Stats().Duplicate)
	for k := 0; k < 12; k++ {
		for i := 0; i < versions; i++ {
			require.Equal(t, 1, e.store.Counter("applied:"+message(topic, "k"+strconv.Itoa(k), i).ID))
		}
	}
	t.Logf("member 1 %+v, member 2 %+v", c1.Stats(), c2.Stats())
}

// TestConsumerHoldsPartitionWhileDeadLetterTopicIsMissing: a poison record cannot be
// dead-lettered while its dead-letter topic does not exist, so its partition does not move;
// once the topic exists the record goes there and the later records follow in order.
func TestConsumerHoldsPartitionWhileDeadLetterTopicIsMissing(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	produce(t, topic, 1, 0, 6)
	poison := message(topic, "k0", 2).ID
	e := newConsumerEnv(t)
	c, stop := e.start(t, topic+"-g", topic, &kafka.ConsumerOptions{MaxAttempts: 2, RetryBackoff: 5 * time.Millisecond},
		func(d *kafka.Delivery) error {
			if d.Event.ID == poison {
				return errors.New("boom")
			}
			return nil
		})
	eventually(t, "the partition stopped at the poison record, twice", func() bool { return c.Stats().Failed >= 4 })
	require.Equal(t, 2, e.applied.count(), "nothing past the poison record")
	createTopic(t, topic+".dlt", 1)
	eventually(t, "the rest applied", func() bool { return e.applied.count() == 5 })
	stop()
	require.Equal(t, uint64(1), c.Stats().DeadLettered)
	require.Equal(t, []int64{1, 2, 4, 5, 6}, e.applied.keys()["order/k0"])
}

// TestConsumerPausesPartitionThatFallsBehind: with a slow handler and a small buffer, the
// partition is paused and resumed, and everything is applied in order.
func TestConsumerPausesPartitionThatFallsBehind(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	produce(t, topic, 2, 0, 30)
	e := newConsumerEnv(t)
	c, stop := e.start(t, topic+"-g", topic, &kafka.ConsumerOptions{MaxPollRecords: 10, MaxBufferedRecords: 10},
		func(*kafka.Delivery) error { time.Sleep(2 * time.Millisecond); return nil })
	eventually(t, "60 applied", func() bool { return e.applied.count() == 60 })
	stop()
	require.Positive(t, c.Stats().Paused)
	e.applied.requireInOrder(t, 2, 30)
}

// TestConsumerHandlerPanicIsAFailedAttempt: a panicking handler rolls its inbox transaction
// back and the record is tried again.
func TestConsumerHandlerPanicIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	produce(t, topic, 1, 0, 3)
	target := message(topic, "k0", 1).ID
	e := newConsumerEnv(t)
	var mu sync.Mutex
	var attempts []int
	c, stop := e.start(t, topic+"-g", topic, &kafka.ConsumerOptions{RetryBackoff: 5 * time.Millisecond},
		func(d *kafka.Delivery) error {
			if d.Event.ID != target {
				return nil
			}
			mu.Lock()
			attempts = append(attempts, d.Attempt)
			mu.Unlock()
			if d.Attempt == 1 {
				panic("handler bug")
			}
			return nil
		})
	eventually(t, "3 applied", func() bool { return c.Stats().Applied == 3 })
	stop()
	require.Equal(t, []int{1, 2}, attempts)
	require.Equal(t, uint64(1), c.Stats().Failed)
	require.Equal(t, 1, e.store.Counter("applied:"+target))
	e.applied.requireInOrder(t, 1, 3)
}
