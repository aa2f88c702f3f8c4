package mysql_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func TestPublisherGeneration(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, &mysql.Options{Lanes: 3})

	p, err := s.Generation(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Publisher{}, p, "a fresh outbox is at generation 0 with no kind, holder or time")

	// Join on another kind takes a new generation.
	p1, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w1", Join: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), p1.Generation)
	require.Equal(t, driver.KindPolling, p1.Kind)
	require.Equal(t, "w1", p1.Holder)
	require.WithinDuration(t, time.Now(), p1.Since, time.Minute, "since is the database clock")

	// Join on the same kind returns the current generation unchanged.
	p2, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w2", Join: true})
	require.NoError(t, err)
	require.Equal(t, p1, p2)

	// Without Join the generation is bumped even for the same kind; Now is honoured.
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	p3, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc-1", Now: t0})
	require.NoError(t, err)
	require.Equal(t, driver.Publisher{Generation: 2, Kind: driver.KindCDC, Holder: "cdc-1", Since: t0}, p3)
	p4, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc-2", Now: t0})
	require.NoError(t, err)
	require.Equal(t, int64(3), p4.Generation)

	got, err := s.Generation(ctx)
	require.NoError(t, err)
	require.Equal(t, p4, got)

	// Migrate again keeps the generation.
	require.NoError(t, s.Migrate(ctx))
	got, err = s.Generation(ctx)
	require.NoError(t, err)
	require.Equal(t, p4, got)
}

func TestPublisherFencing(t *testing.T) {
	t.Parallel()
	for _, strategy := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimGetLock} {
		t.Run(strategy.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := newStore(t, &mysql.Options{Lanes: 2, ClaimStrategy: strategy})
			t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

			// Generation 0 (a fresh outbox) claims as before.
			old, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: 0, Owner: "old", Max: 1, TTL: 10 * time.Second, Now: t0})
			require.NoError(t, err)
			require.Len(t, old, 1)

			pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "new"})
			require.NoError(t, err)
			require.Equal(t, int64(1), pub.Generation)

			// The old generation may neither claim nor renew; nothing changes.
			_, err = s.ClaimLanes(ctx, driver.ClaimParams{Generation: 0, Owner: "old", Max: 2, TTL: time.Minute, Now: t0})
			require.ErrorIs(t, err, core.ErrFenced)
			require.Contains(t, err.Error(), "mysql: claim lanes:")
			_, err = s.RenewLanes(ctx, driver.RenewParams{Generation: 0, Leases: old, TTL: time.Hour, Now: t0.Add(5 * time.Second)})
			require.ErrorIs(t, err, core.ErrFenced)
			require.Contains(t, err.Error(), "mysql: renew lanes:")

			// The new generation gets the free lane at once and the fenced lane once its
			// (unrenewed) lease expires.
			l, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "new", Max: 2, TTL: time.Minute, Now: t0.Add(time.Second)})
			require.NoError(t, err)
			require.Len(t, l, 1, "the old lease is still valid")
			require.NotEqual(t, old[0].Lane, l[0].Lane)
			l2, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "new", Max: 2, TTL: time.Minute, Now: t0.Add(11 * time.Second)})
			require.NoError(t, err)
			require.Len(t, l2, 1, "the fenced renewal did not extend the lease")
			require.Equal(t, old[0].Lane, l2[0].Lane)

			// The current generation renews; a stale one (lower or higher) does not.
			r, err := s.RenewLanes(ctx, driver.RenewParams{Generation: 1, Leases: l2, TTL: time.Minute, Now: t0.Add(12 * time.Second)})
			require.NoError(t, err)
			require.Len(t, r, 1)
			_, err = s.RenewLanes(ctx, driver.RenewParams{Generation: 2, Leases: l2, TTL: time.Minute, Now: t0.Add(12 * time.Second)})
			require.ErrorIs(t, err, core.ErrFenced)

			// Settle is not publisher-fenced: the old publisher's lease is lost anyway.
			err = s.Settle(ctx, driver.SettleParams{Leases: old, Now: t0.Add(13 * time.Second)})
			var lost *driver.LanesLostError
			require.ErrorAs(t, err, &lost)
		})
	}
}

func TestCheckpointFencing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := newStore(t, nil)

	_, ok, err := s.LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.False(t, ok)

	pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "a"})
	require.NoError(t, err)
	c := driver.Checkpoint{Source: "mysql:1/db.outbox", Position: "gtid:0-1-30;file:binlog.000003:1234", Generation: pub.Generation}
	require.NoError(t, s.SaveCheckpoint(ctx, c))
	got, ok, err := s.LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.WithinDuration(t, time.Now(), got.UpdatedAt, time.Minute)
	require.Equal(t, time.UTC, got.UpdatedAt.Location())
	c.UpdatedAt = got.UpdatedAt
	require.Equal(t, c, got)

	c2 := c
	c2.Position = "file:binlog.000004:4"
	require.NoError(t, s.SaveCheckpoint(ctx, c2))

	// A newer generation fences the old one's checkpoint writes.
	_, err = s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "b"})
	require.NoError(t, err)
	c3 := c2
	c3.Position = "file:binlog.000009:4"
	err = s.SaveCheckpoint(ctx, c3)
	require.ErrorIs(t, err, core.ErrFenced)
	got, _, err = s.LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.Equal(t, c2.Position, got.Position, "a fenced save changes nothing")
	require.Equal(t, pub.Generation, got.Generation)
}

// TestPublisherFencingRace: claims and renewals of the old generation race with
// AcquireGeneration; every call that begins after AcquireGeneration returned is fenced, and
// none fails otherwise.
func TestPublisherFencingRace(t *testing.T) {
	t.Parallel()
	for _, strategy := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimGetLock} {
		t.Run(strategy.String(), func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			s := newStore(t, &mysql.Options{Lanes: 8, ClaimStrategy: strategy})
			var acquired atomic.Bool
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for w := range errs {
				wg.Go(func() {
					owner := fmt.Sprint("w", w)
					for {
						after := acquired.Load()
						l, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: owner, Max: 2, TTL: time.Minute})
						if err == nil && len(l) > 0 {
							_, err = s.RenewLanes(ctx, driver.RenewParams{Leases: l, TTL: time.Minute})
							if err == nil {
								err = s.ReleaseLanes(ctx, l)
							}
						}
						switch {
						case after && !errors.Is(err, core.ErrFenced):
							errs[w] = fmt.Errorf("%s after the new generation: %v", owner, err)
							return
						case after:
							return
						case err != nil && !errors.Is(err, core.ErrFenced):
							errs[w] = err
							return
						}
					}
				})
			}
			time.Sleep(20 * time.Millisecond) // let the claimers run (not synchronisation)
			_, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc"})
			require.NoError(t, err)
			acquired.Store(true)
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
		})
	}
}
