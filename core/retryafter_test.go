package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// A failure wrapped in core.RetryAfter keeps its identity and carries its delay.
func TestRetryAfterWraps(t *testing.T) {
	base := errors.New("throttled")
	err := core.RetryAfter(base, 3*time.Second)
	require.ErrorIs(t, err, base)
	require.Equal(t, base.Error(), err.Error())
	require.Equal(t, 3*time.Second, driver.RetryAfterOf(err))
	require.Equal(t, 3*time.Second, driver.RetryAfterOf(core.Permanent(err)), "found through other wrappers")
	require.False(t, core.IsPermanent(err))
	require.Zero(t, driver.RetryAfterOf(base))
	require.Same(t, base, core.RetryAfter(base, 0), "no delay: err itself")
	require.NoError(t, core.RetryAfter(nil, time.Second))
}

// The relay waits at least the delay a failure asked for with core.RetryAfter before the
// event's next attempt, where its own backoff (10 ms here) would be shorter, and never longer
// than RetryPolicy.Max.
func TestRelayHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		hint, max time.Duration
		atLeast   time.Duration
	}{
		{"hint", 400 * time.Millisecond, time.Minute, 400 * time.Millisecond},
		{"capped by Max", time.Hour, 200 * time.Millisecond, 200 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, err := memory.New(&memory.Options{Lanes: 1})
			require.NoError(t, err)
			ob, err := core.NewOutbox(t.Context(), driver.OutboxStore[*memory.Tx](store), nil)
			require.NoError(t, err)
			var mu sync.Mutex
			var attempts []time.Time
			sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
				mu.Lock()
				defer mu.Unlock()
				attempts = append(attempts, time.Now())
				if len(attempts) == 1 {
					return core.Outcomes(len(msgs), core.RetryAfter(errors.New("429"), c.hint))
				}
				return make([]error, len(msgs))
			})
			r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
				PollInterval: 5 * time.Millisecond, BreakerThreshold: 100,
				Retry: core.RetryPolicy{Initial: 10 * time.Millisecond, Max: c.max, Jitter: -1},
			})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			defer func() { cancel(); require.NoError(t, <-done) }()
			require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
				_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
				return err
			}))
			waitFor(t, 30*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(attempts) >= 2
			}, "the second attempt")
			mu.Lock()
			defer mu.Unlock()
			require.GreaterOrEqual(t, attempts[1].Sub(attempts[0]), c.atLeast, "the retry waited for the hint")
		})
	}
}
