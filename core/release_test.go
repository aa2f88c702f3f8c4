package core_test

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
	"github.com/outboxkit/outbox/core/driver"
)

// flakyRelease is a memory store whose next ReleaseLanes fails once armed (a connection lost
// mid-call).
type flakyRelease struct {
	*memory.Store
	fail atomic.Bool
}

func (s *flakyRelease) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	if s.fail.CompareAndSwap(true, false) {
		return errors.New("connection reset by peer")
	}
	return s.Store.ReleaseLanes(ctx, leases)
}

// A relay whose release of the lanes it gives up to a newcomer fails keeps them and gives them
// up again at its next round: the newcomer gets its share at once, not when the leases expire
// (3 minutes here; the test would time out first).
func TestRelayRetriesAFailedRelease(t *testing.T) {
	t.Parallel()
	mem, err := memory.New(&memory.Options{Lanes: 16})
	require.NoError(t, err)
	store := &flakyRelease{Store: mem}
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	newRelay := func(owner string) *core.Relay {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
			Owner: owner, LeaseTTL: 3 * time.Minute, RenewInterval: time.Minute, PollInterval: 10 * time.Millisecond,
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	run := func(r *core.Relay) { wg.Go(func() { _ = r.Run(ctx) }) }

	a := newRelay("a")
	run(a)
	waitFor(t, 30*time.Second, func() bool { return a.Stats().Lanes == 16 }, "the first relay holds every lane")
	store.fail.Store(true)
	b := newRelay("b")
	run(b)
	waitFor(t, 30*time.Second, func() bool { return a.Stats().Lanes == 8 && b.Stats().Lanes == 8 },
		"the lanes are split 8/8 although the first release failed")
	require.False(t, store.fail.Load(), "a release failed")
}
