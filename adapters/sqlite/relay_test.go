package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)

func seqsOf(recs []driver.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func idsOf(recs []driver.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func claimAll(t *testing.T, b *testBundle, owner string, now time.Time) []driver.Lease {
	t.Helper()
	ls, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Owner: owner, Max: core.MaxLanes, TTL: time.Hour, Now: now})
	require.NoError(t, err)
	return ls
}

func TestFetchPerKeyBlocking(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 1})
	_, err := b.write(t, event("a", "k1"), event("b", "k1"), event("d", "k2"), event("c", "k1"))
	require.NoError(t, err)
	leases := claimAll(t, b, "w", t0)
	require.Len(t, leases, 1)
	fetch := func(now time.Time, limit int) []driver.Record {
		recs, err := b.store.Fetch(b.ctx, driver.FetchParams{Leases: leases, Limit: limit, Now: now})
		require.NoError(t, err)
		return recs
	}
	all := fetch(t0, 10)
	require.Equal(t, []string{"a", "b", "d", "c"}, idsOf(all))
	require.Equal(t, []string{"a", "b"}, idsOf(fetch(t0, 2)))
	seq := map[string]int64{}
	for _, r := range all {
		seq[r.ID] = r.Seq
	}

	// a fails with a delay: all of k1 waits, k2 goes on.
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: leases, Now: t0,
		Failed: []driver.Failure{{Seq: seq["a"], Lane: 0, Error: "boom", Delay: time.Minute}}}))
	require.Equal(t, []string{"d"}, idsOf(fetch(t0, 10)))
	require.Equal(t, []string{"d"}, idsOf(fetch(t0.Add(time.Minute-time.Microsecond), 10)))
	due := fetch(t0.Add(time.Minute), 10)
	require.Equal(t, []string{"a", "b", "d", "c"}, idsOf(due))
	require.Equal(t, 1, due[0].Attempts)
	require.Equal(t, "boom", due[0].LastError)
	require.Equal(t, t0.Add(time.Minute).Truncate(time.Microsecond), due[0].NextAttemptAt)

	// a is published, b is parked: c waits behind b until an operator unparks k1.
	t1 := t0.Add(2 * time.Minute)
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: leases, Now: t1,
		Published: []int64{seq["a"]},
		Failed:    []driver.Failure{{Seq: seq["b"], Lane: 0, Error: "bad", Park: true}}}))
	require.Equal(t, []string{"d"}, idsOf(fetch(t1.Add(time.Hour), 10)))
	parked, err := b.store.List(b.ctx, driver.ListParams{State: driver.StateParked})
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, idsOf(parked))
	require.Equal(t, t1.Truncate(time.Microsecond), parked[0].ParkedAt)
	st, err := b.store.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Pending: 2, Parked: 1, Published: 1, OldestPendingAt: st.OldestPendingAt}, st)
	require.False(t, st.OldestPendingAt.IsZero())

	n, err := b.store.Unpark(b.ctx, "order/k1")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := fetch(t1, 10)
	require.Equal(t, []string{"b", "d", "c"}, idsOf(again))
	require.Zero(t, again[0].Attempts)
	require.True(t, again[0].ParkedAt.IsZero())
	require.True(t, again[0].NextAttemptAt.IsZero())
	n, err = b.store.Unpark(b.ctx, "order/k1")
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestFetchOnlyLeasedLanes(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 4})
	evs := manyEvents("e", 200, 50)
	_, err := b.write(t, evs...)
	require.NoError(t, err)
	l, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Owner: "w", Max: 2, TTL: time.Hour, Now: t0})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1}, []int{l[0].Lane, l[1].Lane})
	recs, err := b.store.Fetch(b.ctx, driver.FetchParams{Leases: l, Limit: 1000, Now: t0})
	require.NoError(t, err)
	want := 0
	for _, ev := range evs {
		if lane := driver.LaneOf("order/"+ev.AggregateID, 4); lane == 0 || lane == 1 {
			want++
		}
	}
	require.Len(t, recs, want)
	for i, r := range recs {
		require.Contains(t, []int{0, 1}, r.Lane)
		if i > 0 {
			require.Greater(t, r.Seq, recs[i-1].Seq)
		}
	}
}

func TestSettleFencing(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 2})
	_, err := b.write(t, manyEvents("e", 20, 10)...)
	require.NoError(t, err)
	leases := claimAll(t, b, "old", t0)
	require.Len(t, leases, 2)
	recs, err := b.store.Fetch(b.ctx, driver.FetchParams{Leases: leases, Limit: 100, Now: t0})
	require.NoError(t, err)
	require.Len(t, recs, 20)

	// Lane 1 expires and is taken over.
	_, err = b.store.RenewLanes(b.ctx, driver.RenewParams{Leases: leases[:1], TTL: 3 * time.Hour, Now: t0})
	require.NoError(t, err)
	t1 := t0.Add(2 * time.Hour)
	taken, err := b.store.ClaimLanes(b.ctx, driver.ClaimParams{Owner: "new", Max: 5, TTL: time.Hour, Now: t1})
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, 1, taken[0].Lane)
	require.Equal(t, leases[1].Generation+1, taken[0].Generation)

	leases[0].Until = t0.Add(3 * time.Hour)
	err = b.store.Settle(b.ctx, driver.SettleParams{Leases: leases, Published: seqsOf(recs), Now: t1})
	var lost *driver.LanesLostError
	require.ErrorAs(t, err, &lost)
	require.ErrorIs(t, err, core.ErrClaimLost)
	require.Equal(t, []int{1}, lost.Lanes)
	st, err := b.store.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 20, st.Pending, "a refused settle changes nothing")

	// Settling with the lane still held marks only that lane's records, even if other seqs
	// are passed.
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: leases[:1], Published: seqsOf(recs), Now: t1}))
	st, err = b.store.Stats(b.ctx)
	require.NoError(t, err)
	var lane0 int64
	for _, r := range recs {
		if r.Lane == 0 {
			lane0++
		}
	}
	require.Equal(t, lane0, st.Published)
	require.Equal(t, 20-lane0, st.Pending)

	// Delete mode on the new owner's lane.
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: taken, Published: seqsOf(recs), Delete: true, Now: t1}))
	st, err = b.store.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Published: lane0}, st)
	require.Equal(t, int(lane0), b.count(t))
}

func TestPruneOutboxWatermark(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 1})
	_, err := b.write(t, manyEvents("e", 10, 10)...)
	require.NoError(t, err)
	leases := claimAll(t, b, "w", t0)
	recs, err := b.store.Fetch(b.ctx, driver.FetchParams{Leases: leases, Limit: 100, Now: t0})
	require.NoError(t, err)
	seqs := seqsOf(recs)
	// Publish all but the 6th (index 5).
	pub := append(append([]int64{}, seqs[:5]...), seqs[6:]...)
	require.NoError(t, b.store.Settle(b.ctx, driver.SettleParams{Leases: leases, Published: pub, Now: t0}))

	n, err := b.store.PruneOutbox(b.ctx, driver.PruneParams{PublishedBefore: t0, Limit: 100})
	require.NoError(t, err)
	require.Zero(t, n, "published at t0 is not before t0")
	n, err = b.store.PruneOutbox(b.ctx, driver.PruneParams{PublishedBefore: t0.Add(time.Second), BelowSeq: seqs[2], Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.store.PruneOutbox(b.ctx, driver.PruneParams{PublishedBefore: t0.Add(time.Second), Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.store.PruneOutbox(b.ctx, driver.PruneParams{PublishedBefore: t0.Add(time.Second), Limit: 100})
	require.NoError(t, err)
	require.Equal(t, 1, n, "only rows below the lowest unpublished seq")
	rest, err := b.store.List(b.ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Equal(t, seqs[5:], seqsOf(rest))
}

func TestInboxConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	in, err := core.NewInbox[*sql.Tx](t.Context(), b.store, nil)
	require.NoError(t, err)
	handler := func(ctx context.Context, tx *sql.Tx, msg core.InboxMessage) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (key, n) VALUES (?, 1)
			ON CONFLICT (key) DO UPDATE SET n = n + 1`, msg.EventID)
		return err
	}
	const workers = 8
	res := make([]core.InboxResult, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			res[i], errs[i] = in.Process(b.ctx, "c", core.InboxMessage{EventID: "m1", Payload: []byte("x"), OccurredAt: t0}, handler)
		})
	}
	wg.Wait()
	applied := 0
	for i := range workers {
		require.NoError(t, errs[i])
		if res[i].Outcome == core.Applied {
			applied++
		} else {
			require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, res[i])
		}
	}
	require.Equal(t, 1, applied)
	var n int
	require.NoError(t, b.db.QueryRow(`SELECT n FROM effects WHERE key = 'm1'`).Scan(&n))
	require.Equal(t, 1, n)

	_, err = in.Process(b.ctx, "c", core.InboxMessage{EventID: "m1", Payload: []byte("y"), OccurredAt: t0}, handler)
	require.ErrorIs(t, err, core.ErrDigestMismatch)
}

func TestPruneInboxHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	in, err := core.NewInbox[*sql.Tx](t.Context(), b.store, nil)
	require.NoError(t, err)
	nop := func(context.Context, *sql.Tx, core.InboxMessage) error { return nil }
	for i, at := range []time.Time{t0, t0.Add(time.Hour), t0.Add(2 * time.Hour), {}} {
		_, err := in.Process(b.ctx, "c", core.InboxMessage{EventID: string(rune('a' + i)), OccurredAt: at}, nop)
		require.NoError(t, err)
	}
	_, err = in.Process(b.ctx, "other", core.InboxMessage{EventID: "a", OccurredAt: t0}, nop)
	require.NoError(t, err)

	n, err := in.Prune(b.ctx, "c", t0.Add(90*time.Minute), 1)
	require.NoError(t, err)
	require.Equal(t, 3, n, "t0, t0+1h and the record without OccurredAt")
	// The horizon never goes back.
	n, err = b.store.PruneInbox(b.ctx, "c", t0, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	err = b.store.InTx(b.ctx, func(ctx context.Context, tx *sql.Tx) error {
		h, err := b.store.Horizon(ctx, tx, "c")
		require.NoError(t, err)
		require.Equal(t, t0.Add(90*time.Minute), h)
		h, err = b.store.Horizon(ctx, tx, "other")
		require.NoError(t, err)
		require.True(t, h.IsZero())
		return nil
	})
	require.NoError(t, err)
	_, err = in.Process(b.ctx, "c", core.InboxMessage{EventID: "late", OccurredAt: t0}, nop)
	require.ErrorIs(t, err, core.ErrBeyondRetention)
	var left int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM inbox`).Scan(&left))
	require.Equal(t, 2, left)
}

func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	hb := func(owner string, ttl time.Duration, now time.Time) int {
		n, err := b.store.Heartbeat(b.ctx, driver.HeartbeatParams{Owner: owner, TTL: ttl, Now: now})
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1, hb("a", time.Minute, t0))
	require.Equal(t, 2, hb("b", 2*time.Minute, t0))
	require.Equal(t, 2, hb("a", time.Minute, t0.Add(30*time.Second)))
	require.Equal(t, 1, hb("b", 2*time.Minute, t0.Add(91*time.Second)), "a expired")
	require.Equal(t, 0, hb("b", 0, t0.Add(92*time.Second)))
}

func TestInTxCancelAndPanic(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	effect := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (key, n) VALUES ('k', 1) ON CONFLICT (key) DO UPDATE SET n = n + 1`)
		return err
	}
	count := func() int {
		var n int
		err := b.db.QueryRow(`SELECT coalesce(sum(n), 0) FROM effects`).Scan(&n)
		require.NoError(t, err)
		return n
	}

	// A waiting caller whose context ends gives up instead of waiting for the holder.
	holding, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.store.InTx(b.ctx, func(ctx context.Context, tx *sql.Tx) error {
			close(holding)
			<-release
			return effect(ctx, tx)
		})
	}()
	<-holding
	cctx, cancel := context.WithCancel(b.ctx)
	cancel()
	err := b.store.InTx(cctx, func(context.Context, *sql.Tx) error { return nil })
	require.ErrorIs(t, err, context.Canceled)
	_, err = b.store.Heartbeat(cctx, driver.HeartbeatParams{Owner: "w", TTL: time.Minute})
	require.ErrorIs(t, err, context.Canceled)
	close(release)
	require.NoError(t, <-done)
	require.Equal(t, 1, count())

	// A panic rolls back and frees the write lock.
	require.Panics(t, func() {
		_ = b.store.InTx(b.ctx, func(ctx context.Context, tx *sql.Tx) error {
			require.NoError(t, effect(ctx, tx))
			panic("boom")
		})
	})
	require.Equal(t, 1, count())
	require.NoError(t, b.store.InTx(b.ctx, effect))
	require.Equal(t, 2, count())
}

// The adapter never needs two connections at once: a pool of one connection works for the
// producer, the relay and the inbox.
func TestSingleConnectionPool(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 4})
	b.db.SetMaxOpenConns(1)
	evs := manyEvents("one", 200, 7)
	_, err := b.write(t, evs...)
	require.NoError(t, err)

	var mu sync.Mutex
	got := map[string]bool{}
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[m.ID] = true
		}
		return make([]error, len(msgs))
	})
	relay, err := core.NewRelay(b.store, sink, core.StaticRouter{Default: "x"},
		&core.RelayOptions{PollInterval: time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()

	in, err := core.NewInbox[*sql.Tx](ctx, b.store, nil)
	require.NoError(t, err)
	for i := range 20 {
		_, err := in.Process(b.ctx, "c", core.InboxMessage{EventID: fmt.Sprint("m", i)},
			func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return relay.Stats().Published == uint64(len(evs)) },
		time.Minute, time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	require.Len(t, got, len(evs))
	mu.Unlock()
}

// Two "processes" (two *sql.DB pools and two Stores on one file, so no shared in-process
// queue) produce and relay concurrently: SQLite's busy_timeout arbitrates, nothing fails with
// SQLITE_BUSY, every event is delivered and each key's first deliveries follow write order.
func TestTwoPoolsShareFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	var stores []*sqlite.Store
	for range 2 {
		db, err := sqlite.OpenDB(ctx, path)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlite.New(db, &sqlite.Options{Lanes: 8, Logger: quiet})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		stores = append(stores, s)
	}

	var mu sync.Mutex
	firstSeen := map[string]bool{}
	order := map[string][]string{} // key -> ids in first-delivery order
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if !firstSeen[m.ID] {
				firstSeen[m.ID] = true
				order[m.PartitionKey] = append(order[m.PartitionKey], m.ID)
			}
		}
		return make([]error, len(msgs))
	})
	rctx, stop := context.WithCancel(ctx)
	var relays sync.WaitGroup
	for i, s := range stores {
		r, err := core.NewRelay(s, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
			Owner: fmt.Sprint("relay-", i), PollInterval: time.Millisecond, BatchSize: 50,
			LeaseTTL: 2 * time.Second, Logger: quiet,
		})
		require.NoError(t, err)
		relays.Go(func() {
			if err := r.Run(rctx); err != nil {
				t.Error(err)
			}
		})
	}

	const producers, perProducer, keys = 4, 100, 10
	want := map[string][]string{}
	var wantMu sync.Mutex
	var wg sync.WaitGroup
	for p := range producers {
		s := stores[p%2]
		wg.Go(func() {
			out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
			if err != nil {
				t.Error(err)
				return
			}
			for i := range perProducer {
				key := fmt.Sprint(i % keys)
				ev := event(fmt.Sprintf("p%d-%d", p, i), key)
				// Write and commit under the lock, so that per key write order is commit order.
				wantMu.Lock()
				err := func() error {
					tx, err := s.DB().BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if _, err := out.Write(ctx, tx, ev); err != nil {
						_ = tx.Rollback()
						return err
					}
					return tx.Commit()
				}()
				if err == nil {
					want["order/"+key] = append(want["order/"+key], ev.ID)
				}
				wantMu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				_ = out.Notify(ctx)
			}
		})
	}
	wg.Wait()
	require.False(t, t.Failed())
	require.Eventually(t, func() bool {
		st, err := stores[0].Stats(ctx)
		return err == nil && st.Pending == 0
	}, time.Minute, 5*time.Millisecond)
	stop()
	relays.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, firstSeen, producers*perProducer)
	require.Equal(t, want, order)
}
