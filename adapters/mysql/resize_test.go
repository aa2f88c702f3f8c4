package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func resizeEvent(id string) core.Event {
	return core.Event{AggregateType: "a", AggregateID: id, Type: "t", Payload: []byte("{}")}
}

// laneOfKey returns the lanes of key's records, in seq order.
func laneOfKey(t *testing.T, s *mysql.Store, key string) []int {
	t.Helper()
	recs, err := s.List(context.Background(), driver.ListParams{State: driver.StateAll})
	require.NoError(t, err)
	var out []int
	for _, r := range recs {
		if r.PartitionKey == key {
			out = append(out, r.Lane)
		}
	}
	require.NotEmpty(t, out, "no record of key %s", key)
	return out
}

// waitLockWait waits until a session waits for a row lock of a table of db's database, for at
// most 3 s: it only widens the window in which a writer and a resize overlap, the outcome does not
// depend on it. (INNODB_TRX's trx_mysql_thread_id is not always the PROCESSLIST ID of the waiting
// session on MariaDB 10.11, so the lock's table names the database.)
func waitLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		var n int
		require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM information_schema.INNODB_LOCK_WAITS AS w"+
			" JOIN information_schema.INNODB_LOCKS AS l ON l.lock_id = w.requested_lock_id"+
			" WHERE l.lock_table LIKE CONCAT('`', DATABASE(), '`.%')").Scan(&n))
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Log("no session waits for a lock")
}

// TestResizeWriterIsolation: a checked insert never commits a row in a lane of the old count,
// whatever its isolation and snapshot, with the driver's interpolation or server-side prepared
// statements. A writer that waits for a resize in progress (the count's meta row locked FOR
// UPDATE, the new count written, not yet committed) reads the committed new count (a locking
// read), is refused and writes again in the same transaction with the new count; a resize waits
// for a writer transaction that inserted.
func TestResizeWriterIsolation(t *testing.T) {
	t.Parallel()
	for _, interpolate := range []bool{true, false} {
		name := "prepared"
		if interpolate {
			name = "interpolated"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db, _ := newDB(t)
			if !interpolate {
				cfg := testConfig(t)
				var dbName string
				require.NoError(t, db.QueryRow("SELECT DATABASE()").Scan(&dbName))
				c := cfg.Clone()
				c.DBName, c.ParseTime, c.Loc, c.InterpolateParams = dbName, true, time.UTC, false
				var err error
				db, err = sql.Open("mysql", c.FormatDSN())
				require.NoError(t, err)
				t.Cleanup(func() { _ = db.Close() })
			}
			testResizeWriterIsolation(t, db)
		})
	}
}

func testResizeWriterIsolation(t *testing.T, db *sql.DB) {
	ctx := context.Background()
	s := storeOn(t, db, &mysql.Options{Lanes: 8})
	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)

	to := 8
	for _, c := range []struct {
		name   string
		iso    sql.IsolationLevel
		events int
	}{
		{"rr-one", sql.LevelRepeatableRead, 1}, {"rc-one", sql.LevelReadCommitted, 1},
		{"rr-many", sql.LevelRepeatableRead, 3}, {"serializable-one", sql.LevelSerializable, 1},
	} {
		to += 3
		rz, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rz.Rollback() }) // after a failure: never leave it open
		var v string
		require.NoError(t, rz.QueryRow("SELECT value FROM outbox_meta WHERE name = 'lanes' FOR UPDATE").Scan(&v))
		_, err = rz.Exec("UPDATE outbox_meta SET value = ? WHERE name = 'lanes'", to)
		require.NoError(t, err)

		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: c.iso})
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() })
		// Takes the snapshot (under REPEATABLE READ) before the resize commits.
		require.NoError(t, tx.QueryRow("SELECT COUNT(*) FROM outbox").Scan(new(int)))
		done := make(chan error, 1)
		go func() {
			evs := make([]core.Event, c.events)
			for i := range evs {
				evs[i] = resizeEvent(c.name)
			}
			_, err := ob.Write(ctx, tx, evs...)
			if err == nil {
				err = tx.Commit()
			} else {
				_ = tx.Rollback()
			}
			done <- err
		}()
		waitLockWait(t, db)
		require.NoError(t, rz.Commit())
		require.NoError(t, <-done, c.name)
		for _, l := range laneOfKey(t, s, "a/"+c.name) {
			require.Equal(t, driver.LaneOf("a/"+c.name, to), l, c.name)
		}
		require.Len(t, laneOfKey(t, s, "a/"+c.name), c.events, c.name)
		require.Equal(t, to, ob.Lanes(), c.name)
	}

	// ResizeLanes waits for a writer transaction that inserted, and moves its row.
	key := keyWithLaneChange(to, 40)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: key[2:], Type: "t", Payload: []byte("{}")})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := s.ResizeLanes(ctx, 40, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
		done <- err
	}()
	waitLockWait(t, db)
	require.NoError(t, tx.Commit())
	require.NoError(t, <-done)
	require.Equal(t, []int{driver.LaneOf(key, 40)}, laneOfKey(t, s, key))
}

// keyWithLaneChange returns a partition key "a/..." whose lane differs between from and to lanes.
func keyWithLaneChange(from, to int) string {
	key := "a/k"
	for driver.LaneOf(key, from) == driver.LaneOf(key, to) {
		key += "x"
	}
	return key
}

// TestInsertLanesRefused: a checked insert with a stale count writes nothing, returns
// core.ErrLaneCountChanged and leaves tx usable; with the current count it writes. Also in a
// session without strict mode (sql_mode ”), where a multi-row INSERT would store a NULL lane
// as 0 instead of refusing it.
func TestInsertLanesRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 8})
	for _, mode := range []string{"@@GLOBAL.sql_mode", "''"} {
		for _, n := range []int{1, 3} {
			agg := strconv.Itoa(n) + mode
			recs := make([]driver.Record, n)
			for i := range recs {
				recs[i] = driver.Record{Event: core.Event{ID: "id-" + strconv.Itoa(n) + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(len(mode)),
					AggregateType: "a", AggregateID: agg, Type: "t", PartitionKey: "a/x", Payload: []byte("{}")}, Lane: driver.LaneOf("a/x", 8)}
			}
			// No require inside the transaction: a failure must not leave it open (it would hold
			// the database's DROP at cleanup).
			var refused error
			rows := -1
			require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.Exec("SET SESSION sql_mode = " + mode); err != nil {
					return err
				}
				refused = s.InsertLanes(ctx, tx, 16, recs)
				if err := tx.QueryRow("SELECT COUNT(*) FROM outbox WHERE aggregate_id = ?", agg).Scan(&rows); err != nil {
					return err
				}
				if err := s.InsertLanes(ctx, tx, 8, recs); err != nil {
					return err
				}
				_, err := tx.Exec("SET SESSION sql_mode = @@GLOBAL.sql_mode") // the pooled connection's default again
				return err
			}))
			require.ErrorIs(t, refused, core.ErrLaneCountChanged, "sql_mode %s", mode)
			require.Equal(t, 0, rows, "a refused insert writes nothing (sql_mode %s)", mode)
		}
	}
	var rows int
	require.NoError(t, s.DB().QueryRow("SELECT COUNT(*) FROM outbox").Scan(&rows))
	require.Equal(t, 8, rows)
	require.NoError(t, s.DB().QueryRow("SELECT COUNT(*) FROM outbox WHERE lane <> ?", driver.LaneOf("a/x", 8)).Scan(&rows))
	require.Zero(t, rows, "every row in its key's lane")
	require.ErrorIs(t, s.InsertLanes(ctx, nil, 8, nil), core.ErrInvalidTx)
}

// TestResizeLanes: the store's side of the contract (driver.LaneResizer) that the conformance
// suite does not see: lease fencing, lane rows, parked and retrying rows, Replay after a resize,
// Migrate after a resize, the CDC refusal and the migration 008 upgrade.
func TestResizeLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s := storeOn(t, db, &mysql.Options{Lanes: 8})
	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	pub, park, retry := keyWithLaneChange(8, 32), keyWithLaneChange(8, 32)+"p", keyWithLaneChange(8, 32)+"r"
	for driver.LaneOf(park, 8) == driver.LaneOf(park, 32) {
		park += "p"
	}
	for driver.LaneOf(retry, 8) == driver.LaneOf(retry, 32) {
		retry += "r"
	}
	for _, k := range []string{pub, park, retry} {
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, resizeEvent(k[2:]), resizeEvent(k[2:]))
			return err
		}))
	}
	_, err = db.Exec("UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE partition_key = ?", pub)
	require.NoError(t, err)
	_, err = db.Exec("UPDATE outbox SET parked_at = UTC_TIMESTAMP(6), next_attempt_at = UTC_TIMESTAMP(6), attempts = 1 WHERE partition_key = ?", park)
	require.NoError(t, err)
	_, err = db.Exec("UPDATE outbox SET next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, attempts = 1 WHERE partition_key = ?", retry)
	require.NoError(t, err)

	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w1", Max: 8, TTL: time.Minute})
	require.NoError(t, err)
	require.NotEmpty(t, leases)

	for _, bad := range []int{0, -1, core.MaxLanes + 1} {
		_, err := s.ResizeLanes(ctx, bad, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
		var oe *core.OptionError
		require.True(t, errors.As(err, &oe), "%d: %v", bad, err)
	}
	n, err := s.ResizeLanes(ctx, 8, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.NoError(t, err)
	require.Equal(t, 0, n)

	n, err = s.ResizeLanes(ctx, 32, driver.AuditEntry{Actor: "t", Command: "lanes resize", Arguments: `{"lanes":32}`})
	require.NoError(t, err)
	require.Equal(t, 4, n, "the parked and retrying rows moved; published rows stay")
	require.Equal(t, []int{driver.LaneOf(pub, 8), driver.LaneOf(pub, 8)}, laneOfKey(t, s, pub))
	require.Equal(t, []int{driver.LaneOf(park, 32), driver.LaneOf(park, 32)}, laneOfKey(t, s, park))
	require.Equal(t, []int{driver.LaneOf(retry, 32), driver.LaneOf(retry, 32)}, laneOfKey(t, s, retry))
	var lanes, owned, resizeRows int
	require.NoError(t, db.QueryRow("SELECT COUNT(*), COUNT(NULLIF(owner, '')) FROM outbox_lanes").Scan(&lanes, &owned))
	require.Equal(t, 32, lanes)
	require.Equal(t, 0, owned, "every lease ended")
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_meta WHERE name = 'lanes_resize'").Scan(&resizeRows))
	require.Equal(t, 0, resizeRows)
	// The old leases are fenced: settling a batch fetched under them is refused.
	var parkSeq int64
	require.NoError(t, db.QueryRow("SELECT MIN(seq) FROM outbox WHERE partition_key = ?", park).Scan(&parkSeq))
	err = s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{parkSeq}})
	require.ErrorIs(t, err, core.ErrClaimLost)
	log, err := operatorOf(t, s).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, log, 1, "refused and same-count resizes write no audit row")
	require.Equal(t, "lanes resize", log[0].Command)
	require.EqualValues(t, 4, log[0].Rows)
	// Without the marker row the trigger still refuses a lane change.
	_, err = db.Exec("UPDATE outbox SET lane = lane + 1 WHERE partition_key = ?", park)
	var me *mysqldrv.MySQLError
	require.True(t, errors.As(err, &me) && me.Number == 1644, "%v", err)

	// Replay puts the published rows back in their key's lane under the current count.
	got, err := operatorOf(t, s).Replay(ctx, driver.ReplayParams{PartitionKey: pub, Audit: &driver.AuditEntry{Actor: "t", Command: "replay"}})
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Equal(t, []int{driver.LaneOf(pub, 32), driver.LaneOf(pub, 32)}, laneOfKey(t, s, pub))

	// Migrate after a resize: Lanes 0 keeps the recorded count; another count is refused.
	s0, err := mysql.New(ctx, db, &mysql.Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s0.Migrate(ctx))
	c, err := s0.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 32, c)
	s8, err := mysql.New(ctx, db, &mysql.Options{Lanes: 8, Logger: quietLogger()})
	require.NoError(t, err)
	require.ErrorIs(t, s8.Migrate(ctx), core.ErrSchemaMismatch)
	require.NoError(t, db.QueryRow("SELECT COUNT(*) FROM outbox_lanes").Scan(&lanes))
	require.Equal(t, 32, lanes)

	// Shrinking drops lane rows.
	_, err = s.ResizeLanes(ctx, 3, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.NoError(t, err)
	require.NoError(t, db.QueryRow("SELECT COUNT(*), MAX(lane) FROM outbox_lanes").Scan(&lanes, &owned))
	require.Equal(t, 3, lanes)
	require.Equal(t, 2, owned)

	// A CDC publisher generation refuses, changing nothing.
	_, err = db.Exec("UPDATE outbox_pub SET kind = 'cdc', holder = 'cdc-1', generation = generation + 1")
	require.NoError(t, err)
	_, err = s.ResizeLanes(ctx, 5, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.ErrorIs(t, err, core.ErrResizeCDC)
	c, err = s.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, c)
}

// TestResizeMigration: Migrate gives an outbox whose trigger predates migration 008 the lane
// exemption (ResizeLanes refuses before), once: a second Migrate leaves the trigger as it is.
func TestResizeMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := newDB(t)
	s := storeOn(t, db, &mysql.Options{Lanes: 8})
	old, err := os.ReadFile("migrations/005_immutable.sql")
	require.NoError(t, err)
	body := string(old)
	body = body[strings.Index(body, "CREATE TRIGGER"):]
	body = strings.NewReplacer("{{outbox_immutable}}", "`outbox_imm`", "{{outbox}}", "`outbox`").Replace(body)
	_, err = db.Exec("DELETE FROM outbox_meta WHERE name = 'migration:008_lanes_resize'")
	require.NoError(t, err)
	_, err = db.Exec("DROP TRIGGER outbox_imm")
	require.NoError(t, err)
	_, err = db.Exec(body)
	require.NoError(t, err)

	_, err = s.ResizeLanes(ctx, 16, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.NoError(t, s.Migrate(ctx))
	var created1, created2 time.Time
	trigger := "SELECT CREATED FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = 'outbox_imm'"
	require.NoError(t, db.QueryRow(trigger).Scan(&created1))
	time.Sleep(20 * time.Millisecond) // CREATED has centisecond precision
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, db.QueryRow(trigger).Scan(&created2))
	require.Equal(t, created1, created2, "Migrate recreated a current trigger")
	_, err = s.ResizeLanes(ctx, 16, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.NoError(t, err)
}
