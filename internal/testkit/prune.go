package testkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// PruneUnderLoad checks that Inbox.Prune is not starved by deliveries: 16 goroutines process
// new messages of one consumer without pause while the consumer prunes its inbox several
// times; every prune must complete within 2 s (it took 5–13.5 s on PostgreSQL when each
// delivery held a shared lock on the horizon row that the prune had to update). The pool
// behind store needs at least 17 connections. It also checks that the prunes deleted
// records and that every delivery was Applied (none older than the horizon).
func PruneUnderLoad[TTx any](t *testing.T, store core.InboxStore[TTx]) {
	t.Helper()
	const (
		consumers = 16
		prunes    = 5
		maxPrune  = 2 * time.Second
	)
	in, err := core.NewInbox(store, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		wg      sync.WaitGroup
		applied atomic.Int64
		failed  atomic.Value
	)
	noop := func(context.Context, TTx, core.InboxMessage) error { return nil }
	for w := range consumers {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				res, err := in.Process(ctx, "busy", core.InboxMessage{
					EventID: fmt.Sprintf("w%d-%d", w, i), Payload: []byte("p"), OccurredAt: time.Now(),
				}, noop)
				switch {
				case err != nil && ctx.Err() == nil:
					failed.CompareAndSwap(nil, err)
					return
				case err == nil && res.Outcome != core.Applied:
					failed.CompareAndSwap(nil, fmt.Errorf("message w%d-%d: outcome %v", w, i, res.Outcome))
					return
				case err == nil:
					applied.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the consumers get going
	var durations []time.Duration
	deleted := 0
	for range prunes {
		began := time.Now()
		// Messages occur at time.Now() and take far less than a second to process: a horizon a
		// second back rejects none of them.
		n, err := in.Prune(ctx, "busy", began.Add(-time.Second), 0)
		durations = append(durations, time.Since(began))
		require.NoError(t, err)
		deleted += n
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("a consumer failed: %v", err)
	}
	t.Logf("%d consumers: %d messages applied, %d records pruned; prunes took %v", consumers, applied.Load(), deleted, durations)
	for i, d := range durations {
		if d > maxPrune {
			t.Errorf("prune %d took %v under load, want at most %v (all: %v)", i+1, d, maxPrune, durations)
		}
	}
	require.Positive(t, deleted, "the prunes deleted no record")
}
