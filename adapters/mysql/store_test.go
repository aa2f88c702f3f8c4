package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func TestNewChecksConnection(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	_, name := newDB(t)
	ctx := t.Context()
	open := func(mod func(c *mysqldrv.Config)) *sql.DB {
		c := cfg.Clone()
		c.DBName = name
		c.ParseTime = true
		mod(c)
		db, err := sql.Open("mysql", c.FormatDSN())
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	_, err := mysql.New(ctx, open(func(c *mysqldrv.Config) { c.ParseTime = false }), nil)
	require.ErrorIs(t, err, mysql.ErrConnection)
	require.Contains(t, err.Error(), "parseTime")

	if ny, lerr := time.LoadLocation("America/New_York"); lerr == nil {
		_, err = mysql.New(ctx, open(func(c *mysqldrv.Config) { c.Loc = ny }), nil)
		require.ErrorIs(t, err, mysql.ErrConnection)
		require.Contains(t, err.Error(), "loc=UTC")
	}

	_, err = mysql.New(ctx, open(func(c *mysqldrv.Config) { c.DBName = "" }), nil)
	require.ErrorIs(t, err, mysql.ErrConnection)

	s, err := mysql.New(ctx, open(func(*mysqldrv.Config) {}), nil)
	require.NoError(t, err)
	require.NoError(t, s.Version().Check())
	t.Logf("server: %s (%s)", s.Version(), s.Version().Raw)
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	s := storeOn(t, db, &mysql.Options{Lanes: 5, UniqueAggregateVersion: true})
	for range 3 {
		require.NoError(t, s.Migrate(ctx))
	}
	// A second store (another process) migrating concurrently with the same options.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s2, err := mysql.New(ctx, db, &mysql.Options{Lanes: 5, UniqueAggregateVersion: true, Logger: quietLogger()})
			if err == nil {
				err = s2.Migrate(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	var lanes, indexes int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_lanes").Scan(&lanes))
	require.Equal(t, 5, lanes)
	require.NoError(t, db.QueryRow(`SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'outbox'`).Scan(&indexes))
	require.Equal(t, 5, indexes, "PRIMARY, ux_id, ix_unpublished, ix_failed, ux_aggregate_version")
	n, err := s.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	// With UniqueAggregateVersion, the same aggregate version twice is a duplicate event;
	// version 0 (unversioned) never collides.
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	write := writeInTx(ctx, s, ob)
	ev := core.Event{AggregateType: "order", AggregateID: "1", AggregateVersion: 1, Type: "order.created"}
	require.NoError(t, write(ev))
	require.ErrorIs(t, write(ev), core.ErrDuplicateEvent)
	ev.AggregateVersion = 0
	require.NoError(t, write(ev, ev))
}

func TestLaneCountMismatch(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	storeOn(t, db, &mysql.Options{Lanes: 8})
	s2, err := mysql.New(ctx, db, &mysql.Options{Lanes: 16, Logger: quietLogger()})
	require.NoError(t, err)
	err = s2.Migrate(ctx)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	var lanes int
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_lanes").Scan(&lanes))
	require.Equal(t, 8, lanes, "a refused migration changes nothing")

	// A store that was never migrated reports the mismatch from LaneCount.
	s3, err := mysql.New(ctx, db, &mysql.Options{Table: "other", Logger: quietLogger()})
	require.NoError(t, err)
	_, err = s3.LaneCount(ctx)
	require.Error(t, err)
}

// Table names are quoted: reserved words and mixed case work, and two outboxes in one
// database stay apart.
func TestTableNames(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	a := storeOn(t, db, &mysql.Options{Table: "select", InboxTable: "Order", Lanes: 2})
	b := storeOn(t, db, &mysql.Options{Table: "Outbox_B", InboxTable: "inbox_b", Lanes: 3})
	for i, s := range []*mysql.Store{a, b} {
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
		require.NoError(t, err)
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "t", AggregateID: fmt.Sprint(i), Type: "x"})
			return err
		}))
		in, err := core.NewInbox(ctx, driver.InboxStore[*sql.Tx](s), nil)
		require.NoError(t, err)
		_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 0) // writes the horizons table
		require.NoError(t, err)
		res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", OccurredAt: time.Now()}, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome)
	}
	for _, tbl := range []string{"select", "select_lanes", "select_meta", "Order", "Order_horizons", "Outbox_B", "Outbox_B_lanes", "inbox_b"} {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM `"+tbl+"`").Scan(&n), tbl)
		require.Positive(t, n, tbl)
	}
	for _, tbl := range []string{"select_workers", "Order_versions", "Outbox_B_workers", "inbox_b_versions"} {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM `"+tbl+"`").Scan(&n), tbl)
	}
	recs, err := b.List(ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "1", recs[0].AggregateID)
}

// An Insert split over several statements is still all or nothing.
func TestInsertAllOrNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 4})
	ctx := t.Context()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	var first []core.Event
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		first, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "x", Type: "t"})
		return err
	}))
	evs := make([]core.Event, 1200)
	for i := range evs {
		evs[i] = core.Event{AggregateType: "a", AggregateID: fmt.Sprint(i % 7), Type: "t", Payload: make([]byte, 100)}
	}
	evs[1100].ID = first[0].ID // a duplicate in the third statement
	var kept int
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, evs...)
		require.ErrorIs(t, err, core.ErrDuplicateEvent)
		// The caller may go on in the same transaction: nothing of the failed Write is there.
		return tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM outbox").Scan(&kept)
	}))
	require.Equal(t, 1, kept)
	evs[1100].ID = ""
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, evs...)
		return err
	}))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1201), st.Pending)
}

// With ClaimGetLock, when the session holding a lane's lock dies, the server releases the lock
// and another worker takes the lane at once, before the lease expires; the old holder is
// fenced by the generation.
func TestGetLockHolderConnectionDies(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	a := storeOn(t, db, &mysql.Options{Lanes: 4, ClaimStrategy: mysql.ClaimGetLock})
	b, err := mysql.New(ctx, db, &mysql.Options{Lanes: 4, ClaimStrategy: mysql.ClaimGetLock, Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })

	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](a), nil)
	require.NoError(t, err)
	var evs []core.Event
	require.NoError(t, a.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		evs, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))

	old, err := a.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, old, 4)
	// While the holder's session lives, its leases cannot be taken.
	got, err := b.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, got)

	// Find and kill the session holding the locks.
	var holder sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT lock_session FROM outbox_lanes WHERE lane = 0`).Scan(&holder))
	require.True(t, holder.Valid)
	var used sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT IS_USED_LOCK(?)`, lockNameOf(t, db, 0)).Scan(&used))
	require.Equal(t, holder.Int64, used.Int64, "the recorded session holds the lane's lock")
	_, err = db.Exec(fmt.Sprintf("KILL CONNECTION %d", holder.Int64))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var u sql.NullInt64
		return db.QueryRow(`SELECT IS_USED_LOCK(?)`, lockNameOf(t, db, 0)).Scan(&u) == nil && !u.Valid
	}, 10*time.Second, 20*time.Millisecond, "the server releases the dead session's locks")

	got, err = b.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 4, "the leases are still valid, but their holder's session is gone")
	for i := range got {
		require.Equal(t, old[i].Generation+1, got[i].Generation)
	}

	// The old holder is fenced: nothing it settles changes anything.
	lane := driver.LaneOf(evs[0].PartitionKey, 4)
	var oldLease driver.Lease
	for _, l := range old {
		if l.Lane == lane {
			oldLease = l
		}
	}
	err = a.Settle(ctx, driver.SettleParams{Leases: []driver.Lease{oldLease}, Published: []int64{1}})
	var lost *driver.LanesLostError
	require.ErrorAs(t, err, &lost)
	require.Equal(t, []int{lane}, lost.Lanes)
	renewed, err := a.RenewLanes(ctx, driver.RenewParams{Leases: old, TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, renewed)
	st, err := a.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Pending)

	// The new holder works, and the old store recovers a session for new claims.
	recs, err := b.Fetch(ctx, driver.FetchParams{Leases: got, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.NoError(t, b.Settle(ctx, driver.SettleParams{Leases: got, Published: []int64{recs[0].Seq}}))
	require.NoError(t, b.ReleaseLanes(ctx, got))
	again, err := a.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, again, 4)
}

// lockNameOf returns the GET_LOCK name of a lane of table outbox in db's database.
func lockNameOf(t *testing.T, db *sql.DB, lane int) string {
	var name string
	require.NoError(t, db.QueryRow(`SELECT CONCAT('obk:', LEFT(SHA2(CONCAT(DATABASE(), '.outbox'), 256), 16), ':', ?)`, lane).Scan(&name))
	return name
}

// A real deadlock between two InTx transactions: the victim runs again and both commit; with
// retries disabled the error wraps ErrDeadlock and the driver's error 1213.
func TestDeadlock(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	s := storeOn(t, db, nil)
	_, err := db.Exec("INSERT INTO effects (name, n) VALUES ('a', 0), ('b', 0)")
	require.NoError(t, err)

	cross := func(s *mysql.Store) (runs int, errA, errB error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		barrier := make(chan struct{}, 2)
		var once sync.Once
		ready := make(chan struct{})
		step := func(first, second string) error {
			return s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				mu.Lock()
				runs++
				mu.Unlock()
				if _, err := tx.ExecContext(ctx, "UPDATE effects SET n = n + 1 WHERE name = ?", first); err != nil {
					return err
				}
				select {
				case barrier <- struct{}{}:
				default: // a rerun after the deadlock
				}
				if len(barrier) == 2 {
					once.Do(func() { close(ready) })
				}
				select { // both hold their first row (only on the first run)
				case <-ready:
				case <-time.After(2 * time.Second):
				}
				_, err := tx.ExecContext(ctx, "UPDATE effects SET n = n + 1 WHERE name = ?", second)
				return err
			})
		}
		wg.Go(func() { errA = step("a", "b") })
		wg.Go(func() { errB = step("b", "a") })
		wg.Wait()
		return runs, errA, errB
	}

	runs, errA, errB := cross(s)
	require.NoError(t, errA)
	require.NoError(t, errB)
	require.GreaterOrEqual(t, s.DeadlockRetries(), uint64(1))
	require.GreaterOrEqual(t, runs, 3)
	var a, b int
	require.NoError(t, db.QueryRow("SELECT n FROM effects WHERE name='a'").Scan(&a))
	require.NoError(t, db.QueryRow("SELECT n FROM effects WHERE name='b'").Scan(&b))
	require.Equal(t, [2]int{2, 2}, [2]int{a, b}, "each transaction committed exactly once")

	noRetry, err := mysql.New(ctx, db, &mysql.Options{DeadlockRetries: -1, Logger: quietLogger()})
	require.NoError(t, err)
	_, errA, errB = cross(noRetry)
	failed := errA
	if failed == nil {
		failed = errB
	}
	require.False(t, errA != nil && errB != nil, "one transaction wins")
	require.ErrorIs(t, failed, mysql.ErrDeadlock)
	var me *mysqldrv.MySQLError
	require.ErrorAs(t, failed, &me)
	require.Equal(t, uint16(1213), me.Number)
	require.Zero(t, noRetry.DeadlockRetries())
}

// Eight concurrent deliveries of each message apply its effect once. The deadlock retries
// this costs are counted and logged.
func TestInboxConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	in, err := core.NewInbox(ctx, driver.InboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	const deliveries, messages = 8, 40
	handlerErr := errors.New("handler failed")
	for _, mode := range []string{"plain", "versioned", "first-handler-fails"} {
		versioned := mode == "versioned"
		before := s.DeadlockRetries()
		for m := range messages {
			id := fmt.Sprintf("%s-%d", mode, m)
			var calls atomic.Int32
			msg := core.InboxMessage{EventID: id, Payload: []byte(id), OccurredAt: time.Now()}
			if versioned {
				msg.Entity, msg.Version = fmt.Sprintf("entity-%d", m%3), int64(m+1)
			}
			var wg sync.WaitGroup
			outcomes := make([]core.Outcome, deliveries)
			errs := make([]error, deliveries)
			start := make(chan struct{})
			for d := range deliveries {
				wg.Go(func() {
					<-start
					res, err := in.Process(ctx, "consumer", msg, func(ctx context.Context, tx *sql.Tx, msg core.InboxMessage) error {
						if err := effect(ctx, tx, msg.EventID); err != nil {
							return err
						}
						if mode == "first-handler-fails" && calls.Add(1) == 1 {
							time.Sleep(5 * time.Millisecond) // let the duplicates queue on the key
							return handlerErr
						}
						return nil
					})
					outcomes[d], errs[d] = res.Outcome, err
				})
			}
			close(start)
			wg.Wait()
			applied, failed := 0, 0
			for d, o := range outcomes {
				if errs[d] != nil {
					require.ErrorIs(t, errs[d], handlerErr, id)
					failed++
					continue
				}
				if o == core.Applied {
					applied++
				} else {
					require.Equal(t, core.Duplicate, o)
				}
			}
			require.Equal(t, 1, applied, id)
			if mode == "first-handler-fails" {
				require.Equal(t, 1, failed, id)
			} else {
				require.Zero(t, failed, id)
			}
			n, err := effectCount(ctx, s.DB(), id)
			require.NoError(t, err)
			require.Equal(t, 1, n, id)
		}
		t.Logf("%s: %d messages x %d concurrent deliveries: %d deadlock retries",
			mode, messages, deliveries, s.DeadlockRetries()-before)
	}
}

// A delivery that read the horizon does not hold up a concurrent PruneInbox (it takes no lock;
// see driver.InboxStore), and a later delivery reads the raised horizon.
func TestHorizonDoesNotBlockPrune(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	inTx := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := s.Horizon(ctx, tx, "c"); err != nil {
				return err
			}
			close(inTx)
			<-release
			return nil
		})
	}()
	<-inTx
	_, err := s.PruneInbox(ctx, "c", time.Now(), 100)
	close(release)
	require.NoError(t, err, "PruneInbox while a delivery is open")
	require.NoError(t, <-done)
	err = s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		h, err := s.Horizon(ctx, tx, "c")
		require.False(t, h.IsZero())
		return err
	})
	require.NoError(t, err)
}

// A stale Settle (an older lease of the same owner) does not free the lock of the owner's
// current lease of that lane.
func TestGetLockStaleSettleKeepsCurrentLock(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	s := storeOn(t, db, &mysql.Options{Lanes: 2, ClaimStrategy: mysql.ClaimGetLock})
	t0 := time.Now().UTC()
	first, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "a", Max: 2, TTL: time.Minute, Now: t0})
	require.NoError(t, err)
	require.Len(t, first, 2)
	// The lease expires and the same owner claims the lanes again (new generation).
	second, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "a", Max: 2, TTL: time.Minute, Now: t0.Add(2 * time.Minute)})
	require.NoError(t, err)
	require.Len(t, second, 2)
	require.Equal(t, first[0].Generation+1, second[0].Generation)

	err = s.Settle(ctx, driver.SettleParams{Leases: first[:1], Published: []int64{1}, Now: t0.Add(2 * time.Minute)})
	require.ErrorIs(t, err, core.ErrClaimLost)

	var holder, used sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT lock_session FROM outbox_lanes WHERE lane = ?`, first[0].Lane).Scan(&holder))
	require.NoError(t, db.QueryRow(`SELECT IS_USED_LOCK(?)`, lockNameOf(t, db, first[0].Lane)).Scan(&used))
	require.True(t, holder.Valid)
	require.Equal(t, holder, used, "the current lease keeps its lock")

	// Releasing the current lease frees the lock.
	require.NoError(t, s.ReleaseLanes(ctx, second))
	require.NoError(t, db.QueryRow(`SELECT IS_USED_LOCK(?)`, lockNameOf(t, db, first[0].Lane)).Scan(&used))
	require.False(t, used.Valid)
}

// A worker whose GET_LOCK session died does not count as live: otherwise the survivor's fair
// share (lanes / live workers) leaves the dead worker's lanes unclaimed until its heartbeat
// expires, although their locks came free at once (the cause of GET_LOCK polling relays falling
// behind when processes are killed).
func TestGetLockDeadWorkerNotLive(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	s := storeOn(t, db, &mysql.Options{Lanes: 4, ClaimStrategy: mysql.ClaimGetLock})
	live, err := s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "old", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 1, live)
	old, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, old, 4)
	live, err = s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "new", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 2, live, "the old worker's session lives")

	var holder sql.NullInt64
	require.NoError(t, db.QueryRow(`SELECT lock_session FROM outbox_lanes WHERE lane = 0`).Scan(&holder))
	_, err = db.Exec(fmt.Sprintf("KILL CONNECTION %d", holder.Int64))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		live, err = s.Heartbeat(ctx, driver.HeartbeatParams{Owner: "new", TTL: time.Hour})
		return err == nil && live == 1
	}, 10*time.Second, 20*time.Millisecond, "the dead worker no longer counts")
	got, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 4, "the survivor's share is every lane")
}

// ResetLanes under ClaimGetLock, while the old owner's process lives: its session still holds
// the lanes' GET_LOCKs, yet another worker claims the reset lanes at once, without the locks
// (lock_session NULL: a crash of the new owner would be noticed at its lease expiry); the old
// owner's renewal is refused and lets its locks go, and the new owner's next renewal takes them.
func TestGetLockResetLanes(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := t.Context()
	a := storeOn(t, db, &mysql.Options{Lanes: 2, ClaimStrategy: mysql.ClaimGetLock})
	b, err := mysql.New(ctx, db, &mysql.Options{Lanes: 2, ClaimStrategy: mysql.ClaimGetLock, Logger: quietLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	sessions := func(lane int) (recorded, holder sql.NullInt64) {
		t.Helper()
		require.NoError(t, db.QueryRow(`SELECT lock_session FROM outbox_lanes WHERE lane = ?`, lane).Scan(&recorded))
		require.NoError(t, db.QueryRow(`SELECT IS_USED_LOCK(?)`, lockNameOf(t, db, lane)).Scan(&holder))
		return recorded, holder
	}

	old, err := a.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, old, 2)
	oldSession, _ := sessions(0)
	require.True(t, oldSession.Valid)

	n, err := operatorOf(t, b).ResetLanes(ctx, driver.ResetLanesParams{Owner: "old"}, driver.AuditEntry{Actor: "t", Command: "lanes reset"})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	recorded, holder := sessions(0)
	require.False(t, recorded.Valid, "the reset clears the sign of life")
	require.Equal(t, oldSession, holder, "the old owner's session still holds the lock")

	got, err := b.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, got, 2, "claimed at once, while the old owner's session holds the locks")
	recorded, _ = sessions(0)
	require.False(t, recorded.Valid, "claimed without the lock")

	renewed, err := a.RenewLanes(ctx, driver.RenewParams{Leases: old, TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, renewed, "the old owner's renewal is refused")
	_, holder = sessions(0)
	require.False(t, holder.Valid, "and lets its locks go")

	renewed, err = b.RenewLanes(ctx, driver.RenewParams{Leases: got, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, renewed, 2)
	for lane := range 2 {
		recorded, holder = sessions(lane)
		require.True(t, recorded.Valid, "lane %d: the new owner's renewal takes the lock", lane)
		require.Equal(t, recorded, holder, "lane %d", lane)
	}
}
