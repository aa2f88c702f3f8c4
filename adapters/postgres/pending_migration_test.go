package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlfile"
	"github.com/outboxkit/outbox/internal/testkit"
)

// earlierStore is a Store of the version before the pending layout: its writer, relay and
// cleanup statements are those of testdata/v0007/queries.sql (the earlier queries.sql), and it
// migrates to 0007 only. The Go code around the statements did not change for them.
func earlierStore(t *testing.T, d *testDB, opts Options) *Store[pgx.Tx] {
	t.Helper()
	opts.Schema = d.schema
	s, err := New(d.pool, &opts)
	require.NoError(t, err)
	st, err := sqlfile.Load(os.DirFS("testdata/v0007"), "queries.sql", s.n.idents())
	require.NoError(t, err)
	s.q.insert, s.q.insertChecked = st.Get("Insert"), st.Get("InsertChecked")
	s.q.insertOne, s.q.insertOneChecked = "", "" // the earlier version had no single-record statements
	s.q.fetch, s.q.settleMark, s.q.settleDelete = st.Get("Fetch"), st.Get("SettleMark"), st.Get("SettleDelete")
	s.q.pruneOutbox = st.Get("PruneOutbox")
	s.q.dropLegacy = "SELECT 1" // the earlier Migrate kept every index
	var ms []migration          // the earlier version's: without 0008 and the migrations after it on the outbox
	for _, m := range s.q.migrations {
		if !slices.Contains([]string{"migration:0008_pending", "migration:0010_fetch_jit", "migration:0011_drain_cost"}, m.name) {
			ms = append(ms, m)
		}
	}
	require.Len(t, ms, len(s.q.migrations)-3)
	s.q.migrations = ms
	return s
}

// TestPendingMigrationOnline: an outbox at migration 0007 with a backlog that writers and a relay
// of the earlier version are writing and draining is migrated to 0008 under them; writers and
// relays of this version join, the earlier ones keep running for a while (as in a rolling
// upgrade: they share the lanes, the earlier writers' rows get their pending rows from the
// migration's trigger), an earlier cleanup runs meanwhile, then the earlier ones stop; once with
// an earlier relay that marks published rows, once with one that deletes them (the trigger
// deletes their pending rows: they were published). Every
// committed event is delivered, first deliveries in write order per key (the earlier relay's
// marks are not seen by this version's relays: duplicates, never loss or reordering), and the
// pending table ends empty.
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
	d := newTestDB(t, dbOptions{maxConns: 16})
	opts := Options{Lanes: 8}
	old := earlierStore(t, d, opts)
	require.NoError(t, old.Migrate(ctx))
	var applied int
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_meta WHERE name = 'migration:0008_pending'`).Scan(&applied))
	require.Zero(t, applied)
	s, err := New(d.pool, &Options{Schema: d.schema, Lanes: 8})
	require.NoError(t, err)

	written := &testkit.Written{}
	payload := make([]byte, 200)
	writer := func(store *Store[pgx.Tx], name string, stop *atomic.Bool, done *sync.WaitGroup) {
		ob, err := core.NewOutbox(ctx, store, nil)
		require.NoError(t, err)
		written.Go(t, ctx, name, testkit.Writer(store, ob, 2, payload), stop, done)
	}
	relay := func(store *Store[pgx.Tx], owner string, sink core.Sink, del bool) (stop func()) {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{
			Owner: owner, BatchSize: 50, PollInterval: 5 * time.Millisecond, LeaseTTL: 2 * time.Second,
			Logger: slog.New(slog.DiscardHandler), DeleteOnPublish: del,
		})
		require.NoError(t, err)
		return testkit.StartRelay(t, ctx, r)
	}

	got := &testkit.Recorder{}
	// The earlier version: a backlog, then a relay draining it while writers go on.
	var oldStop, newStop atomic.Bool
	var oldWriters, newWriters sync.WaitGroup
	writer(old, "earlier", &oldStop, &oldWriters)
	writer(old, "earlier-2", &oldStop, &oldWriters)
	time.Sleep(300 * time.Millisecond)
	// The earlier relay is slow (a backlog remains at the migration).
	slow := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		time.Sleep(50 * time.Millisecond)
		return got.Send(ctx, msgs)
	})
	stopOld := relay(old, "earlier-relay", slow, del)
	time.Sleep(300 * time.Millisecond)

	// A burst the earlier relay cannot have drained when the migration copies the backlog.
	{
		ob, err := core.NewOutbox(ctx, old, nil)
		require.NoError(t, err)
		write := testkit.Writer(old, ob, 2, payload)
		for i := range 100 {
			require.NoError(t, written.Write(ctx, write, fmt.Sprintf("k%d", i%40)))
		}
	}

	// Migrate under them; this version's writers and a relay join.
	require.NoError(t, s.Migrate(ctx))
	var backfilled int64
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&backfilled))
	var legacy bool // the earlier relay's fetch still has its index
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT to_regclass('outbox_pending_idx') IS NOT NULL`).Scan(&legacy))
	require.True(t, legacy, "an upgraded outbox keeps the earlier layout's pending index")
	require.Positive(t, backfilled, "a backlog at the migration")
	writer(s, "new", &newStop, &newWriters)
	stopNew := relay(s, "new-relay", got, false)
	time.Sleep(500 * time.Millisecond)
	// The earlier version's cleanup deletes rows its relay marked (the trigger takes their pending
	// rows along: they were published).
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

	// All seen, and no pending row left: an event the earlier relay sent but did not settle
	// before it stopped is seen already, and sent again by this version's relays.
	got.AwaitAll(written.Total(), func() bool {
		var left int64
		require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&left))
		return left == 0
	}, 30*time.Second)
	stopNew()
	stopNew2()
	dups := testkit.CheckDeliveries(t, written.ByKey(), got.Snapshot())
	t.Logf("%d events, %d pending at the migration, %d duplicates", written.Total(), backfilled, dups)

	var pending int64
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&pending))
	require.Zero(t, pending, "every event published: no pending row left")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	// This version's cleanup then removes every published row, and the settle log below them.
	_, err = core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	time.Sleep(10 * time.Millisecond)
	_, err = core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	var rows, logRows int64
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox), (SELECT count(*) FROM outbox_settled)`).Scan(&rows, &logRows))
	require.Zero(t, rows)
	require.Zero(t, logRows)
}

// The migration's trigger serves writers and relays of the earlier version only: this version's
// insert, delete-on-publish settle and cleanup never call its function (they set
// outboxkit.pending_layout, which its WHEN clause reads), while a bare INSERT and DELETE (what an
// earlier version runs) do, and get the pending row written and removed.
func TestPendingTriggerOnlyForEarlierVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 1})
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	// calls runs fn in a transaction that counts PL/pgSQL function calls and returns the calls of
	// the trigger's function it made (the difference of the counters around it: they also hold
	// the backend's unflushed counts of earlier transactions).
	calls := func(fn func(tx pgx.Tx) error) int64 {
		var before, after int64
		const count = `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
			WHERE funcname = 'outbox_pending_sync'`
		require.NoError(t, pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, count).Scan(&before); err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				return err
			}
			return tx.QueryRow(ctx, count).Scan(&after)
		}))
		return after - before
	}
	pending := func() int64 {
		var n int64
		require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&n))
		return n
	}
	require.Zero(t, calls(func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"},
			core.Event{AggregateType: "a", AggregateID: "2", Type: "t"})
		return err
	}), "this version's insert")
	require.EqualValues(t, 2, pending())
	require.EqualValues(t, 1, calls(func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane)
			VALUES ('earlier-1', 'a', '3', 't', 'a/3', 0)`)
		return err
	}), "an earlier version's insert")
	require.EqualValues(t, 3, pending())
	require.EqualValues(t, 1, calls(func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM outbox WHERE id = 'earlier-1'`)
		return err
	}), "an earlier version's delete")
	require.EqualValues(t, 2, pending())

	// A delete-on-publish settle and a cleanup of this version.
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Zero(t, calls(func(tx pgx.Tx) error {
		lanes, owners, gens := leaseArrays(leases)
		_, err := tx.Exec(ctx, s.q.settleDelete, lanes, owners, gens, nil, []int64{recs[0].Seq},
			[]int64{}, []string{}, []int64{}, []bool{}, false)
		return err
	}), "this version's delete-on-publish settle")
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[1].Seq}}))
	require.Zero(t, pending())
	require.Zero(t, calls(func(tx pgx.Tx) error {
		n, err := s.txq(tx).exec(ctx, s.q.pruneOutbox, time.Now().Add(time.Hour), int64(1)<<62, 100)
		require.EqualValues(t, 1, n)
		return err
	}), "this version's cleanup")
}

// Cleanup's bound in the pending layout: a row published before migration 0008 goes when its
// published_at is before the cut-off (and no later settle log entry lists it, as after a
// replay); a row published since goes when no settle log entry at or after the cut-off lists a
// seq at or below it. A row published before the migration but after the cut-off stays, however
// far later settles push the log's bound.
func TestPruneSettleLogBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 1})
	var now time.Time
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	// Published before the migration: one long ago, one recently (after the cut-off below).
	for _, r := range []struct {
		id string
		at time.Time
	}{{"pre-old", now.Add(-3 * time.Hour)}, {"pre-recent", now.Add(-time.Minute)}} { // in this seq order
		_, err := d.pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane, published_at)
			VALUES ($1, 'a', $1, 't', 'k', 0, $2)`, r.id, r.at)
		require.NoError(t, err)
	}
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	write := func(id string) {
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{ID: id, AggregateType: "a", AggregateID: id, Type: "t", PartitionKey: "k"})
			return err
		}))
	}
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	publish := func(at time.Time) {
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10, Now: at})
		require.NoError(t, err)
		require.Len(t, recs, 1)
		require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[0].Seq}, Now: at}))
	}
	write("new-old")
	publish(now.Add(-2 * time.Hour))
	write("new-recent")
	publish(now)
	ids := func() []string {
		rows, err := d.pool.Query(ctx, `SELECT id FROM outbox ORDER BY seq`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	// The publication times read back: published_at, then the settle log's.
	recs, err := s.List(ctx, driver.ListParams{State: driver.StatePublished})
	require.NoError(t, err)
	require.Len(t, recs, 4)
	for i, want := range []time.Time{now.Add(-3 * time.Hour), now.Add(-time.Minute), now.Add(-2 * time.Hour), now} {
		require.WithinDuration(t, want, recs[i].PublishedAt, time.Millisecond, recs[i].ID)
	}

	cut := now.Add(-time.Hour)
	n, err := s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: cut})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"pre-recent", "new-recent"}, ids(), "published after the cut-off")

	// A replay of pre-recent published again long after: its new entry keeps it past its
	// published_at.
	_, err = operatorOf(t, s).Replay(ctx, driver.ReplayParams{IDs: []string{"pre-recent"}})
	require.NoError(t, err)
	publish(now.Add(time.Hour))
	n, err = s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(30 * time.Minute)})
	require.NoError(t, err)
	require.Zero(t, n, "pre-recent was published again after the cut-off, and new-recent lies above it")
	n, err = s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	var logRows int64
	_, err = s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_settled`).Scan(&logRows))
	require.Zero(t, logRows, "the settle log goes with the rows")
}

// MigrationSQL's script (run in one transaction by a migration tool) gives the pending layout
// without the earlier layout's indexes, and Migrate then finds the outbox current.
func TestMigrationSQLPendingLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	script, err := MigrationSQL(&Options{Schema: d.schema, Lanes: 4})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, script, pgx.QueryExecModeSimpleProtocol)
		return err
	}))
	s, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	var migrations int
	var legacy, pending bool
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_meta WHERE name LIKE 'migration:%'),
		to_regclass('outbox_pending_idx') IS NOT NULL, to_regclass('outbox_pending') IS NOT NULL`).Scan(&migrations, &legacy, &pending))
	require.Equal(t, 11, migrations)
	require.False(t, legacy)
	require.True(t, pending)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Pending)
}

// What List reports of a published record in the pending layout: the time of its latest
// publication (a replay's, not the first one's, whatever the settle log entries' seq ranges),
// and the status of a record the relay published, not the status columns an upgraded outbox
// row kept from before migration 0008 (a record parked then, unparked and published since).
func TestListPublishedAfterReplayAndUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 1})
	var now time.Time
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))
	// As an earlier version left them: "pre" published at now-3h after two failures, "parked"
	// parked (the migration copied its status into its pending row, as the trigger does here).
	_, err := d.pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane,
		published_at, attempts, last_error) VALUES ('pre', 'a', 'pre', 't', 'p', 0, $1, 2, 'old failure')`, now.Add(-3*time.Hour))
	require.NoError(t, err)
	_, err = d.pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane,
		attempts, last_error, parked_at, next_attempt_at) VALUES ('parked', 'a', 'parked', 't', 'q', 0, 1, 'boom', $1, $1)`, now.Add(-2*time.Hour))
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	write := func(ids ...string) {
		evs := make([]core.Event, len(ids))
		for i, id := range ids {
			evs[i] = core.Event{ID: id, AggregateType: "a", AggregateID: id, Type: "t", PartitionKey: "k"}
		}
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error { _, err := ob.Write(ctx, tx, evs...); return err }))
	}
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	publish := func(at time.Time, want int) {
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10, Now: at})
		require.NoError(t, err)
		require.Len(t, recs, want)
		seqs := make([]int64, len(recs))
		for i, r := range recs {
			seqs[i] = r.Seq
		}
		require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs, Now: at}))
	}
	_, err = s.Unpark(ctx, "q")
	require.NoError(t, err)
	publish(now.Add(-50*time.Minute), 1) // "parked", unparked
	write("k1")
	publish(now.Add(-40*time.Minute), 1)
	write("k2")
	publish(now.Add(-30*time.Minute), 1)
	write("k3", "k4")
	publish(now.Add(-20*time.Minute), 2)

	audit := &driver.AuditEntry{Actor: "t", Command: "replay", Arguments: "{}"}
	n, err := operatorOf(t, s).Replay(ctx, driver.ReplayParams{PartitionKey: "k", Since: now.Add(-time.Hour), Audit: audit})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	n, err = operatorOf(t, s).Replay(ctx, driver.ReplayParams{IDs: []string{"pre"}, Audit: audit})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	publish(now.Add(-10*time.Minute), 5)

	recs, err := s.List(ctx, driver.ListParams{State: driver.StatePublished})
	require.NoError(t, err)
	require.Len(t, recs, 6)
	want := map[string]time.Time{"pre": now.Add(-10 * time.Minute), "parked": now.Add(-50 * time.Minute),
		"k1": now.Add(-10 * time.Minute), "k2": now.Add(-10 * time.Minute), "k3": now.Add(-10 * time.Minute), "k4": now.Add(-10 * time.Minute)}
	for _, r := range recs {
		require.WithinDuration(t, want[r.ID], r.PublishedAt, time.Millisecond, r.ID)
		require.Zero(t, r.Attempts, r.ID)
		require.Empty(t, r.LastError, r.ID)
		require.True(t, r.ParkedAt.IsZero(), r.ID)
		require.True(t, r.NextAttemptAt.IsZero(), r.ID)
	}
}
