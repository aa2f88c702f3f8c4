package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlfile"
	"github.com/outboxkit/outbox/internal/testkit"
)

// earlierStore is a Store of the version before the pending layout, on its own pool (another
// process): its writer, relay and cleanup statements are those of testdata/v0006/queries.sql
// (main's queries.sql before migration 0007). The Go code around them is unchanged but for the
// mark, one statement then (Publish), which PublishDequeue's slot turns into a no-op here.
func earlierStore(t *testing.T, path string, opts Options) *Store {
	t.Helper()
	db, err := OpenDB(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	opts.Logger = slog.New(slog.DiscardHandler)
	s, err := New(db, &opts)
	require.NoError(t, err)
	st, err := sqlfile.Load(os.DirFS("testdata/v0006"), "queries.sql", s.n.idents())
	require.NoError(t, err)
	s.q.insertPrefix = st.Get("InsertPrefix")
	s.q.fetch, s.q.publish, s.q.deletePublished = st.Get("Fetch"), st.Get("Publish"), st.Get("DeletePublished")
	s.q.publishDequeue = `SELECT 1 WHERE ?1 IS NULL AND ?2 IS NULL`
	s.q.fail, s.q.minPending, s.q.prune = st.Get("Fail"), st.Get("MinPending"), st.Get("Prune")
	return s
}

// migrateEarlier is the earlier version's Migrate: the outbox migrations before 0007 (the
// earlier version had no others), none of the indexes dropped, the lanes seeded.
func migrateEarlier(t *testing.T, s *Store, lanes int) {
	t.Helper()
	ctx := context.Background()
	_, err := s.db.ExecContext(ctx, s.q.bootstrap)
	require.NoError(t, err)
	require.NoError(t, s.writeTx(ctx, func(tx *sql.Tx) error {
		for i, dir := range migrationSets {
			migs, err := loadMigrations(dir)
			if err != nil {
				return err
			}
			for _, m := range migs {
				if i == 0 && m.version >= 7 {
					break
				}
				text, err := s.n.idents().Expand(m.sql)
				if err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, text); err != nil {
					return fmt.Errorf("%s: %w", m.name, err)
				}
				if _, err := tx.ExecContext(ctx, s.q.recordVersion[i], m.version, m.name, 0); err != nil {
					return err
				}
			}
		}
		if _, err := tx.ExecContext(ctx, s.q.setLanes, lanes); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.seedLanes, lanes)
		return err
	}))
}

func countRows(t *testing.T, db *sql.DB, q string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(q).Scan(&n))
	return n
}

// TestPendingMigrationOnline: an outbox of the earlier version (migrations up to 0006) with a
// backlog that writers and a relay of the earlier version are writing and draining is migrated
// to 0007 under them; a writer and a relay of this version join, the earlier ones keep running
// for a while (a rolling upgrade: they share the lanes, the earlier writers' rows get their
// queue rows from the insert trigger as this version's do, the earlier relay's marks or
// deletes dequeue through the triggers), an earlier cleanup runs meanwhile, then the earlier
// ones stop; once with an earlier relay that marks published rows, once with one that deletes
// them. Every committed event is delivered, first deliveries in write order per key
// (duplicates allowed: this version never sets published_at, so the earlier relay sends again
// what this version's relay published), and the queue ends empty; this version's cleanup then
// removes every row and publication row.
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
	path := filepath.Join(t.TempDir(), "upgrade.db")
	const lanes = 4
	old := earlierStore(t, path, Options{Lanes: lanes})
	migrateEarlier(t, old, lanes)
	db, err := OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Lanes: lanes, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)

	written := &testkit.Written{}
	payload := make([]byte, 200)
	writer := func(store *Store, name string, stop *atomic.Bool, done *sync.WaitGroup) {
		ob, err := core.NewOutbox(ctx, store, nil)
		require.NoError(t, err)
		written.Go(t, ctx, name, testkit.Writer(store, ob, 2, payload), stop, done)
	}
	relay := func(store *Store, owner string, sink core.Sink, del bool) (stop func()) {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{
			Owner: owner, BatchSize: 50, PollInterval: 5 * time.Millisecond, LeaseTTL: 2 * time.Second,
			Logger: slog.New(slog.DiscardHandler), DeleteOnPublish: del,
		})
		require.NoError(t, err)
		return testkit.StartRelay(t, ctx, r)
	}

	got := &testkit.Recorder{}
	begin := time.Now()
	phase := func(name string) { t.Logf("%v: %s", time.Since(begin), name) }
	var oldStop, newStop atomic.Bool
	var oldWriters, newWriters sync.WaitGroup
	writer(old, "earlier", &oldStop, &oldWriters)
	writer(old, "earlier-2", &oldStop, &oldWriters)
	time.Sleep(200 * time.Millisecond)
	// The earlier relay is slow (a backlog remains at the migration).
	slow := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		time.Sleep(30 * time.Millisecond)
		return got.Send(ctx, msgs)
	})
	stopOld := relay(old, "earlier-relay", slow, del)
	time.Sleep(200 * time.Millisecond)
	{ // a burst the earlier relay cannot have drained when the migration copies the backlog
		ob, err := core.NewOutbox(ctx, old, nil)
		require.NoError(t, err)
		write := testkit.Writer(old, ob, 2, payload)
		for i := range 100 {
			require.NoError(t, written.Write(ctx, write, fmt.Sprintf("k%d", i%40)))
		}
	}

	// Migrate under them; this version's writer and relay join.
	phase("migrate")
	require.NoError(t, s.Migrate(ctx))
	phase("migrated")
	backfilled := countRows(t, db, `SELECT count(*) FROM outbox_queue`)
	require.Positive(t, backfilled, "a backlog at the migration")
	require.EqualValues(t, 3, countRows(t, db, `SELECT count(*) FROM sqlite_schema WHERE type = 'index'
		AND name IN ('outbox_pending', 'outbox_blocked', 'outbox_published')`),
		"an upgraded outbox keeps the earlier layout's indexes for the earlier relays")
	writer(s, "new", &newStop, &newWriters)
	stopNew := relay(s, "new-relay", got, false)
	time.Sleep(400 * time.Millisecond)
	// The earlier version's cleanup deletes rows its relay marked (the delete trigger takes their
	// publication rows along).
	_, err = old.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)

	// The earlier ones stop; this version goes on alone, with a second relay.
	phase("earlier prune done")
	oldStop.Store(true)
	oldWriters.Wait()
	phase("earlier writers stopped")
	stopOld()
	phase("earlier relay stopped")
	stopNew2 := relay(s, "new-relay-2", got, false)
	time.Sleep(200 * time.Millisecond)
	newStop.Store(true)
	newWriters.Wait()
	require.False(t, t.Failed())

	got.AwaitAll(written.Total(), func() bool { return countRows(t, db, `SELECT count(*) FROM outbox_queue`) == 0 }, 30*time.Second)
	stopNew()
	stopNew2()
	dups := testkit.CheckDeliveries(t, written.ByKey(), got.Snapshot())
	t.Logf("%d events, %d queued at the migration, %d duplicates", written.Total(), backfilled, dups)

	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox_queue`), "every event published: no queue row left")
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox AS o
		WHERE NOT EXISTS (SELECT 1 FROM outbox_publications AS d WHERE d.seq = o.seq)`),
		"every remaining row has its publication time")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Pending)
	require.Zero(t, st.Parked)
	// This version's cleanup then removes every published row, and their publication rows.
	time.Sleep(time.Millisecond)
	_, err = core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox`))
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox_publications`))
}

// TestPendingMigrationBackfill: the migration copies every unpublished row's status into the
// queue (a retry time, a park) and every published row's time into the publications, and
// leaves the published rows out of the queue. Afterwards this version's relay delivers exactly
// the unpublished events, in order per key, honouring the copied retry time and park, plus
// what an earlier writer wrote since; nothing published before is sent again.
func TestPendingMigrationBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "backfill.db")
	old := earlierStore(t, path, Options{Lanes: 2})
	migrateEarlier(t, old, 2)
	ob, err := core.NewOutbox(ctx, old, nil)
	require.NoError(t, err)
	seqOf := map[string]int64{}
	idOf := map[int64]string{}
	write := func(store *Store, ob *core.Outbox[*sql.Tx], ids ...string) {
		for _, id := range ids {
			require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				_, err := ob.Write(ctx, tx, core.Event{ID: id, AggregateType: "o", AggregateID: id[:1], Type: "t", PartitionKey: id[:1]})
				return err
			}))
		}
	}
	var order []string
	for i := 1; i <= 5; i++ {
		for _, k := range []string{"a", "b", "c"} {
			order = append(order, fmt.Sprintf("%s%d", k, i))
		}
	}
	write(old, ob, order...)
	// The earlier relay: a1, b1, c1 published, b2 to be retried in an hour, c2 parked.
	t0 := time.Now()
	leases, err := old.ClaimLanes(ctx, driver.ClaimParams{Owner: "earlier", Max: 2, TTL: time.Hour, Now: t0})
	require.NoError(t, err)
	recs, err := old.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100, Now: t0})
	require.NoError(t, err)
	require.Len(t, recs, 15)
	for _, r := range recs {
		seqOf[r.ID], idOf[r.Seq] = r.Seq, r.ID
	}
	require.NoError(t, old.Settle(ctx, driver.SettleParams{Leases: leases, Now: t0,
		Published: []int64{seqOf["a1"], seqOf["b1"], seqOf["c1"]},
		Failed: []driver.Failure{{Seq: seqOf["b2"], Delay: time.Hour, Error: "later"},
			{Seq: seqOf["c2"], Park: true, Error: "poison"}}}))
	require.NoError(t, old.ReleaseLanes(ctx, leases))

	db, err := OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Lanes: 2, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	require.EqualValues(t, 12, countRows(t, db, `SELECT count(*) FROM outbox_queue`))
	require.EqualValues(t, 3, countRows(t, db, `SELECT count(*) FROM outbox_publications`))
	pub, err := s.List(ctx, driver.ListParams{State: driver.StatePublished})
	require.NoError(t, err)
	require.Len(t, pub, 3)
	for _, r := range pub {
		require.WithinDuration(t, t0, r.PublishedAt, time.Millisecond, r.ID)
	}
	parked, err := s.List(ctx, driver.ListParams{State: driver.StateParked})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	require.Equal(t, "c2", parked[0].ID)
	require.Equal(t, "poison", parked[0].LastError)
	require.Equal(t, 1, parked[0].Attempts)

	// An earlier writer goes on after the migration.
	write(old, ob, "a6", "b6", "c6")

	var sent []string
	drain := func(now time.Time) {
		leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 2, TTL: time.Hour, Now: now})
		require.NoError(t, err)
		for {
			recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 4, Now: now})
			require.NoError(t, err)
			if len(recs) == 0 {
				break
			}
			seqs := make([]int64, len(recs))
			for i, r := range recs {
				seqs[i] = r.Seq
				sent = append(sent, r.ID)
			}
			require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs, Now: now}))
		}
		require.NoError(t, s.ReleaseLanes(ctx, leases))
	}
	byKey := func() map[string][]string {
		m := map[string][]string{}
		for _, id := range sent {
			m[id[:1]] = append(m[id[:1]], id)
		}
		return m
	}
	drain(t0.Add(time.Minute))
	require.Equal(t, map[string][]string{"a": {"a2", "a3", "a4", "a5", "a6"}}, byKey(), "b waits for b2's retry, c behind parked c2")
	drain(t0.Add(2 * time.Hour))
	require.Equal(t, []string{"b2", "b3", "b4", "b5", "b6"}, byKey()["b"])
	require.Empty(t, byKey()["c"])
	n, err := s.Unpark(ctx, "c")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	drain(t0.Add(2 * time.Hour))
	require.Equal(t, []string{"c2", "c3", "c4", "c5", "c6"}, byKey()["c"])
	require.Len(t, sent, 15, "each unpublished event once, none published before the migration")
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox_queue`))
}

// TestPendingTriggers: the triggers of migration 0007 keep the queue and publications right for
// what an earlier version runs (bare INSERT, UPDATE of published_at or of the status columns,
// a lane change, DELETE), and this version's writer, relay, operator and cleanup never update
// an outbox row (a trigger that refuses every UPDATE of the outbox is installed for them).
func TestPendingTriggers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "triggers.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Lanes: 1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.ExecContext(ctx, q, args...)
		require.NoError(t, err)
	}
	type state struct {
		Queued              bool
		Lane, Attempts      int64
		Parked, PublishedAt sql.NullInt64
		LastError           string
	}
	get := func(id string) state {
		t.Helper()
		var st state
		var q sql.NullInt64
		var lane, attempts sql.NullInt64
		var lastErr sql.NullString
		require.NoError(t, db.QueryRowContext(ctx, `SELECT p.seq, p.lane, p.attempts, p.parked_at, p.last_error, d.at
			FROM outbox AS o LEFT JOIN outbox_queue AS p ON p.seq = o.seq LEFT JOIN outbox_publications AS d ON d.seq = o.seq
			WHERE o.id = ?`, id).Scan(&q, &lane, &attempts, &st.Parked, &lastErr, &st.PublishedAt))
		st.Queued, st.Lane, st.Attempts, st.LastError = q.Valid, lane.Int64, attempts.Int64, lastErr.String
		return st
	}
	const ins = `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane, created_at, published_at)
		VALUES (?, 'a', ?, 't', ?, 0, 1, ?)`
	exec(ins, "e1", "k1", "k1", nil)
	require.Equal(t, state{Queued: true}, get("e1"), "an earlier writer's INSERT is queued")
	exec(ins, "e2", "k2", "k2", 42)
	require.Equal(t, state{PublishedAt: sql.NullInt64{Int64: 42, Valid: true}}, get("e2"), "inserted as published")
	exec(`UPDATE outbox SET attempts = 3, last_error = 'x', parked_at = 7 WHERE id = 'e1'`)
	require.Equal(t, state{Queued: true, Attempts: 3, LastError: "x", Parked: sql.NullInt64{Int64: 7, Valid: true}}, get("e1"), "an earlier failure")
	exec(`UPDATE outbox SET published_at = 99 WHERE id = 'e1'`)
	require.Equal(t, state{PublishedAt: sql.NullInt64{Int64: 99, Valid: true}}, get("e1"), "an earlier mark")
	exec(`UPDATE outbox SET published_at = NULL, attempts = 0, last_error = '', parked_at = NULL WHERE id = 'e1'`)
	require.Equal(t, state{Queued: true}, get("e1"), "an earlier replay")
	exec(`INSERT INTO outbox_meta (name, value) VALUES ('lanes_resize', 1);
		UPDATE outbox SET lane = 5 WHERE id = 'e1';
		DELETE FROM outbox_meta WHERE name = 'lanes_resize'`)
	require.Equal(t, state{Queued: true, Lane: 5}, get("e1"), "a lane change")
	exec(`DELETE FROM outbox WHERE id IN ('e1', 'e2')`)
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox_queue`)+countRows(t, db, `SELECT count(*) FROM outbox_publications`),
		"an earlier delete takes the queue and publication rows along")

	// This version: no outbox row is ever updated.
	exec(`CREATE TRIGGER no_update BEFORE UPDATE ON outbox BEGIN SELECT RAISE(ABORT, 'outbox row updated'); END`)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{ID: "n1", AggregateType: "a", AggregateID: "1", Type: "t"},
			core.Event{ID: "n2", AggregateType: "a", AggregateID: "2", Type: "t"},
			core.Event{ID: "n3", AggregateType: "a", AggregateID: "3", Type: "t"})
		return err
	}))
	require.True(t, get("n1").Queued)
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 3)
	now := time.Now()
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Now: now, Published: []int64{recs[0].Seq},
		Failed: []driver.Failure{{Seq: recs[1].Seq, Park: true, Error: "p"}, {Seq: recs[2].Seq, Delay: time.Hour, Error: "r"}}}))
	require.Equal(t, state{PublishedAt: sql.NullInt64{Int64: now.UnixMicro(), Valid: true}}, get("n1"))
	require.Equal(t, int64(1), get("n2").Attempts)
	require.True(t, get("n2").Parked.Valid)
	_, err = s.Unpark(ctx, "a/2")
	require.NoError(t, err)
	_, err = operatorOf(t, s).Replay(ctx, driver.ReplayParams{IDs: []string{"n1"}})
	require.NoError(t, err)
	require.Equal(t, state{Queued: true}, get("n1"), "a replay forgets the publication")
	recs, err = s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10, Now: now.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Len(t, recs, 3)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[0].Seq}, Delete: true}))
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[1].Seq, recs[2].Seq}, Now: now}))
	n, err := s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, q := range []string{`SELECT count(*) FROM outbox`, `SELECT count(*) FROM outbox_queue`, `SELECT count(*) FROM outbox_publications`} {
		require.Zero(t, countRows(t, db, q), q)
	}
}

// TestPruneRetentionBound: cleanup in the pending layout deletes a row only when it is
// published (no queue row), published before the cut-off (its publication row's time, or the
// earlier layout's published_at it was copied from) and below the lowest queued seq: never a
// queued row, nor one published after the cut-off, whatever lies around them.
func TestPruneRetentionBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "prune.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Lanes: 1, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	now := time.Now()
	// Published by hand (as before the migration): one long ago, one recently.
	for _, r := range []struct {
		id string
		at time.Time
	}{{"pre-old", now.Add(-3 * time.Hour)}, {"pre-recent", now.Add(-time.Minute)}} {
		_, err := db.ExecContext(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane, created_at, published_at)
			VALUES (?, 'a', ?, 't', ?, 0, 1, ?)`, r.id, r.id, r.id, r.at.UnixMicro())
		require.NoError(t, err)
	}
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	write := func(id string) {
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{ID: id, AggregateType: "a", AggregateID: id, Type: "t", PartitionKey: id})
			return err
		}))
	}
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: 10 * time.Hour, Now: now.Add(-5 * time.Hour)})
	require.NoError(t, err)
	publish := func(id string, at time.Time) {
		recs, err := s.List(ctx, driver.ListParams{State: driver.StatePending})
		require.NoError(t, err)
		for _, r := range recs {
			if r.ID == id {
				require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{r.Seq}, Now: at}))
				return
			}
		}
		t.Fatalf("%s not pending", id)
	}
	ids := func() []string {
		rows, err := db.QueryContext(ctx, `SELECT id FROM outbox ORDER BY seq`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			out = append(out, id)
		}
		return out
	}
	write("new-old")
	write("new-recent")
	write("queued")
	write("after-queued")
	publish("new-old", now.Add(-2*time.Hour))
	publish("new-recent", now)
	publish("after-queued", now.Add(-2*time.Hour)) // above a queued row
	recs, err := s.List(ctx, driver.ListParams{State: driver.StatePublished})
	require.NoError(t, err)
	require.Len(t, recs, 5)
	for i, want := range []time.Time{now.Add(-3 * time.Hour), now.Add(-time.Minute), now.Add(-2 * time.Hour), now, now.Add(-2 * time.Hour)} {
		require.WithinDuration(t, want, recs[i].PublishedAt, time.Microsecond, recs[i].ID)
	}

	n, err := s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"pre-recent", "new-recent", "queued", "after-queued"}, ids(),
		"published after the cut-off, queued, or above a queued row")
	require.EqualValues(t, 3, countRows(t, db, `SELECT count(*) FROM outbox_publications`))

	// Once the queued row is published (after the cut-off) and the cut-off moves past it all.
	publish("queued", now)
	n, err = s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(-time.Hour)})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"pre-recent", "new-recent", "queued"}, ids())
	n, err = s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: now.Add(time.Second)})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Empty(t, ids())
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM outbox_publications`))
}
