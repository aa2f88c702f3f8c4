package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// earlierStore is a Store of the version before the pending layout on db (its statements are
// testdata/v009/queries.sql), migrated up to migration 010 (excluded).
func earlierStore(t *testing.T, db *sql.DB, opts mysql.Options) *mysql.Store {
	t.Helper()
	opts.Logger = quietLogger()
	s, err := mysql.New(context.Background(), db, &opts)
	require.NoError(t, err)
	require.NoError(t, s.UseEarlierQueries())
	require.NoError(t, s.MigrateBefore(context.Background(), mysql.PendingMigration))
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func countRows(t *testing.T, db *sql.DB, table string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM "+table).Scan(&n))
	return n
}

// TestPendingMigrationOnline: an outbox at migration 009 with a backlog that writers and a relay
// of the earlier version are writing and draining is migrated to 010 under them; writers and a
// relay of this version join, the earlier ones keep running for a while (as in a rolling
// upgrade: they share the lanes; the earlier writers' rows get their pending rows from the
// insert trigger, the earlier relay's marks, failures and deletes reach the pending rows through
// the update and delete triggers), an earlier cleanup runs meanwhile, then the earlier ones stop
// and a second relay of this version joins; once with an earlier relay that marks published
// rows and fails some sends, once with one that deletes them. Every committed event is
// delivered, first deliveries in write order per key (the earlier relay sends the events this
// version published once more: duplicates, never loss or reordering), and no pending row is
// left; this version's cleanup then empties the outbox and the settle log.
func TestPendingMigrationOnline(t *testing.T) {
	t.Parallel()
	for _, del := range []bool{false, true} {
		t.Run(fmt.Sprintf("delete=%v", del), func(t *testing.T) {
			t.Parallel()
			testPendingMigrationOnline(t, del)
		})
	}
}

func testPendingMigrationOnline(t *testing.T, del bool) {
	ctx := context.Background()
	db, _ := newDB(t)
	old := earlierStore(t, db, mysql.Options{Lanes: 8})
	var applied int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM outbox_meta WHERE name = 'migration:010_pending'`).Scan(&applied))
	require.Zero(t, applied)
	s, err := mysql.New(ctx, db, &mysql.Options{Lanes: 8, Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })

	written := &testkit.Written{}
	payload := make([]byte, 200)
	writer := func(store *mysql.Store, name string, stop *atomic.Bool, done *sync.WaitGroup) {
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](store), nil)
		require.NoError(t, err)
		written.Go(t, ctx, name, testkit.Writer(store, ob, 2, payload), stop, done)
	}
	relay := func(store *mysql.Store, owner string, sink core.Sink, del bool) (stop func()) {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{
			Owner: owner, BatchSize: 50, PollInterval: 5 * time.Millisecond, LeaseTTL: 2 * time.Second,
			Logger: quietLogger(), DeleteOnPublish: del, Retry: core.RetryPolicy{Initial: 100 * time.Millisecond, Max: 100 * time.Millisecond},
		})
		require.NoError(t, err)
		return testkit.StartRelay(t, ctx, r)
	}

	got := &testkit.Recorder{}
	var oldStop, newStop atomic.Bool
	var oldWriters, newWriters sync.WaitGroup
	writer(old, "earlier", &oldStop, &oldWriters)
	writer(old, "earlier-2", &oldStop, &oldWriters)
	time.Sleep(300 * time.Millisecond)
	// The earlier relays are slow and fail the last message of every seventh batch, never sent
	// (their failures update outbox rows: retries, which the migration copies and the update
	// trigger then copies to the pending rows). The first one stops sending before a burst that
	// the migration must copy (it is stopped after the migration, having sent none of it).
	var calls atomic.Int64
	var hold atomic.Bool
	slow := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		if hold.Load() {
			<-ctx.Done()
			errs := make([]error, len(msgs))
			for i := range errs {
				errs[i] = ctx.Err()
			}
			return errs
		}
		time.Sleep(100 * time.Millisecond)
		if calls.Add(1)%7 != 0 || len(msgs) == 0 {
			return got.Send(ctx, msgs)
		}
		return append(got.Send(ctx, msgs[:len(msgs)-1]), fmt.Errorf("flaky"))
	})
	stopOld := relay(old, "earlier-relay", slow, del)
	time.Sleep(300 * time.Millisecond)
	hold.Store(true)

	// The burst.
	{
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](old), nil)
		require.NoError(t, err)
		write := testkit.Writer(old, ob, 2, payload)
		for i := range 200 {
			require.NoError(t, written.Write(ctx, write, fmt.Sprintf("k%d", i%40)))
		}
	}

	// Migrate under them; this version's writers and a relay join.
	require.NoError(t, s.Migrate(ctx))
	backfilled := countRows(t, db, "outbox_pending")
	require.GreaterOrEqual(t, backfilled, int64(400), "the burst at least")
	stopOld()
	hold.Store(false)
	writer(s, "new", &newStop, &newWriters)
	stopNew := relay(s, "new-relay", got, false)
	// An earlier relay still runs beside it, sharing the lanes (its marks, failures and deletes
	// reach the pending rows through the triggers).
	stopOld = relay(old, "earlier-relay-2", slow, del)
	time.Sleep(500 * time.Millisecond)
	// The earlier version's cleanup deletes rows its relay marked (the delete trigger looks for
	// their pending rows: none, they were published).
	_, err = old.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)

	// The earlier ones stop; this version goes on alone, with a second relay.
	oldStop.Store(true)
	oldWriters.Wait()
	stopOld()
	stopNew2 := relay(s, "new-relay-2", got, false)
	time.Sleep(300 * time.Millisecond)
	newStop.Store(true)
	newWriters.Wait()
	require.False(t, t.Failed())

	got.AwaitAll(written.Total(), func() bool { return countRows(t, db, "outbox_pending") == 0 }, 60*time.Second)
	stopNew()
	stopNew2()
	dups := testkit.CheckDeliveries(t, written.ByKey(), got.Snapshot())
	t.Logf("%d events, %d pending at the migration, %d duplicates", written.Total(), backfilled, dups)

	require.Zero(t, countRows(t, db, "outbox_pending"), "every event published: no pending row left")
	// Migrate again (every deploy does) copies nothing: the events published since the migration
	// have no published_at, and a second copy would make them pending again.
	require.NoError(t, s.Migrate(ctx))
	require.Zero(t, countRows(t, db, "outbox_pending"), "migration 010 copies once")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	// This version's cleanup then removes every published row (those published before the
	// migration or by the earlier relay by their published_at, the others by their settle log
	// rows), and the settle log.
	time.Sleep(10 * time.Millisecond)
	_, err = core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	require.Zero(t, countRows(t, db, "outbox"))
	require.Zero(t, countRows(t, db, "outbox_settled"))
}
