package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// pendingRow is a record's pending row; ok is false when it has none.
type pendingRow struct {
	ok                bool
	lane, attempts    int
	next, parked      sql.NullTime
	lastError         sql.NullString
	key               string
	settled, outboxAt sql.NullTime // its settle log time, and the outbox row's published_at
}

func readPending(t *testing.T, db *sql.DB, seq int64) pendingRow {
	t.Helper()
	var p pendingRow
	err := db.QueryRow(`SELECT lane, attempts, next_attempt_at, parked_at, last_error, partition_key
		FROM outbox_pending WHERE seq = ?`, seq).Scan(&p.lane, &p.attempts, &p.next, &p.parked, &p.lastError, &p.key)
	if err != sql.ErrNoRows {
		require.NoError(t, err)
		p.ok = true
	}
	if err := db.QueryRow(`SELECT at FROM outbox_settled WHERE seq = ?`, seq).Scan(&p.settled); err != sql.ErrNoRows {
		require.NoError(t, err)
	}
	if err := db.QueryRow(`SELECT published_at FROM outbox WHERE seq = ?`, seq).Scan(&p.outboxAt); err != sql.ErrNoRows {
		require.NoError(t, err)
	}
	return p
}

// outboxRow is an outbox row's every column, as text, to see that it did not change.
func outboxRow(t *testing.T, db *sql.DB, seq int64) string {
	t.Helper()
	var row string
	require.NoError(t, db.QueryRow(`SELECT CONCAT_WS('|', seq, id, aggregate_type, aggregate_id, aggregate_version, type,
		schema_id, partition_key, destination, MD5(payload), headers, tenant, causation_id, correlation_id, lane,
		created_at, IFNULL(published_at, '-'), attempts, IFNULL(next_attempt_at, '-'), IFNULL(last_error, '-'),
		IFNULL(parked_at, '-')) FROM outbox WHERE seq = ?`, seq).Scan(&row))
	return row
}

// writeOne writes one event of key through s and returns its seq.
func writeOne(t *testing.T, s *mysql.Store, key string) int64 {
	t.Helper()
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	var id string
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		evs, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: key, Type: "t", PartitionKey: key, Payload: []byte("p")})
		if err == nil {
			id = evs[0].ID
		}
		return err
	}))
	var seq int64
	require.NoError(t, s.DB().QueryRow(`SELECT seq FROM outbox WHERE id = ?`, id).Scan(&seq))
	return seq
}

// The migration's triggers keep the pending rows in step with what a writer, relay or operator of
// the earlier version does to outbox rows (a bare INSERT, UPDATE or DELETE, as in
// testdata/v009/queries.sql), while this version's settles leave the outbox row as the insert
// wrote it.
func TestPendingTriggers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 4})
	db := s.DB()

	// This version's insert: the insert trigger writes the pending row in the writer's statement.
	// ka: a key whose lane under 16 lanes differs (the resize below moves it).
	ka := "ka"
	for i := 0; driver.LaneOf(ka, 4) == driver.LaneOf(ka, 16); i++ {
		ka = fmt.Sprintf("ka%d", i)
	}
	a := writeOne(t, s, ka)
	p := readPending(t, db, a)
	require.True(t, p.ok)
	require.Equal(t, driver.LaneOf(ka, 4), p.lane)
	require.Equal(t, ka, p.key)
	// An earlier writer's INSERT, and one inserted as published (no pending row).
	// Its lane is not kb's under 16 lanes: the resize below moves it.
	_, err := db.Exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at)
		VALUES ('e1', 'a', 'kb', 't', 'kb', '', '{}', ?, UTC_TIMESTAMP(6))`, (driver.LaneOf("kb", 16)+1)%4)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane, created_at, published_at)
		VALUES ('e2', 'a', 'kb', 't', 'kb', '', '{}', 2, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`)
	require.NoError(t, err)
	var e1, e2 int64
	require.NoError(t, db.QueryRow(`SELECT seq FROM outbox WHERE id = 'e1'`).Scan(&e1))
	require.NoError(t, db.QueryRow(`SELECT seq FROM outbox WHERE id = 'e2'`).Scan(&e2))
	require.True(t, readPending(t, db, e1).ok, "an earlier writer's insert")
	require.False(t, readPending(t, db, e2).ok, "inserted as published")
	// The pending row is the writer's transaction's: a rollback leaves neither row.
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	errRollback := fmt.Errorf("roll back")
	require.ErrorIs(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "r", Type: "t"}); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox_pending`).Scan(&n); err != nil {
			return err
		}
		require.Equal(t, 3, n, "the insert's pending row, in its transaction")
		return errRollback
	}), errRollback)
	var rows, pendingRows int
	require.NoError(t, db.QueryRow(`SELECT (SELECT COUNT(*) FROM outbox), (SELECT COUNT(*) FROM outbox_pending)`).Scan(&rows, &pendingRows))
	require.Equal(t, 3, rows)
	require.Equal(t, 2, pendingRows)

	// An earlier relay's failure (the outbox's status columns) reaches the pending row.
	_, err = db.Exec(`UPDATE outbox SET attempts = attempts + 1, last_error = 'boom',
		next_attempt_at = UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, parked_at = UTC_TIMESTAMP(6) WHERE seq = ?`, e1)
	require.NoError(t, err)
	p = readPending(t, db, e1)
	require.Equal(t, 1, p.attempts)
	require.Equal(t, "boom", p.lastError.String)
	require.True(t, p.next.Valid && p.parked.Valid)
	keys, err := s.ParkedKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"kb"}, keys)

	// This version's failure changes the pending row only; a lane change of the outbox row
	// (ResizeLanes, Replay) reaches the pending row without overwriting its status.
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 4, TTL: time.Minute})
	require.NoError(t, err)
	before := outboxRow(t, db, a)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Failed: []driver.Failure{{Seq: a, Error: "e", Delay: time.Hour}}}))
	require.Equal(t, before, outboxRow(t, db, a), "a failure leaves the outbox row")
	require.Equal(t, 1, readPending(t, db, a).attempts)
	require.NoError(t, s.ReleaseLanes(ctx, leases))
	moved, err := s.ResizeLanes(ctx, 16, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.NoError(t, err)
	require.Positive(t, moved)
	require.Equal(t, driver.LaneOf("kb", 16), readPending(t, db, e1).lane)
	for _, seq := range []int64{a, e1} {
		var lane int
		require.NoError(t, db.QueryRow(`SELECT lane FROM outbox WHERE seq = ?`, seq).Scan(&lane))
		p := readPending(t, db, seq)
		require.Equal(t, lane, p.lane, "the pending row's lane is the outbox row's")
		require.Equal(t, 1, p.attempts, "a lane change keeps the pending row's status")
	}
	require.Equal(t, driver.LaneOf(ka, 16), readPending(t, db, a).lane)

	// This version's mark: the settle log row is written and the pending row deleted; the outbox
	// row does not change.
	unpark, err := operatorOf(t, s).Unpark(ctx, []string{"kb"}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, unpark)
	_, err = db.Exec(`UPDATE outbox_pending SET next_attempt_at = NULL WHERE seq = ?`, a)
	require.NoError(t, err)
	leases, err = s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w2", Max: 16, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, []int64{a, e1}, []int64{recs[0].Seq, recs[1].Seq})
	require.Equal(t, 1, recs[0].Attempts, "the status comes from the pending row")
	before = outboxRow(t, db, a)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{a}}))
	require.Equal(t, before, outboxRow(t, db, a), "a mark leaves the outbox row")
	p = readPending(t, db, a)
	require.False(t, p.ok)
	require.True(t, p.settled.Valid, "a settle log row")
	require.False(t, p.outboxAt.Valid)
	got, err := s.List(ctx, driver.ListParams{State: driver.StatePublished})
	require.NoError(t, err)
	require.Len(t, got, 2) // e2 (published_at) and a (settle log)
	require.Equal(t, a, got[0].Seq)
	require.Equal(t, p.settled.Time.UTC(), got[0].PublishedAt)

	// An earlier relay's mark (published_at) deletes the pending row.
	_, err = db.Exec(`UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE seq = ? AND published_at IS NULL`, e1)
	require.NoError(t, err)
	require.False(t, readPending(t, db, e1).ok)
	// A replay gives both their pending rows back (e1 through the update trigger: its
	// published_at is cleared) and deletes a's settle log row; an earlier relay's DELETE (delete
	// on publish) takes a pending row with it.
	n, err := operatorOf(t, s).Replay(ctx, driver.ReplayParams{IDs: []string{recs[0].ID, recs[1].ID}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for _, seq := range []int64{a, e1} {
		p := readPending(t, db, seq)
		require.True(t, p.ok, "replayed")
		require.Zero(t, p.attempts, "as never attempted")
		require.False(t, p.settled.Valid || p.outboxAt.Valid)
	}
	_, err = db.Exec(`DELETE FROM outbox WHERE seq = ?`, e1)
	require.NoError(t, err)
	require.False(t, readPending(t, db, e1).ok)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), st.Pending)
	require.Equal(t, int64(1), st.Published)
}

// Cleanup deletes a record published since the migration only with its settle log row, when
// that row's time is before the cut-off and its seq below the lowest pending seq, and a record
// published before it (published_at) under the same watermark; a replayed record is pending, and
// never deleted.
func TestPruneSettleLogBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 1})
	db := s.DB()
	seqs := make([]int64, 5)
	for i := range seqs {
		seqs[i] = writeOne(t, s, "k")
	}
	// An event published before the migration (published_at, long ago).
	_, err := db.Exec(`UPDATE outbox SET published_at = UTC_TIMESTAMP(6) - INTERVAL 2 HOUR WHERE seq = ?`, seqs[0])
	require.NoError(t, err)
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: 3 * time.Hour})
	require.NoError(t, err)
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	// seqs[1] and seqs[3] published at t0; seqs[2] still pending; seqs[4] published at t0+1h.
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{seqs[1], seqs[3]}, Now: t0}))
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{seqs[4]}, Now: t0.Add(time.Hour)}))
	left := func() []int64 {
		var out []int64
		rows, err := db.Query(`SELECT seq FROM outbox ORDER BY seq`)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var v int64
			require.NoError(t, rows.Scan(&v))
			out = append(out, v)
		}
		return out
	}
	prune := func(before time.Time) int {
		n, err := s.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: before})
		require.NoError(t, err)
		return n
	}

	// A cut-off before t0 deletes only the record published two hours ago.
	require.Equal(t, 1, prune(t0.Add(-time.Minute)))
	require.Equal(t, seqs[1:], left())
	// A cut-off after t0: seqs[1] goes; seqs[3], published then too, is above the pending seqs[2].
	require.Equal(t, 1, prune(t0.Add(time.Minute)))
	require.Equal(t, seqs[2:], left())
	var logRows int64
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM outbox_settled`).Scan(&logRows))
	require.Equal(t, int64(2), logRows, "the settle log row went with its record")

	// seqs[2] published; seqs[3] replayed (pending again): nothing at or above it goes.
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{seqs[2]}, Now: t0}))
	var id3 string
	require.NoError(t, db.QueryRow(`SELECT id FROM outbox WHERE seq = ?`, seqs[3]).Scan(&id3))
	n, err := operatorOf(t, s).Replay(ctx, driver.ReplayParams{IDs: []string{id3}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, prune(t0.Add(2*time.Hour)))
	require.Equal(t, seqs[3:], left())
	// Published again at t0+1h: with a cut-off between t0 and then, it stays (its latest time
	// counts); after it, everything goes, and the settle log with it.
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{seqs[3]}, Now: t0.Add(time.Hour)}))
	require.Equal(t, 0, prune(t0.Add(time.Minute)))
	require.Equal(t, 2, prune(t0.Add(2*time.Hour)))
	require.Empty(t, left())
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM outbox_settled`).Scan(&logRows))
	require.Zero(t, logRows)
}

// Settle log rows whose outbox row is already gone (an earlier version's relay sent the record
// again and deleted it, or its cleanup did) do not stop a cleanup early: core.CleanupOutbox stops
// at the first batch that deletes fewer rows than its size, so a batch of such rows must not
// count as the end.
func TestPruneSettleLogOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 1})
	db := s.DB()
	seqs := make([]int64, 6)
	for i := range seqs {
		seqs[i] = writeOne(t, s, "k")
	}
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs}))
	// The first four records' outbox rows go as an earlier version deletes them.
	_, err = db.Exec(`DELETE FROM outbox WHERE seq <= ?`, seqs[3])
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	n, err := core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Nanosecond, BatchSize: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	var rows, logRows int
	require.NoError(t, db.QueryRow(`SELECT (SELECT COUNT(*) FROM outbox), (SELECT COUNT(*) FROM outbox_settled)`).Scan(&rows, &logRows))
	require.Zero(t, rows)
	require.Zero(t, logRows)
}

// A delete on publish deletes the pending rows itself, with one statement, and sets
// @outboxkit_unpended for its outbox DELETE only, so that the delete trigger skips its per-row
// pending delete: no pending row is left behind, the variable is cleared again on the session,
// and a bare DELETE (an earlier version's) on that session still takes the pending row.
func TestSettleDeleteUnpends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t, &mysql.Options{Lanes: 1})
	db := s.DB()
	db.SetMaxOpenConns(1) // one session: the variable would stay on it
	seqs := []int64{writeOne(t, s, "k"), writeOne(t, s, "k"), writeOne(t, s, "k")}
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs[:2], Delete: true}))
	var rows, pendingRows int
	count := func() {
		require.NoError(t, db.QueryRow(`SELECT (SELECT COUNT(*) FROM outbox), (SELECT COUNT(*) FROM outbox_pending)`).Scan(&rows, &pendingRows))
	}
	count()
	require.Equal(t, 1, rows)
	require.Equal(t, 1, pendingRows, "the published records' pending rows went with them")
	var unset bool
	require.NoError(t, db.QueryRow(`SELECT @outboxkit_unpended IS NULL`).Scan(&unset))
	require.True(t, unset, "the variable is cleared after the settle")
	_, err = db.Exec(`DELETE FROM outbox WHERE seq = ?`, seqs[2])
	require.NoError(t, err)
	count()
	require.Zero(t, rows)
	require.Zero(t, pendingRows, "a bare DELETE on the same session takes the pending row")
}

// MigrationSQL's script holds migration 010: run on an empty database it gives the pending
// layout (tables, the three triggers, the meta row of the one-time copy), Migrate then finds it
// current (it does not copy again), and a write gets its pending row.
func TestMigrationSQLPendingLayout(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	script, err := mysql.MigrationSQL(&mysql.Options{Lanes: 2})
	require.NoError(t, err)
	require.Contains(t, script, "'migration:010_pending'")
	runScript(t, db, script)
	var triggers int
	require.NoError(t, db.QueryRow(`SELECT COUNT(*) FROM information_schema.TRIGGERS
		WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'outbox' AND TRIGGER_NAME LIKE 'outbox\_p%'`).Scan(&triggers))
	require.Equal(t, 3, triggers)
	s := storeOn(t, db, &mysql.Options{Lanes: 2})
	seq := writeOne(t, s, "k")
	require.True(t, readPending(t, db, seq).ok)
}
