package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// DrainStore is what Drain needs from an adapter: the relay's contract and the operator's
// (every adapter's Store implements both).
type DrainStore interface {
	driver.RelayStore
	driver.Admin
}

// DefaultDestination is the sink address Drain routes every event to when router is nil.
const DefaultDestination = "outboxtest"

// DrainTimeout bounds RequireDrained.
const DrainTimeout = time.Minute

var drains atomic.Int64

// Drain runs a real core.Relay on store until the outbox has no deliverable event left (every
// event published, or parked after a permanent error or its retry budget, or waiting behind a
// parked event of its partition key), then stops it
// gracefully (core.Relay.Shutdown) and returns its counts. router nil routes every event to
// DefaultDestination. The relay polls every 5 ms and retries failed events after 5-50 ms
// (never jittered), so a test need not wait for production delays. When ctx ends first, Drain
// stops the relay and returns an error naming how many events are still pending.
func Drain(ctx context.Context, store DrainStore, sink core.Sink, router core.Router) (core.RelayStats, error) {
	if router == nil {
		router = core.StaticRouter{Default: DefaultDestination}
	}
	relay, err := core.NewRelay(store, sink, router, &core.RelayOptions{
		Owner:           fmt.Sprintf("outboxtest-drain-%d", drains.Add(1)),
		PollInterval:    5 * time.Millisecond,
		BreakerMaxDelay: 50 * time.Millisecond,
		Retry:           core.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1},
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return core.RelayStats{}, fmt.Errorf("outboxtest: drain: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	stop := func() error {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		serr := relay.Shutdown(sctx)
		return errors.Join(serr, <-done)
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	waiting := -1
	for {
		n, err := deliverable(ctx, store)
		if err == nil && n == 0 {
			// Stop first: the relay counts a settle once it returned, which may be after the
			// database already shows it.
			serr := stop()
			return relay.Stats(), serr
		}
		if err == nil {
			waiting = n
		}
		select {
		case err := <-done:
			return relay.Stats(), fmt.Errorf("outboxtest: drain: the relay stopped: %w", err)
		case <-ctx.Done():
			health := relay.Health()
			if waiting < 0 { // ctx ended before any count: count once more, outside ctx
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if n, err := deliverable(cctx, store); err == nil {
					waiting = n
				}
				cancel()
			}
			return relay.Stats(), errors.Join(fmt.Errorf("outboxtest: drain: %d event(s) still pending: %w (relay health: %v)",
				waiting, ctx.Err(), health), stop())
		case <-tick.C:
		}
	}
}

// deliverable counts the pending events that a relay will still send: those whose partition
// key has no parked event (an event behind a parked one of its key waits for an operator).
func deliverable(ctx context.Context, store DrainStore) (int, error) {
	st, err := store.Stats(ctx)
	if err != nil || st.Pending == 0 {
		return 0, err
	}
	if st.Parked == 0 {
		return int(st.Pending), nil
	}
	keys, err := store.ParkedKeys(ctx)
	if err != nil {
		return 0, err
	}
	parked := make(map[string]bool, len(keys))
	for _, k := range keys {
		parked[k] = true
	}
	n := 0
	var after int64
	for {
		page, err := store.List(ctx, driver.ListParams{AfterSeq: after, Limit: listPage, State: driver.StatePending})
		if err != nil {
			return 0, err
		}
		for _, r := range page {
			if !parked[r.PartitionKey] {
				n++
			}
		}
		if len(page) < listPage {
			return n, nil
		}
		after = page[len(page)-1].Seq
	}
}

// RequireDrained is Drain bounded by DrainTimeout and tb's context; it fails tb (Fatal) on an
// error.
func RequireDrained(tb testing.TB, store DrainStore, sink core.Sink, router core.Router) core.RelayStats {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), DrainTimeout)
	defer cancel()
	st, err := Drain(ctx, store, sink, router)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}
