package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

type laneRow struct {
	Lane       int
	Owner      string
	Generation int64
	Until      int64
}

// laneRows reads the lanes table as it is.
func laneRows(t *testing.T, db *sql.DB, table string) []laneRow {
	t.Helper()
	rows, err := db.Query(`SELECT lane, owner, generation, lease_until FROM ` + table + `_lanes ORDER BY lane`)
	require.NoError(t, err)
	defer rows.Close()
	var out []laneRow
	for rows.Next() {
		var r laneRow
		require.NoError(t, rows.Scan(&r.Lane, &r.Owner, &r.Generation, &r.Until))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestGenerationFresh(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 2})
	pub, err := b.store.Generation(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Publisher{}, pub)

	// Callers that know nothing of generations (generation 0) keep working on a fresh outbox.
	ls, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Owner: "w", Max: 2, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	ls, err = b.store.RenewLanes(b.ctx, driver.RenewParams{Leases: ls, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 2)
}

func TestAcquireGenerationJoinAndBump(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 2})
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	acquire := func(kind, holder string, join bool, now time.Time) driver.Publisher {
		t.Helper()
		pub, err := b.store.AcquireGeneration(b.ctx, driver.AcquireParams{Kind: kind, Holder: holder, Join: join, Now: now})
		require.NoError(t, err)
		got, err := b.store.Generation(b.ctx)
		require.NoError(t, err)
		require.Equal(t, pub, got, "Generation must return what AcquireGeneration returned")
		return pub
	}

	// Join on a fresh outbox (kind "") takes generation 1.
	require.Equal(t, driver.Publisher{Generation: 1, Kind: driver.KindPolling, Holder: "a", Since: t0},
		acquire(driver.KindPolling, "a", true, t0))
	// Joining the same kind returns it unchanged: holder and since stay those of the taker.
	require.Equal(t, driver.Publisher{Generation: 1, Kind: driver.KindPolling, Holder: "a", Since: t0},
		acquire(driver.KindPolling, "b", true, t0.Add(time.Second)))
	// Without Join the same kind bumps.
	require.Equal(t, driver.Publisher{Generation: 2, Kind: driver.KindPolling, Holder: "c", Since: t0.Add(2 * time.Second)},
		acquire(driver.KindPolling, "c", false, t0.Add(2*time.Second)))
	// Join of another kind bumps.
	require.Equal(t, driver.Publisher{Generation: 3, Kind: driver.KindCDC, Holder: "cdc-1", Since: t0.Add(3 * time.Second)},
		acquire(driver.KindCDC, "cdc-1", true, t0.Add(3*time.Second)))
	require.Equal(t, int64(3), acquire(driver.KindCDC, "cdc-2", true, t0.Add(4*time.Second)).Generation)
	require.Equal(t, int64(4), acquire(driver.KindCDC, "cdc-2", false, t0.Add(5*time.Second)).Generation)
	require.Equal(t, int64(5), acquire(driver.KindPolling, "d", true, t0.Add(6*time.Second)).Generation)

	// A zero Now is the database clock (this process's clock).
	before := time.Now().Truncate(time.Microsecond)
	pub := acquire(driver.KindCDC, "e", false, time.Time{})
	after := time.Now()
	require.Equal(t, int64(6), pub.Generation)
	require.False(t, pub.Since.Before(before), "since %v before %v", pub.Since, before)
	require.False(t, pub.Since.After(after), "since %v after %v", pub.Since, after)

	// An unknown kind is refused and changes nothing.
	_, err := b.store.AcquireGeneration(b.ctx, driver.AcquireParams{Kind: "other", Holder: "x"})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	got, err := b.store.Generation(b.ctx)
	require.NoError(t, err)
	require.Equal(t, pub, got)
}

func TestClaimAndRenewFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 4})
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	old, err := b.store.AcquireGeneration(b.ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "fleet", Join: true, Now: t0})
	require.NoError(t, err)
	held, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: old.Generation, Owner: "a", Max: 2, TTL: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Len(t, held, 2)
	written, err := b.write(t, event("e1", "k1"))
	require.NoError(t, err)
	require.Len(t, written, 1)

	cdc, err := b.store.AcquireGeneration(b.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc", Now: t0.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, old.Generation+1, cdc.Generation)
	before := laneRows(t, b.db, "outbox")

	// The old generation may neither claim (free lanes remain) nor renew: ErrFenced, nothing
	// changed.
	ls, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: old.Generation, Owner: "b", Max: 4, TTL: time.Minute, Now: t0.Add(2 * time.Second)})
	require.ErrorIs(t, err, core.ErrFenced)
	require.True(t, strings.HasPrefix(err.Error(), "sqlite: claim lanes: "), err.Error())
	require.Empty(t, ls)
	ls, err = b.store.RenewLanes(b.ctx, driver.RenewParams{Generation: old.Generation, Leases: held, TTL: time.Hour, Now: t0.Add(2 * time.Second)})
	require.ErrorIs(t, err, core.ErrFenced)
	require.True(t, strings.HasPrefix(err.Error(), "sqlite: renew lanes: "), err.Error())
	require.Empty(t, ls)
	// A future generation is fenced too.
	_, err = b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: cdc.Generation + 1, Owner: "b", Max: 4, TTL: time.Minute, Now: t0.Add(2 * time.Second)})
	require.ErrorIs(t, err, core.ErrFenced)
	// Calls with nothing to do still report the fence.
	_, err = b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: old.Generation, Owner: "b", Max: 0})
	require.ErrorIs(t, err, core.ErrFenced)
	_, err = b.store.RenewLanes(b.ctx, driver.RenewParams{Generation: old.Generation})
	require.ErrorIs(t, err, core.ErrFenced)
	require.Equal(t, before, laneRows(t, b.db, "outbox"), "a fenced call changed the lanes")
	pub, err := b.store.Generation(b.ctx)
	require.NoError(t, err)
	require.Equal(t, cdc, pub)

	// Settle is not publisher-fenced: the old publisher may finish the batch it holds leases
	// for.
	recs, err := b.store.Fetch(b.ctx, driver.FetchParams{Leases: held, Limit: 10, Now: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	var seqs []int64
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
	}
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: held, Published: seqs, Now: t0.Add(2 * time.Second)}))

	// The current generation claims the free lanes and, with nothing to do, passes.
	ls, err = b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: cdc.Generation, Owner: "cdc", Max: 4, TTL: time.Minute, Now: t0.Add(2 * time.Second)})
	require.NoError(t, err)
	require.Len(t, ls, 2)
	_, err = b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: cdc.Generation, Owner: "cdc", Max: 0})
	require.NoError(t, err)
	_, err = b.store.RenewLanes(b.ctx, driver.RenewParams{Generation: cdc.Generation})
	require.NoError(t, err)
	// The old publisher releases its lanes (ReleaseLanes is not fenced) and they come free.
	require.NoError(t, b.store.ReleaseLanes(b.ctx, held))
	ls, err = b.store.ClaimLanes(b.ctx, driver.ClaimParams{Generation: cdc.Generation, Owner: "cdc", Max: 4, TTL: time.Minute, Now: t0.Add(3 * time.Second)})
	require.NoError(t, err)
	require.Len(t, ls, 2)
}

// TestAcquireGenerationConcurrent: concurrent AcquireGeneration calls through separate pools
// (separate Stores, so SQLite's own lock, not the Store's queue, serialises them) and through
// one Store all get distinct generations, with no gaps.
func TestAcquireGenerationConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "gens.db")
	const pools, perPool, perStore = 3, 2, 8
	var stores []*sqlite.Store
	for range pools {
		db, err := sqlite.OpenDB(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlite.New(db, &sqlite.Options{Lanes: 4, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		stores = append(stores, s)
	}

	var mu sync.Mutex
	var gens []int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, s := range stores {
		for j := range perPool {
			wg.Go(func() {
				<-start
				for k := range perStore {
					pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: fmt.Sprintf("h%d-%d-%d", i, j, k)})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					gens = append(gens, pub.Generation)
					mu.Unlock()
				}
			})
		}
	}
	close(start)
	wg.Wait()
	require.False(t, t.Failed())
	const total = pools * perPool * perStore
	slices.Sort(gens)
	want := make([]int64, total)
	for i := range want {
		want[i] = int64(i + 1)
	}
	require.Equal(t, want, gens)
	for _, s := range stores {
		pub, err := s.Generation(ctx)
		require.NoError(t, err)
		require.Equal(t, int64(total), pub.Generation)
	}
}

// TestAcquireFencesConcurrentClaims: while another pool takes generations, claims and renewals
// through a second pool with the generation they last read either succeed or fail with
// ErrFenced (never another error such as SQLITE_BUSY), and once the taker is done every
// superseded generation is fenced while the current one works.
func TestAcquireFencesConcurrentClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "race.db")
	var stores []*sqlite.Store
	for range 2 {
		db, err := sqlite.OpenDB(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlite.New(db, &sqlite.Options{Lanes: 4, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		stores = append(stores, s)
	}
	const takes = 40
	done := make(chan struct{})
	// round paces the taker: one generation per claim round at most, so the two interleave.
	round := make(chan struct{}, 1)
	quit := make(chan struct{}) // the claimer stopped
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(done)
		for range takes {
			select {
			case <-round:
			case <-quit:
				return
			}
			if _, err := stores[0].AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "taker"}); err != nil {
				t.Error(err)
				return
			}
		}
	})
	var succeeded, fencedN int
	seen := map[int64]bool{}
	wg.Go(func() {
		defer close(quit)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			pub, err := stores[1].Generation(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			seen[pub.Generation] = true
			ls, err := stores[1].ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: fmt.Sprint("w", i), Max: 4, TTL: time.Minute})
			if err == nil {
				_, err = stores[1].RenewLanes(ctx, driver.RenewParams{Generation: pub.Generation, Leases: ls, TTL: time.Minute})
				if err == nil {
					err = stores[1].ReleaseLanes(ctx, ls)
				}
			}
			switch {
			case err == nil:
				succeeded++
			case errors.Is(err, core.ErrFenced):
				fencedN++
			default:
				t.Errorf("claim/renew with generation %d: %v", pub.Generation, err)
				return
			}
			select {
			case round <- struct{}{}:
			default:
			}
		}
	})
	wg.Wait()
	require.False(t, t.Failed())
	t.Logf("claim rounds: %d succeeded, %d fenced, %d generations seen", succeeded, fencedN, len(seen))
	require.GreaterOrEqual(t, succeeded+fencedN, takes)

	for g := range seen {
		if g == takes {
			continue
		}
		_, err := stores[1].ClaimLanes(ctx, driver.ClaimParams{Generation: g, Owner: "late", Max: 4, TTL: time.Minute})
		require.ErrorIs(t, err, core.ErrFenced, "generation %d", g)
	}
	// Leases of rounds fenced between claim and release are still held: claim past them.
	ls, err := stores[1].ClaimLanes(ctx, driver.ClaimParams{Generation: takes, Owner: "current", Max: 4, TTL: time.Minute, Now: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Len(t, ls, 4)
}

// TestMigrateUpgradesOldOutbox: an outbox migrated by the previous version of the adapter
// (schema version 1, no publisher table) refuses the calls that need a later migration (the
// generation-fenced ones, and the operator reads and changes of the pending layout) with
// ErrSchemaMismatch, changing nothing, and gains the publisher
// table at generation 0, with its rows and leases intact, when Migrate runs again.
func TestMigrateUpgradesOldOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	const table = "events"
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, &sqlite.Options{Table: table, Lanes: 3, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = out.Write(ctx, tx, event("old-1", "k"), event("old-2", "k"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	held, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "old-relay", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, held, 1)
	// Turn it into what the previous version left: schema version 1, no publisher table.
	// The pending layout (0007) goes with its objects, and the earlier layout's indexes, which
	// a new outbox drops, come back: the rows stay as 0007 found them (unpublished, never failed).
	_, err = db.ExecContext(ctx, `DROP TABLE events_publisher; DROP TRIGGER events_immutable; DROP TABLE events_audit;
		DROP TABLE events_queue; DROP TABLE events_publications;
		DROP TRIGGER events_queue_insert; DROP TRIGGER events_queue_insert_pub; DROP TRIGGER events_queue_lane;
		DROP TRIGGER events_queue_mark; DROP TRIGGER events_queue_unmark; DROP TRIGGER events_queue_status;
		DROP TRIGGER events_queue_delete;
		CREATE INDEX events_pending ON events (seq, lane) WHERE published_at IS NULL;
		CREATE INDEX events_blocked ON events (partition_key, seq, parked_at, next_attempt_at, published_at)
			WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL);
		CREATE INDEX events_published ON events (published_at) WHERE published_at IS NOT NULL;
		DELETE FROM events_migrations WHERE version >= 2`)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	lanesBefore := laneRows(t, db, table)

	// A new Store on a new pool, opened as the operator commands do: no Migrate.
	db2, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db2.Close() })
	ops, err := sqlite.New(db2, &sqlite.Options{Table: table, Logger: quiet})
	require.NoError(t, err)
	n, err := ops.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	// The operator reads and changes of this version need the pending layout (migration 0007):
	// before it they are refused with ErrSchemaMismatch and change nothing.
	_, err = ops.Stats(ctx)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.List(ctx, driver.ListParams{Limit: 10})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.Unpark(ctx, "order/k")
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now(), Limit: 10})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.Generation(ctx)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 3, TTL: time.Minute})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.RenewLanes(ctx, driver.RenewParams{Leases: held, TTL: time.Minute})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = ops.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.Equal(t, lanesBefore, laneRows(t, db2, table), "a refused call changed the lanes")

	// Migrate (the application's Store, with its lane count) adds the table (version 2) and
	// keeps everything else; again, it changes nothing. The operator Store, whose statement
	// cache could not be prepared before, works on.
	app, err := sqlite.New(db2, &sqlite.Options{Table: table, Lanes: 3, Logger: quiet})
	require.NoError(t, err)
	for range 2 {
		require.NoError(t, app.Migrate(ctx))
		var versions []int
		rows, err := db2.QueryContext(ctx, `SELECT version FROM events_migrations ORDER BY version`)
		require.NoError(t, err)
		for rows.Next() {
			var v int
			require.NoError(t, rows.Scan(&v))
			versions = append(versions, v)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, versions)
		pub, err := ops.Generation(ctx)
		require.NoError(t, err)
		require.Equal(t, driver.Publisher{}, pub)
		require.Equal(t, lanesBefore, laneRows(t, db2, table))
	}
	st, err := ops.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.Pending)
	recs, err := ops.List(ctx, driver.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	unparked, err := ops.Unpark(ctx, "order/k")
	require.NoError(t, err)
	require.Zero(t, unparked)
	pruned, err := ops.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now(), Limit: 10})
	require.NoError(t, err)
	require.Zero(t, pruned)
	renewed, err := ops.RenewLanes(ctx, driver.RenewParams{Generation: 0, Leases: held, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, renewed, 1)
	pub, err := ops.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "new", Join: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), pub.Generation)
	_, err = ops.RenewLanes(ctx, driver.RenewParams{Generation: 0, Leases: held, TTL: time.Hour})
	require.ErrorIs(t, err, core.ErrFenced)
	ls, err := ops.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "new", Max: 3, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, ls, 2)
}
