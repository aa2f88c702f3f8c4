package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// gatedSink acknowledges every message, counting sends per event id. Its gateAt-th Send call
// signals entered and waits (ignoring ctx, as a broker call already on the wire does) until
// release is called.
type gatedSink struct {
	mu      sync.Mutex
	sent    map[string]int
	calls   int
	gateAt  int
	gate    chan struct{}
	entered chan struct{}
}

func newGatedSink(gateAt int) *gatedSink {
	return &gatedSink{sent: map[string]int{}, gateAt: gateAt, gate: make(chan struct{}), entered: make(chan struct{}, 1)}
}

func (s *gatedSink) release() { close(s.gate) }

func (s *gatedSink) Send(_ context.Context, msgs []core.Message) []error {
	s.mu.Lock()
	s.calls++
	gated := s.calls == s.gateAt
	s.mu.Unlock()
	if gated {
		s.entered <- struct{}{}
		<-s.gate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range msgs {
		s.sent[m.Record.ID]++
	}
	return make([]error, len(msgs))
}

func (s *gatedSink) duplicates() (sent, dups int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.sent {
		sent++
		dups += n - 1
	}
	return sent, dups
}

type stopBundle struct {
	store *memory.Store
	sink  *gatedSink
}

func setupStop(t *testing.T, events, gateAt int) *stopBundle {
	t.Helper()
	ctx := context.Background()
	store, err := memory.New(&memory.Options{Lanes: 4})
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	require.NoError(t, err)
	for i := range events {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "acct", AggregateID: fmt.Sprint(i % 7), Type: "credited"})
			return err
		}))
	}
	return &stopBundle{store: store, sink: newGatedSink(gateAt)}
}

func (b *stopBundle) relay(t *testing.T, owner string) *core.Relay {
	t.Helper()
	r, err := core.NewRelay(b.store, b.sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		// One batch in flight, so that the gated send is the only one: these tests are about
		// what happens to that batch (pipelined relays: relay_inflight_test.go).
		Owner: owner, PollInterval: 5 * time.Millisecond, BatchSize: 10, InFlight: 1, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return r
}

// drainRest runs a second relay until the outbox is empty.
func (b *stopBundle) drainRest(t *testing.T) {
	t.Helper()
	r := b.relay(t, "second")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st.Pending == 0
	}, "the second relay drains the outbox")
	cancel()
	require.NoError(t, <-done)
}

// A relay stopped with Shutdown while a send is in flight settles that batch: the next relay
// resends nothing, and Stats().Published counts the settled batch.
func TestRelayShutdownResendsNothing(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 100, 3)
	r := b.relay(t, "first")
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-b.sink.entered // the third send is in flight
	require.NoError(t, shutdownDuringSend(r, b.sink.release))
	require.NoError(t, <-done)

	sent, dups := b.sink.duplicates()
	require.Zero(t, dups)
	require.EqualValues(t, sent, r.Stats().Published, "every acknowledged event was settled")
	require.Zero(t, r.Stats().Lanes, "lanes released")
	require.ErrorIs(t, r.Health(), core.ErrNotRunning)

	b.drainRest(t)
	sent, dups = b.sink.duplicates()
	require.Equal(t, 100, sent)
	require.Zero(t, dups, "a graceful stop resends nothing")
}

// Cancelling Run stays a hard stop: the batch in flight is not settled, and the next relay
// resends it. (This is the behaviour Shutdown avoids; if it ever changed, Run's documentation
// must change with it.)
func TestRelayCancelIsHardStop(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 100, 3)
	r := b.relay(t, "first")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-b.sink.entered
	cancel()
	b.sink.release()
	require.NoError(t, <-done)

	b.drainRest(t)
	sent, dups := b.sink.duplicates()
	require.Equal(t, 100, sent)
	require.Positive(t, dups, "the abandoned batch is sent again")
}

// Shutdown whose ctx ends first turns into a hard stop and says so.
func TestRelayShutdownTimeoutIsHardStop(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 50, 1)
	r := b.relay(t, "first")
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-b.sink.entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Shutdown(ctx) }()
	// Shutdown waits for Run, which waits for the stuck send: let the send end after the deadline
	// (waiting for the deadline itself, not a fixed sleep, so that a slow start of the Shutdown
	// goroutine under load cannot let the send end first).
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond)
	b.sink.release()
	err := <-errc
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-done)
	require.Zero(t, r.Stats().Published, "the batch was abandoned, not settled")
}

func TestRelayHealth(t *testing.T) {
	t.Parallel()
	store, err := memory.New(&memory.Options{Lanes: 2})
	require.NoError(t, err)
	ob, err := core.NewOutbox(context.Background(), driver.OutboxStore[*memory.Tx](store), nil)
	require.NoError(t, err)
	var failing sync.Map
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		if _, ok := failing.Load("on"); ok {
			return core.Outcomes(len(msgs), errors.New("broker down"))
		}
		return make([]error, len(msgs))
	})
	r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		PollInterval: 5 * time.Millisecond, BreakerThreshold: 2, BreakerMaxDelay: 20 * time.Millisecond,
		Retry:  core.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, Jitter: -1},
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.ErrorIs(t, r.Health(), core.ErrNotRunning)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Health() == nil }, "healthy once running")
	require.ErrorIs(t, r.Run(ctx), core.ErrRelayRunning)

	failing.Store("on", true)
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))
	waitFor(t, 30*time.Second, func() bool { return errors.Is(r.Health(), core.ErrBreakerOpen) }, "breaker open")
	failing.Delete("on")
	waitFor(t, 30*time.Second, func() bool { return r.Health() == nil }, "healthy after the sink recovered")
	cancel()
	require.NoError(t, <-done)
	require.ErrorIs(t, r.Health(), core.ErrNotRunning)
}

// A relay that gives lanes up to a newcomer while a batch of them is in flight releases them
// only once that batch is settled: the newcomer never resends it.
func TestRelayRebalanceResendsNothing(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 200, 2)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	first := b.relay(t, "first")
	wg.Go(func() { _ = first.Run(ctx) })
	<-b.sink.entered // first's second batch is in flight, holding every lane
	second := b.relay(t, "second")
	wg.Go(func() { _ = second.Run(ctx) })
	// Several rebalancing rounds (every 250 ms) pass while the batch is in flight.
	time.Sleep(time.Second)
	b.sink.release()
	waitFor(t, 30*time.Second, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st.Pending == 0
	}, "the relays drain the outbox")
	waitFor(t, 30*time.Second, func() bool { return second.Stats().Lanes > 0 }, "the newcomer got lanes")
	sent, dups := b.sink.duplicates()
	require.Equal(t, 200, sent)
	require.Zero(t, dups, "a rebalance resends nothing")
	require.Zero(t, first.Stats().ClaimLost+second.Stats().ClaimLost)
}

// shutdownDuringSend calls r.Shutdown (30 s deadline) while a send is held in flight, lets the
// send finish with release once Shutdown waits for it, and returns Shutdown's result.
func shutdownDuringSend(r interface{ Shutdown(context.Context) error }, release func()) error {
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut <- r.Shutdown(ctx)
	}()
	time.Sleep(20 * time.Millisecond) // Shutdown is waiting for the send
	release()
	return <-shut
}
