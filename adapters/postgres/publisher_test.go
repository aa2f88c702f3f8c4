package postgres

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// publisherStore is what the generation tests drive, for both entry points.
type publisherStore interface {
	driver.CDCStore
	driver.Admin
}

type publisherVariant struct {
	name     string
	strategy ClaimStrategy
	sql      bool
}

var publisherVariants = []publisherVariant{
	{"pgx/skip_locked", ClaimSkipLocked, false},
	{"pgx/advisory_lock", ClaimAdvisoryLock, false},
	{"database_sql/skip_locked", ClaimSkipLocked, true},
	{"database_sql/advisory_lock", ClaimAdvisoryLock, true},
}

func newPublisherStore(t *testing.T, v publisherVariant, lanes int) (publisherStore, *testDB) {
	t.Helper()
	d := newTestDB(t, dbOptions{})
	opts := &Options{Schema: d.schema, Lanes: lanes, ClaimStrategy: v.strategy}
	var s interface {
		publisherStore
		Migrate(context.Context) error
	}
	var err error
	if v.sql {
		s, err = NewSQL(d.sqlDB(t), opts)
	} else {
		s, err = New(d.pool, opts)
	}
	require.NoError(t, err)
	require.NoError(t, s.Migrate(context.Background()))
	return s, d
}

// laneRows returns (owner, generation, lease_until) of every lane, in lane order.
func laneRows(t *testing.T, d *testDB) []string {
	t.Helper()
	rows, err := d.pool.Query(context.Background(),
		`SELECT lane || ':' || owner || ':' || generation || ':' || lease_until::text FROM outbox_lanes ORDER BY lane`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func TestPublisherGenerations(t *testing.T) {
	t.Parallel()
	for _, v := range publisherVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, d := newPublisherStore(t, v, 4)
			t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

			pub, err := s.Generation(ctx)
			require.NoError(t, err)
			require.Equal(t, driver.Publisher{}, pub)
			// A fresh outbox is at generation 0: callers that pass no generation keep working.
			leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w0", Max: 1, TTL: time.Minute, Now: t0})
			require.NoError(t, err)
			require.Len(t, leases, 1)
			require.NoError(t, s.ReleaseLanes(ctx, leases))

			// Joining a generation of another kind takes a new one.
			pub, err = s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w1", Join: true, Now: t0})
			require.NoError(t, err)
			require.Equal(t, driver.Publisher{Generation: 1, Kind: driver.KindPolling, Holder: "w1", Since: t0}, pub)
			// Joining the current kind returns it unchanged.
			joined, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w2", Join: true, Now: t0.Add(time.Second)})
			require.NoError(t, err)
			require.Equal(t, pub, joined)
			got, err := s.Generation(ctx)
			require.NoError(t, err)
			require.Equal(t, pub, got)

			// Generation 0 is now fenced; generation 1 claims.
			before := laneRows(t, d)
			_, err = s.ClaimLanes(ctx, driver.ClaimParams{Generation: 0, Owner: "w0", Max: 4, TTL: time.Minute, Now: t0})
			require.ErrorIs(t, err, core.ErrFenced)
			require.Equal(t, before, laneRows(t, d), "a fenced claim changes nothing")
			leases, err = s.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "w1", Max: 2, TTL: time.Minute, Now: t0})
			require.NoError(t, err)
			require.Len(t, leases, 2)

			// A CDC relay takes over without joining: the polling generation can neither renew
			// nor claim, and its renewal changes nothing.
			cdc, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "c1", Join: true})
			require.NoError(t, err)
			require.EqualValues(t, 2, cdc.Generation)
			require.Equal(t, driver.KindCDC, cdc.Kind)
			require.WithinDuration(t, time.Now(), cdc.Since, time.Minute, "Since is the database clock")
			before = laneRows(t, d)
			_, err = s.RenewLanes(ctx, driver.RenewParams{Generation: 1, Leases: leases, TTL: time.Hour, Now: t0.Add(time.Second)})
			require.ErrorIs(t, err, core.ErrFenced)
			require.Equal(t, before, laneRows(t, d), "a fenced renewal changes nothing")
			_, err = s.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "w1", Max: 2, TTL: time.Minute, Now: t0})
			require.ErrorIs(t, err, core.ErrFenced)
			// Leases already held stay valid (Settle is not publisher-fenced) and can be released.
			require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Now: t0.Add(time.Second)}))
			require.NoError(t, s.ReleaseLanes(ctx, leases))

			// The current generation renews and claims.
			leases, err = s.ClaimLanes(ctx, driver.ClaimParams{Generation: 2, Owner: "c1", Max: 4, TTL: time.Minute, Now: t0})
			require.NoError(t, err)
			require.Len(t, leases, 4)
			renewed, err := s.RenewLanes(ctx, driver.RenewParams{Generation: 2, Leases: leases, TTL: time.Hour, Now: t0.Add(time.Second)})
			require.NoError(t, err)
			require.Len(t, renewed, 4)
			require.Equal(t, t0.Add(time.Second+time.Hour), renewed[0].Until)

			// Join=false always bumps, even for the same kind.
			again, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "c2"})
			require.NoError(t, err)
			require.EqualValues(t, 3, again.Generation)
			require.Equal(t, "c2", again.Holder)
		})
	}
}

func TestCheckpointFenced(t *testing.T) {
	t.Parallel()
	for _, v := range publisherVariants[1:3] { // one of each entry point
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := newPublisherStore(t, v, 2)

			_, ok, err := s.LoadCheckpoint(ctx)
			require.NoError(t, err)
			require.False(t, ok, "no checkpoint on a fresh outbox")

			pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "c1"})
			require.NoError(t, err)
			require.NoError(t, s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "src", Position: "0/10", Generation: pub.Generation}))
			c, ok, err := s.LoadCheckpoint(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, "src", c.Source)
			require.Equal(t, "0/10", c.Position)
			require.Equal(t, pub.Generation, c.Generation)
			require.WithinDuration(t, time.Now(), c.UpdatedAt, time.Minute)
			require.Equal(t, time.UTC, c.UpdatedAt.Location())

			require.NoError(t, s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "src", Position: "0/20", Generation: pub.Generation}))
			next, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "c2"})
			require.NoError(t, err)
			err = s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "src", Position: "0/30", Generation: pub.Generation})
			require.ErrorIs(t, err, core.ErrFenced)
			err = s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "src", Position: "0/30", Generation: next.Generation + 1})
			require.ErrorIs(t, err, core.ErrFenced, "a generation from the future is fenced too")
			c, _, err = s.LoadCheckpoint(ctx)
			require.NoError(t, err)
			require.Equal(t, "0/20", c.Position, "a fenced save changes nothing")

			require.NoError(t, s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "other", Position: "0/40", Generation: next.Generation}))
			c, _, err = s.LoadCheckpoint(ctx)
			require.NoError(t, err)
			require.Equal(t, driver.Checkpoint{Source: "other", Position: "0/40", Generation: next.Generation, UpdatedAt: c.UpdatedAt}, c)
		})
	}
}

func TestAcquireGenerationConcurrent(t *testing.T) {
	t.Parallel()
	for _, v := range publisherVariants[1:3] {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, _ := newPublisherStore(t, v, 2)
			const n = 8
			gens := make([]int64, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					p, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "h"})
					gens[i], errs[i] = p.Generation, err
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			slices.Sort(gens)
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6, 7, 8}, gens, "every acquirer got its own generation")
			pub, err := s.Generation(ctx)
			require.NoError(t, err)
			require.EqualValues(t, n, pub.Generation)
		})
	}
}

// TestFencingWaitsForAcquire: a claim, renewal or checkpoint save that runs while an
// AcquireGeneration is in flight waits for it and is then fenced by the new generation.
func TestFencingWaitsForAcquire(t *testing.T) {
	t.Parallel()
	for _, v := range publisherVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, d := newPublisherStore(t, v, 2)
			leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, leases, 1)

			for _, op := range []struct {
				name string
				call func(gen int64) error
			}{
				{"claim", func(gen int64) error {
					_, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: gen, Owner: "w", Max: 2, TTL: time.Minute})
					return err
				}},
				{"renew", func(gen int64) error {
					_, err := s.RenewLanes(ctx, driver.RenewParams{Generation: gen, Leases: leases, TTL: time.Minute})
					return err
				}},
				{"save_checkpoint", func(gen int64) error {
					return s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "s", Position: "0/1", Generation: gen})
				}},
			} {
				pub, err := s.Generation(ctx)
				require.NoError(t, err)
				// An acquisition in flight: the publisher row is updated, not yet committed.
				tx, err := d.pool.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, `UPDATE outbox_publisher SET generation = generation + 1`)
				require.NoError(t, err)
				var pid int
				require.NoError(t, tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))

				done := make(chan error, 1)
				go func() { done <- op.call(pub.Generation) }()
				waitBlockedBy(t, d, pid)
				select {
				case err := <-done:
					t.Fatalf("%s did not wait for the acquisition: %v", op.name, err)
				default:
				}
				require.NoError(t, tx.Commit(ctx))
				require.ErrorIs(t, <-done, core.ErrFenced, op.name)
			}
		})
	}
}

// waitBlockedBy waits until some session is blocked by the server process pid.
func waitBlockedBy(t *testing.T, d *testDB, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := d.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, pid).Scan(&n)
		return err == nil && n > 0
	}, 10*time.Second, 5*time.Millisecond)
}
