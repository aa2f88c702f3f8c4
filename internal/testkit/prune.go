package testkit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// PruneBesideDelivery checks that Inbox.Prune never waits for a delivery in progress: the
// horizon check takes no lock that a delivery's transaction keeps until it commits (when each
// delivery held a shared lock on the horizon row, the prune that updates it waited for every
// delivery in flight: 5–13.5 s on PostgreSQL under 16 busy consumers). It processes old
// messages, then holds one delivery's handler (its transaction open, its record inserted and its
// horizon read) while the consumer prunes the old records: the prune must return while the
// handler still waits. A prune that waits is reported after a minute, as a failure, not timed.
// The consumer has a horizon before the held delivery starts (a first prune), so that the
// delivery reads a horizon row. It then checks the held delivery was applied, the old records deleted, and the new horizon
// enforced. The pool behind store needs at least 2 connections.
func PruneBesideDelivery[TTx any](t *testing.T, store driver.InboxStore[TTx]) {
	t.Helper()
	const (
		consumer = "busy"
		old      = 20
	)
	in, err := core.NewInbox(t.Context(), store, nil)
	require.NoError(t, err)
	ctx := t.Context()
	now := time.Now()
	noop := func(context.Context, TTx, core.InboxMessage) error { return nil }
	msg := func(id string, at time.Time) core.InboxMessage {
		return core.InboxMessage{EventID: id, Payload: []byte("p"), OccurredAt: at}
	}
	for i := range old {
		res, err := in.Process(ctx, consumer, msg(fmt.Sprintf("old-%d", i), now.Add(-2*time.Hour)), noop)
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome)
	}

	// A first prune gives the consumer its horizon row, which every delivery then reads.
	n, err := in.Prune(ctx, consumer, now.Add(-3*time.Hour), 0)
	require.NoError(t, err)
	require.Zero(t, n, "no record is older than the first horizon")

	entered, release := make(chan struct{}), make(chan struct{})
	released := false
	unblock := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(unblock) // a failed check below must not leave the delivery waiting
	type result struct {
		res core.InboxResult
		err error
	}
	held := make(chan result, 1)
	go func() {
		res, err := in.Process(ctx, consumer, msg("held", now), func(context.Context, TTx, core.InboxMessage) error {
			close(entered)
			<-release
			return nil
		})
		held <- result{res, err}
	}()
	select {
	case <-entered:
	case r := <-held:
		t.Fatalf("the held delivery ended before its handler ran: %+v", r)
	}

	type pruned struct {
		n   int
		err error
	}
	done := make(chan pruned, 1)
	go func() {
		n, err := in.Prune(ctx, consumer, now.Add(-time.Hour), 0)
		done <- pruned{n, err}
	}()
	var p pruned
	select {
	case p = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Prune waits for the delivery in progress: the horizon check locks what the prune changes")
	}
	require.NoError(t, p.err)
	require.Equal(t, old, p.n, "the prune deletes every record older than the horizon")

	unblock()
	r := <-held
	require.NoError(t, r.err)
	require.Equal(t, core.Applied, r.res.Outcome, "the held delivery, newer than the horizon, is applied")

	res, err := in.Process(ctx, consumer, msg("new", time.Now()), noop)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	_, err = in.Process(ctx, consumer, msg("too-old", now.Add(-2*time.Hour)), noop)
	require.True(t, errors.Is(err, core.ErrBeyondRetention), "a message older than the new horizon: %v", err)
}
