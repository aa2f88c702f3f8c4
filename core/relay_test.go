package core_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
)

// Relays that start one after the other share the lanes quickly: the newcomer claims, and the
// first relay gives lanes up, within a fraction of a second, not at their next RenewInterval.
// With RenewInterval at one minute, a relay that waited for it could not pass within 30 s.
func TestRelaysRebalanceWithoutWaitingForRenewInterval(t *testing.T) {
	t.Parallel()
	store, err := memory.New(&memory.Options{Lanes: 16})
	require.NoError(t, err)
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
	b := newRelay("b")
	run(b)
	waitFor(t, 30*time.Second, func() bool { return a.Stats().Lanes == 8 && b.Stats().Lanes == 8 },
		"the lanes are split 8/8")
}

func waitFor(t *testing.T, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not reached within %v: %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
