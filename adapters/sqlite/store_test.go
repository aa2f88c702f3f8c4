package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

type testBundle struct {
	ctx   context.Context
	store *sqlite.Store
	db    *sql.DB
	out   *core.Outbox[*sql.Tx]
}

func setup(t *testing.T, opts *sqlite.Options) *testBundle {
	t.Helper()
	ctx := context.Background()
	s := newTestStore(t, opts)
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	return &testBundle{ctx: ctx, store: s, db: s.DB(), out: out}
}

func (b *testBundle) write(t *testing.T, events ...core.Event) ([]core.Event, error) {
	t.Helper()
	tx, err := b.db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	written, err := b.out.Write(b.ctx, tx, events...)
	if err != nil {
		require.NoError(t, tx.Rollback())
		return nil, err
	}
	require.NoError(t, tx.Commit())
	return written, nil
}

func (b *testBundle) count(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRowContext(b.ctx, `SELECT count(*) FROM outbox`).Scan(&n))
	return n
}

func event(id, key string) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: key, Type: "order.created", Payload: []byte(`{"id":"` + id + `"}`)}
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 8})
	require.NoError(t, b.store.Migrate(b.ctx))
	require.NoError(t, b.store.Migrate(b.ctx))

	n, err := b.store.LaneCount(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	var lanes, versions, inboxVersions int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM outbox_lanes`).Scan(&lanes))
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM outbox_migrations`).Scan(&versions))
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM inbox_migrations`).Scan(&inboxVersions))
	require.Equal(t, 8, lanes)
	require.Equal(t, 7, versions)      // 0001_init, 0002_publisher, 0003_immutable, 0004_audit, 0005_audit_guard, 0006_lanes_resize, 0007_pending
	require.Equal(t, 2, inboxVersions) // 0001_init, 0002_scope

	// A second Store on the same database migrates concurrently without error.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := sqlite.New(b.db, &sqlite.Options{Lanes: 8})
			if err == nil {
				err = s.Migrate(b.ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

func TestMigrateConcurrentFresh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "fresh.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := sqlite.New(db, &sqlite.Options{Lanes: 5})
			if err == nil {
				err = s.Migrate(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var lanes int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM outbox_lanes`).Scan(&lanes))
	require.Equal(t, 5, lanes)
}

func TestMigrateLaneMismatch(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 8})
	other, err := sqlite.New(b.db, &sqlite.Options{Lanes: 16})
	require.NoError(t, err)
	err = other.Migrate(b.ctx)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)

	// Nothing changed: both stores report the recorded count.
	n, err := other.LaneCount(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	var lanes int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM outbox_lanes`).Scan(&lanes))
	require.Equal(t, 8, lanes)

	// Lanes left at 0 accepts the recorded count (which ResizeLanes may have changed) and
	// changes nothing.
	def, err := sqlite.New(b.db, nil)
	require.NoError(t, err)
	require.NoError(t, def.Migrate(b.ctx))
	n, err = def.LaneCount(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM outbox_lanes`).Scan(&lanes))
	require.Equal(t, 8, lanes)
}

func TestLaneCountUnmigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "empty.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, nil)
	require.NoError(t, err)
	_, err = s.LaneCount(ctx)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Second})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
}

func TestCustomTableNames(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Table: "Events_Out", InboxTable: "received", Lanes: 3})
	// A second inbox on the same outbox gets its own tables.
	second, err := sqlite.New(b.db, &sqlite.Options{Table: "Events_Out", InboxTable: "audit_inbox", Lanes: 3})
	require.NoError(t, err)
	require.NoError(t, second.Migrate(b.ctx))
	in, err := core.NewInbox[*sql.Tx](t.Context(), second, nil)
	require.NoError(t, err)
	res, err := in.Process(b.ctx, "c", core.InboxMessage{EventID: "e1"}, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	_, err = b.write(t, event("a", "1"))
	require.NoError(t, err)
	var n int
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM Events_Out`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM Events_Out_lanes`).Scan(&n))
	require.Equal(t, 3, n)
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM received_horizons`).Scan(&n))
	require.Equal(t, 0, n)
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM audit_inbox`).Scan(&n))
	require.Equal(t, 1, n)
	require.NoError(t, b.db.QueryRow(`SELECT count(*) FROM received`).Scan(&n))
	require.Equal(t, 0, n)
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	for _, tc := range []struct {
		name  string
		opts  sqlite.Options
		field string
	}{
		{"leading digit", sqlite.Options{Table: "1outbox"}, "Table"},
		{"dash", sqlite.Options{Table: "out-box"}, "Table"},
		{"quote", sqlite.Options{Table: `out"box`}, "Table"},
		{"injection", sqlite.Options{Table: "x; DROP TABLE y"}, "Table"},
		{"derived too long", sqlite.Options{Table: strings.Repeat("a", 60)}, "Table"},
		{"inbox space", sqlite.Options{InboxTable: "in box"}, "InboxTable"},
		{"same table", sqlite.Options{Table: "t", InboxTable: "T"}, "InboxTable"},
		{"collision", sqlite.Options{Table: "x", InboxTable: "x_lanes"}, "InboxTable"},
		{"collision with the inbox rebuild", sqlite.Options{Table: "inbox_new"}, "InboxTable"},
		{"negative lanes", sqlite.Options{Lanes: -1}, "Lanes"},
		{"too many lanes", sqlite.Options{Lanes: core.MaxLanes + 1}, "Lanes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := sqlite.New(db, &tc.opts)
			require.ErrorIs(t, err, core.ErrInvalidOptions)
			var oe *core.OptionError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, tc.field, oe.Field)
		})
	}
	_, err = sqlite.New(nil, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)

	s, err := sqlite.New(db, &sqlite.Options{Table: "_a1", InboxTable: "B_2"})
	require.NoError(t, err)
	require.NotNil(t, s)
	// The longest table name the earlier versions accepted (63 characters with its longest
	// derived name, "_aggregate_version") is still accepted: the pending layout's names
	// (migration 0007) are no longer.
	_, err = sqlite.New(db, &sqlite.Options{Table: strings.Repeat("a", 45)})
	require.NoError(t, err)
}

func TestOpenDBSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "dir with space?#", "x.db")
	_, err := sqlite.OpenDB(ctx, path)
	require.Error(t, err, "a missing directory is not created")

	path = filepath.Join(t.TempDir(), "odd name?#%.db")
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.FileExists(t, path)

	// Every pooled connection has the settings: hold several at once.
	conns := make([]*sql.Conn, 3)
	for i := range conns {
		conns[i], err = db.Conn(ctx)
		require.NoError(t, err)
	}
	for _, c := range conns {
		var mode string
		var busy, fk, sync int
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk))
		require.NoError(t, c.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync))
		require.Equal(t, "wal", mode)
		require.Equal(t, 10000, busy)
		require.Equal(t, 1, fk)
		require.Equal(t, 1, sync, "synchronous=NORMAL")
		require.NoError(t, c.Close())
	}

	// _txlock=immediate: a transaction holds the write lock before its first statement.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.True(t, writeLocked(t, path), "BeginTx must take the write lock (BEGIN IMMEDIATE)")
	require.NoError(t, tx.Rollback())
	require.False(t, writeLocked(t, path))

	for _, bad := range []string{"", ":memory:", "file:x.db"} {
		_, err := sqlite.OpenDB(ctx, bad)
		require.ErrorIs(t, err, core.ErrInvalidOptions, bad)
	}
}

// writeLocked reports whether another connection holds the write lock of the database at
// path: it tries BEGIN IMMEDIATE on a fresh connection that does not wait.
func writeLocked(t *testing.T, path string) bool {
	t.Helper()
	db, err := sql.Open("sqlite", sqlite.DSN(path)+"&_pragma=busy_timeout(0)")
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	c, err := db.Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
	require.NoError(t, err)
	_, err = c.ExecContext(ctx, `BEGIN IMMEDIATE`)
	if err == nil {
		_, err = c.ExecContext(ctx, `ROLLBACK`)
		require.NoError(t, err)
		return false
	}
	var se *msqlite.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, sqlite3.SQLITE_BUSY, se.Code()&0xff, "unexpected error %v", err)
	return true
}

// A caller's own *sql.DB without _txlock=immediate: the adapter's transactions still take the
// write lock first.
func TestWriteLockWithoutTxlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plain.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, &sqlite.Options{Lanes: 2})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	// A plain BeginTx on this DB is deferred: no lock yet.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.False(t, writeLocked(t, path))
	require.NoError(t, tx.Rollback())

	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		require.True(t, writeLocked(t, path), "InTx must hold the write lock from its start")
		return nil
	})
	require.NoError(t, err)
	require.False(t, writeLocked(t, path))

	// Concurrent lease changes on such a DB serialise instead of failing with SQLITE_BUSY.
	var wg sync.WaitGroup
	got := make([][]driver.Lease, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Go(func() {
			got[i], errs[i] = s.ClaimLanes(ctx, driver.ClaimParams{Owner: fmt.Sprint("w", i), Max: 1, TTL: time.Minute})
		})
	}
	wg.Wait()
	taken := map[int]string{}
	for i := range got {
		require.NoError(t, errs[i])
		for _, l := range got[i] {
			_, dup := taken[l.Lane]
			require.False(t, dup, "lane %d claimed twice", l.Lane)
			taken[l.Lane] = l.Owner
		}
	}
	require.Len(t, taken, 2)
}

func TestInsertDuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.write(t, event("dup-1", "k"))
	require.NoError(t, err)

	_, err = b.write(t, event("other", "k"), event("dup-1", "k2"))
	require.ErrorIs(t, err, core.ErrDuplicateEvent)
	require.Equal(t, 1, b.count(t), "the batch with a duplicate wrote nothing")

	// The error is usable inside a transaction that goes on.
	tx, err := b.db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.out.Write(b.ctx, tx, event("dup-1", "k"))
	require.ErrorIs(t, err, core.ErrDuplicateEvent)
	_, err = b.out.Write(b.ctx, tx, event("fresh", "k"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, b.count(t))
}

func TestInsertUniqueAggregateVersion(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{UniqueAggregateVersion: true})
	ev := event("v1", "agg")
	ev.AggregateVersion = 1
	_, err := b.write(t, ev)
	require.NoError(t, err)
	ev.ID = "v1-again"
	_, err = b.write(t, ev)
	require.ErrorIs(t, err, core.ErrDuplicateEvent)
	// Unversioned events never collide.
	_, err = b.write(t, event("u1", "agg"), event("u2", "agg"))
	require.NoError(t, err)
	require.Equal(t, 3, b.count(t))

	plain := setup(t, nil)
	_, err = plain.write(t, ev)
	require.NoError(t, err)
	ev.ID = "v1-third"
	_, err = plain.write(t, ev)
	require.NoError(t, err, "without the option, versions are not unique")
}

// manyEvents returns n events over keys partition keys, ids prefix-0..n-1.
func manyEvents(prefix string, n, keys int) []core.Event {
	evs := make([]core.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("%s-%d", prefix, i), fmt.Sprint(i%keys))
	}
	return evs
}

// 5,000 events need 75,000 bound parameters, more than SQLite's 32,766: Insert splits them
// into several statements and must still write all or nothing.
func TestInsertAtomicAcrossChunks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.write(t, event("taken", "k"))
	require.NoError(t, err)

	evs := manyEvents("big", 5000, 100)
	evs[4999].ID = "taken" // fails in the last chunk
	tx, err := b.db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.out.Write(b.ctx, tx, evs...)
	require.ErrorIs(t, err, core.ErrDuplicateEvent)
	// The transaction is still usable and holds none of the 4,999 earlier rows.
	var inTx int
	require.NoError(t, tx.QueryRowContext(b.ctx, `SELECT count(*) FROM outbox`).Scan(&inTx))
	require.Equal(t, 1, inTx)
	_, err = b.out.Write(b.ctx, tx, event("after", "k"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, 2, b.count(t))

	// Without the duplicate all 5,000 are written, in order.
	evs[4999].ID = "big-last"
	_, err = b.write(t, evs...)
	require.NoError(t, err)
	require.Equal(t, 5002, b.count(t))
	recs, err := b.store.List(b.ctx, driver.ListParams{Limit: 10000})
	require.NoError(t, err)
	require.Len(t, recs, 5002)
	for i, r := range recs[2:] {
		require.Equal(t, evs[i].ID, r.ID)
		if i > 0 {
			require.Greater(t, r.Seq, recs[i+1].Seq)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t, &sqlite.Options{Lanes: 16})
	before := time.Now().Add(-time.Second)
	full := core.Event{
		ID: "full", AggregateType: "order", AggregateID: "o-1", AggregateVersion: 7,
		Type: "order.paid", SchemaID: "order.v2", PartitionKey: "pk-1", Destination: "billing",
		Payload: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"trace": "abc", "x-y": "z"},
		Tenant: "acme", CausationID: "c-1", CorrelationID: "r-1",
	}
	bare := core.Event{AggregateType: "user", AggregateID: "u", Type: "user.seen"}
	written, err := b.write(t, full, bare)
	require.NoError(t, err)

	recs, err := b.store.List(b.ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	// Write added the transaction group headers; everything else is as given.
	require.Equal(t, written[0], recs[0].Event)
	require.Equal(t, "abc", recs[0].Headers["trace"])
	full.Headers = recs[0].Headers
	require.Equal(t, full, recs[0].Event)
	require.Equal(t, driver.LaneOf("pk-1", 16), recs[0].Lane)
	require.Equal(t, written[1], recs[1].Event)
	require.Nil(t, recs[1].Payload)
	require.Equal(t, []string{core.HeaderTxCount, core.HeaderTxID, core.HeaderTxIndex}, slices.Sorted(maps.Keys(recs[1].Headers)))
	for _, r := range recs {
		require.Equal(t, time.UTC, r.CreatedAt.Location())
		require.True(t, r.CreatedAt.After(before))
		require.True(t, r.PublishedAt.IsZero())
		require.True(t, r.NextAttemptAt.IsZero())
		require.True(t, r.ParkedAt.IsZero())
	}
	require.Less(t, recs[0].Seq, recs[1].Seq)
}

// Producers may write through their own *sql.DB on the same file.
func TestInsertThroughAnotherDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	db1, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db1.Close() })
	db2, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db2.Close() })
	s, err := sqlite.New(db1, &sqlite.Options{Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	// Warm the Store's statement cache on db1 first.
	_, err = s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "w", TTL: time.Minute})
	require.NoError(t, err)

	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	for _, n := range []int{1, 3} {
		tx, err := db2.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = out.Write(ctx, tx, manyEvents(fmt.Sprint("db2-", n), n, 2)...)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 4, st.Pending)
}
