package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/stretchr/testify/require"
)

func newStore(t *testing.T, lanes int) *memory.Store {
	t.Helper()
	s, err := memory.New(&memory.Options{Lanes: lanes})
	require.NoError(t, err)
	return s
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	s, err := memory.New(nil)
	require.NoError(t, err)
	n, err := s.LaneCount(context.Background())
	require.NoError(t, err)
	require.Equal(t, core.DefaultLanes, n)

	for _, lanes := range []int{-1, core.MaxLanes + 1} {
		_, err := memory.New(&memory.Options{Lanes: lanes})
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "Lanes", oe.Field)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
}

func TestTxRollbackAndPanic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, 4)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](s), nil)
	require.NoError(t, err)
	write := func(tx *memory.Tx) {
		require.NoError(t, tx.Incr("n"))
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		require.NoError(t, err)
	}
	boom := errors.New("boom")
	require.ErrorIs(t, s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { write(tx); return boom }), boom)
	require.Panics(t, func() {
		_ = s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { write(tx); panic("crash") })
	})
	require.Equal(t, 0, s.Counter("n"))
	recs, err := s.List(ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Empty(t, recs)

	// The writer lock was released by both: a commit works and is visible.
	var kept *memory.Tx
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { write(tx); kept = tx; return nil }))
	require.Equal(t, 1, s.Counter("n"))
	recs, err = s.List(ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.ErrorIs(t, kept.Incr("n"), memory.ErrTxDone, "a Tx is unusable after its transaction")
}

func TestUncommittedInvisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, 1)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](s), nil)
	require.NoError(t, err)
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		require.NoError(t, err)
		require.NoError(t, tx.Incr("n"))
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
		require.NoError(t, err)
		require.Empty(t, recs, "an uncommitted event is fetched")
		require.Equal(t, 0, s.Counter("n"), "an uncommitted counter is visible")
		return nil
	}))
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 1)
}

func TestWriterLockHonoursContext(t *testing.T) {
	t.Parallel()
	s := newStore(t, 1)
	inside := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(context.Background(), func(ctx context.Context, tx *memory.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.PruneInbox(ctx, "c", time.Now(), 10)
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	require.NoError(t, <-done)
}

func TestForeignTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := newStore(t, 1), newStore(t, 1)
	err := a.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		return b.Insert(ctx, tx, []driver.Record{{Event: core.Event{ID: "x", AggregateType: "a", AggregateID: "1", Type: "t", PartitionKey: "a/1"}}})
	})
	require.Error(t, err)
}
