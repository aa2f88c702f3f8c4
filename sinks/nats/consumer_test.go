package nats_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

type consumerFixture struct {
	js      jetstream.JetStream
	subject string
	stream  jetstream.Stream
	sink    *natssink.Sink
	inbox   *core.Inbox[*memory.Tx]
	store   *memory.Store
}

func newConsumerFixture(t *testing.T) *consumerFixture {
	t.Helper()
	nc := connect(t)
	f := &consumerFixture{js: newJS(t, nc), subject: unique("k") + ".events"}
	f.stream = newStream(t, f.js, jetstream.StreamConfig{Subjects: []string{f.subject}})
	var err error
	f.sink, err = natssink.New(nc, nil)
	require.NoError(t, err)
	f.store, err = memory.New(nil)
	require.NoError(t, err)
	f.inbox, err = core.NewInbox[*memory.Tx](t.Context(), f.store, nil)
	require.NoError(t, err)
	return f
}

// run starts a consumer of the fixture's stream; stop cancels it and waits for Run.
func (f *consumerFixture) run(t *testing.T, durable string, h natssink.Handler[*memory.Tx], o *natssink.ConsumerOptions) (*natssink.Consumer[*memory.Tx], func()) {
	t.Helper()
	o.Logger = slog.New(slog.DiscardHandler)
	c, err := natssink.NewConsumer(f.js, f.stream.CachedInfo().Config.Name, durable, f.inbox, "billing", h, o)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped atomic.Bool
	stop := func() {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			require.NoError(t, <-done)
		}
	}
	t.Cleanup(stop)
	return c, stop
}

func (f *consumerFixture) send(t *testing.T, msgs ...core.Message) {
	t.Helper()
	for _, err := range f.sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
}

func ackPending(t *testing.T, s jetstream.Stream, durable string) (pending uint64, ackPending int) {
	t.Helper()
	c, err := s.Consumer(context.Background(), durable)
	require.NoError(t, err)
	info, err := c.Info(context.Background())
	require.NoError(t, err)
	return info.NumPending, info.NumAckPending
}

// TestConsumerDeadLettersAfterMaxDeliver: a message whose every attempt fails is delivered
// MaxDeliver times, then published to the dead-letter subject with the original data and
// headers plus the outbox-dlq-* headers, and terminated (no longer pending).
func TestConsumerDeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	dlq := newStream(t, f.js, jetstream.StreamConfig{Subjects: []string{"dlq." + f.subject}})
	var calls atomic.Int64
	durable := unique("D")
	c, _ := f.run(t, durable, func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		calls.Add(1)
		return errors.New("boom")
	}, &natssink.ConsumerOptions{MaxDeliver: 3, RetryBackoff: 50 * time.Millisecond, FetchWait: 200 * time.Millisecond})
	m := message(f.subject, "a", 0)
	f.send(t, m)
	require.Eventually(t, func() bool { return c.Stats().DeadLettered == 1 }, 20*time.Second, 20*time.Millisecond)
	raw, err := readStream(context.Background(), dlq, 1)
	require.NoError(t, err)
	require.Len(t, raw, 1)
	h := raw[0].Header
	require.Equal(t, m.Payload, raw[0].Data)
	require.Equal(t, m.ID, h.Get(natssink.HeaderID))
	require.Equal(t, f.subject, h.Get(natssink.HeaderDeadLetterSubject))
	require.Equal(t, f.stream.CachedInfo().Config.Name, h.Get(natssink.HeaderDeadLetterStream))
	require.Equal(t, "1", h.Get(natssink.HeaderDeadLetterSequence))
	require.Equal(t, "3", h.Get(natssink.HeaderDeadLetterAttempts))
	require.Contains(t, h.Get(natssink.HeaderDeadLetterError), "boom")
	require.Equal(t, f.stream.CachedInfo().Config.Name+":1", h.Get(natssink.HeaderMsgID))
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 0
	}, 10*time.Second, 20*time.Millisecond, "terminated after the dead-letter publish")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(3), calls.Load(), "MaxDeliver attempts, none after the dead letter")
	require.Zero(t, f.store.Counter(m.ID))
}

// TestConsumerDeadLetterUnreachable: while no stream covers the dead-letter subject (here
// one of ConsumerOptions.DeadLetterSubject), a poison message is not terminated but
// delivered again; once a stream covers it, the message is dead-lettered there.
func TestConsumerDeadLetterUnreachable(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	durable := unique("D")
	dl := unique("parked") + ".events"
	c, _ := f.run(t, durable, func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		return errors.New("unreachable")
	}, &natssink.ConsumerOptions{RetryBackoff: 50 * time.Millisecond, FetchWait: 200 * time.Millisecond,
		DeadLetterSubject: func(subject string) string { return dl }})
	ctx := context.Background()
	_, err := f.js.Publish(ctx, f.subject, []byte("not an outbox message"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Stats().Received >= 3 }, 20*time.Second, 20*time.Millisecond)
	require.Zero(t, c.Stats().DeadLettered)
	_, ap := ackPending(t, f.stream, durable)
	require.Equal(t, 1, ap, "not terminated while the dead-letter publish fails")

	dlq := newStream(t, f.js, jetstream.StreamConfig{Subjects: []string{dl}})
	require.Eventually(t, func() bool { return c.Stats().DeadLettered == 1 }, 20*time.Second, 20*time.Millisecond)
	raw, err := readStream(ctx, dlq, 1)
	require.NoError(t, err)
	require.Equal(t, "not an outbox message", string(raw[0].Data))
	require.Contains(t, raw[0].Header.Get(natssink.HeaderDeadLetterError), "CloudEvents mapping")
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 0
	}, 10*time.Second, 20*time.Millisecond)
}

// TestConsumerShutdownReleases: the message whose attempt is cut short by shutdown, and the
// messages pulled behind it but not processed, are Nak'ed, so the next run of the durable
// consumer gets them at once (long before AckWait) and applies each once.
func TestConsumerShutdownReleases(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	durable := unique("D")
	started := make(chan struct{}, 1)
	c, stop := f.run(t, durable, func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}, &natssink.ConsumerOptions{AckWait: time.Minute, FetchWait: 2 * time.Second})
	msgs := []core.Message{message(f.subject, "a", 0), message(f.subject, "b", 0), message(f.subject, "c", 0)}
	f.send(t, msgs...)
	<-started
	// The other two reach this run's pull while the first is in hand.
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 3
	}, 10*time.Second, 10*time.Millisecond)
	stop()
	require.Equal(t, uint64(3), c.Stats().Released)

	begin := time.Now()
	var got atomic.Int64
	c2, _ := f.run(t, durable, func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		got.Add(1)
		require.Equal(t, 2, d.Attempt)
		return tx.Incr(d.Event.ID)
	}, &natssink.ConsumerOptions{AckWait: time.Minute, FetchWait: 200 * time.Millisecond})
	require.Eventually(t, func() bool { return c2.Stats().Applied == 3 }, 10*time.Second, 20*time.Millisecond)
	require.Less(t, time.Since(begin), 10*time.Second)
	for _, m := range msgs {
		require.Equal(t, 1, f.store.Counter(m.ID))
	}
	require.Equal(t, int64(3), got.Load())
	require.Eventually(t, func() bool {
		p, ap := ackPending(t, f.stream, durable)
		return p == 0 && ap == 0
	}, 10*time.Second, 20*time.Millisecond)
}

// TestNewConsumerOptions: bad arguments and options are *core.OptionError naming the field.
func TestNewConsumerOptions(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	h := func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error { return nil }
	var oe *core.OptionError
	for field, build := range map[string]func() error{
		"js":      func() error { _, err := natssink.NewConsumer(nil, "S", "D", f.inbox, "c", h, nil); return err },
		"stream":  func() error { _, err := natssink.NewConsumer(f.js, "", "D", f.inbox, "c", h, nil); return err },
		"durable": func() error { _, err := natssink.NewConsumer(f.js, "S", "", f.inbox, "c", h, nil); return err },
		"inbox":   func() error { _, err := natssink.NewConsumer[*memory.Tx](f.js, "S", "D", nil, "c", h, nil); return err },
		"handler": func() error {
			_, err := natssink.NewConsumer[*memory.Tx](f.js, "S", "D", f.inbox, "c", nil, nil)
			return err
		},
		"AckWait":        func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{AckWait: -1}) },
		"RetryBackoff":   func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{RetryBackoff: -1}) },
		"FetchWait":      func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{FetchWait: -1}) },
		"MaxDeliver":     func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{MaxDeliver: -1}) },
		"MaxBatch":       func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{MaxBatch: -1}) },
		"FilterSubjects": func() error { return newConsumerErr(f, h, natssink.ConsumerOptions{FilterSubjects: []string{""}}) },
	} {
		err := build()
		require.True(t, errors.As(err, &oe), "%s: %v", field, err)
		require.Equal(t, field, oe.Field)
	}
}

func newConsumerErr(f *consumerFixture, h natssink.Handler[*memory.Tx], o natssink.ConsumerOptions) error {
	_, err := natssink.NewConsumer(f.js, "S", "D", f.inbox, "c", h, &o)
	return err
}

// TestConsumerKeepsSlowMessage: while a message's inbox transaction runs longer than AckWait,
// the consumer tells the server it is in progress, so the message is not delivered again
// meanwhile, not even to a second instance of the durable consumer that is pulling.
func TestConsumerKeepsSlowMessage(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	durable := unique("D")
	var calls atomic.Int64
	slow := func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error {
		calls.Add(1)
		time.Sleep(2500 * time.Millisecond)
		return tx.Incr(d.Event.ID)
	}
	o := func() *natssink.ConsumerOptions {
		return &natssink.ConsumerOptions{AckWait: time.Second, FetchWait: 200 * time.Millisecond}
	}
	c1, _ := f.run(t, durable, slow, o())
	c2, _ := f.run(t, durable, slow, o())
	m := message(f.subject, "a", 0)
	f.send(t, m)
	require.Eventually(t, func() bool { return c1.Stats().Applied+c2.Stats().Applied == 1 }, 20*time.Second, 20*time.Millisecond)
	time.Sleep(1500 * time.Millisecond) // longer than AckWait: a redelivery would have come
	require.Equal(t, int64(1), calls.Load(), "not delivered again while in progress")
	require.Equal(t, uint64(1), c1.Stats().Received+c2.Stats().Received)
	require.Equal(t, 1, f.store.Counter(m.ID))
}

// TestConsumerRunMissingStream: Run fails when the durable consumer cannot be created.
func TestConsumerRunMissingStream(t *testing.T) {
	t.Parallel()
	f := newConsumerFixture(t)
	c, err := natssink.NewConsumer(f.js, unique("NOSUCH"), "D", f.inbox, "billing",
		func(ctx context.Context, tx *memory.Tx, d *natssink.Delivery) error { return nil }, nil)
	require.NoError(t, err)
	err = c.Run(t.Context())
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
}
