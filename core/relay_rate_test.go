package core_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
)

// RelayOptions.MaxRate bounds what the relay sends: at every send, the records sent so far are
// at most BatchSize + MaxRate × the time since the relay started, summed over its InFlight
// loops, and every event is still delivered. (Only an upper bound is checked: a slow machine
// sends less, never more.) Without the pacing the memory relay sends the 400 events in a few
// milliseconds and the bound fails at once.
func TestRelayMaxRate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const events, maxRate, batch = 400, 400, 50
	store := inflightOutbox(t, 8, 13, events)
	var mu sync.Mutex
	sent, worst := 0, 0.0 // records sent, and the largest sent / bound seen at a send
	var began time.Time
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		sent += len(msgs)
		bound := batch + maxRate*time.Since(began).Seconds()
		worst = max(worst, float64(sent)/bound)
		return make([]error, len(msgs))
	})
	r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		MaxRate: maxRate, BatchSize: batch, InFlight: 4, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	began = time.Now()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	waitFor(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return sent >= events }, "every event sent")
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, worst, 1.0, "records sent / (BatchSize + MaxRate × elapsed), largest at any send")
	require.Equal(t, events, sent, "each event sent once")
	require.Positive(t, r.Stats().PaceTime, "the loops waited for the budget")
}

// A negative MaxRate is refused with an *OptionError naming the field.
func TestRelayMaxRateNegative(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	_, err = core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{MaxRate: -1})
	var oe *core.OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "MaxRate", oe.Field)
}

// Shutdown while a loop waits for MaxRate's budget returns at once (the batch waiting is not
// sent), not after the wait: a budget of 1 record per second behind a batch of 50.
func TestRelayMaxRateShutdownDuringWait(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := inflightOutbox(t, 1, 100, 100)
	var mu sync.Mutex
	sent := 0
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		sent += len(msgs)
		return make([]error, len(msgs))
	})
	r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		MaxRate: 1, BatchSize: 50, InFlight: 1, PollInterval: 5 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Published == 50 }, "the first batch (the budget's burst) published")
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Fetches == 2 }, "the second batch fetched, waiting ~50 s for the budget")
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.Shutdown(sctx), "Shutdown returns before the 50 s wait ends")
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 50, sent, "the waiting batch was not sent")
}
