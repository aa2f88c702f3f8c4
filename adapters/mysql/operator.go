package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The steps of the operator commands (driver.OperatorTx) that core.Operator runs in one
// transaction: SQL and scanning only. The commands' rules (checks, refusals, audit, wake-ups)
// are core.Operator's.

// Interface checks.
var (
	_ driver.OperatorStore      = (*Store)(nil)
	_ driver.CheckpointReleaser = (*Store)(nil)
	_ driver.AuditWriter        = (*Store)(nil)
	_ driver.LaneResizer        = (*Store)(nil)
)

// InOperatorTx implements driver.OperatorStore: one READ COMMITTED transaction (the isolation
// of every lanes-table transaction: readCommitted), run again when the server chose it as a
// deadlock victim (inTx).
func (s *Store) InOperatorTx(ctx context.Context, fn func(ctx context.Context, tx driver.OperatorTx) error) error {
	var fnErr error
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		fnErr = fn(ctx, &opTx{s: s, tx: tx})
		return fnErr
	})
	if err != nil && !errors.Is(err, fnErr) {
		return wrap("operator transaction", err)
	}
	return err
}

// ListAudit implements driver.OperatorStore.
func (s *Store) ListAudit(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	rows, err := s.db.QueryContext(ctx, s.q.auditList, auditListParams{Since: sinceArg(p.Since), Limit: p.Limit}.args()...)
	if err != nil {
		return nil, wrap("audit log", err)
	}
	defer rows.Close()
	var out []driver.AuditEntry
	for rows.Next() {
		var e driver.AuditEntry
		if err := rows.Scan(&e.ID, &e.At, &e.Actor, &e.Command, &e.Arguments, &e.Rows); err != nil {
			return nil, wrap("audit log", err)
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("audit log", err)
	}
	return out, nil
}

// PublishRate implements driver.StatusReader from the settle log (migration 010): the most
// recent entries by seq (its primary key; the log has no index on its time, and a relay
// publishes each lane in seq order, so the highest seqs are about the latest published), at
// most limit of them, those of the last window counted. A record replayed and published again
// keeps its low seq and may be missed. ok is false, with nothing else read, before migration
// 010.
func (s *Store) PublishRate(ctx context.Context, window time.Duration, limit int) (rate float64, ok bool, err error) {
	var v string
	switch err := s.db.QueryRowContext(ctx, s.q.metaGet, metaGetParams{Name: pendingMarker}.args()...).Scan(&v); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, wrap("publish rate", err)
	}
	var n int64
	var oldest sql.NullTime
	var now time.Time
	if err := s.db.QueryRowContext(ctx, s.q.publishedRecent, publishedRecentParams{Limit: limit, Window: micros(window)}.args()...).Scan(&n, &oldest, &now); err != nil {
		return 0, false, wrap("publish rate", err)
	}
	if n >= int64(limit) {
		window = max(now.Sub(nullTime(oldest)), time.Millisecond)
	}
	return float64(n) / window.Seconds(), true, nil
}

// sinceArg is a lower time bound: the zero time is the Unix epoch (before any row).
func sinceArg(t time.Time) any {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	return timeArg(t)
}

// opTx is driver.OperatorTx in a transaction of s.
type opTx struct {
	s     *Store
	tx    *sql.Tx
	lanes int // the lane count read LOCK IN SHARE MODE (Unpark), 0 until read
}

// BeginReplay reads the lane count LOCK IN SHARE MODE, as a checked insert does: no resize runs
// until the replay ends, and the replay waits for one in progress. A cleanup cannot delete the
// rows the replay locks (ReplayTargets), and checks a record's settle log row again on the
// locked row (PruneSettled).
func (t *opTx) BeginReplay(ctx context.Context) (int, error) {
	n, err := t.s.readLanes(ctx, t.tx, t.s.q.laneCountShared)
	if err != nil {
		return 0, wrap("lane count", err)
	}
	t.lanes = n
	return n, nil
}

// BeginResize checks migration 008 and locks the lane count's meta row FOR UPDATE: it waits for
// the writer transactions whose checked inserts hold it LOCK IN SHARE MODE, and holds the next
// ones back.
func (t *opTx) BeginResize(ctx context.Context) (int, error) {
	var marker string
	if err := t.tx.QueryRowContext(ctx, t.s.q.metaGet, metaGetParams{Name: resizeMarker}.args()...).Scan(&marker); errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("mysql: resize lanes: %w", t.s.notMigrated("migration 008_lanes_resize"))
	} else if err != nil {
		return 0, wrap("resize lanes", err)
	}
	n, err := t.s.readLanes(ctx, t.tx, t.s.q.laneCountLocked)
	return n, wrap("lane count", err)
}

// Publisher implements driver.OperatorTx: read LOCK IN SHARE MODE (a CDC relay's
// AcquireGeneration waits for the transaction).
func (t *opTx) Publisher(ctx context.Context) (driver.Publisher, error) {
	pub, err := scanPublisher(t.tx.QueryRowContext(ctx, t.s.q.publisherReadShared))
	if err != nil {
		return driver.Publisher{}, t.s.publisherErr("publisher", err)
	}
	return pub, nil
}

// ReplayTargets implements driver.OperatorTx: the rows locked FOR UPDATE.
func (t *opTx) ReplayTargets(ctx context.Context, p driver.ReplayParams, limit int) ([]driver.ReplayTarget, error) {
	var rows *sql.Rows
	var err error
	if len(p.IDs) > 0 {
		query, args := replayByIDsParams{IDs: p.IDs}.query(t.s.q.replayByIDs)
		rows, err = t.tx.QueryContext(ctx, query, args...)
	} else {
		rows, err = t.tx.QueryContext(ctx, t.s.q.replayByKey, replayByKeyParams{PartitionKey: p.PartitionKey, Since: sinceArg(p.Since), Limit: limit}.args()...)
	}
	if err != nil {
		return nil, wrap("replay targets", err)
	}
	defer rows.Close()
	var targets []driver.ReplayTarget
	for rows.Next() {
		var x driver.ReplayTarget
		if err := rows.Scan(&x.Seq, &x.ID, &x.PartitionKey, &x.Published); err != nil {
			return nil, wrap("replay targets", err)
		}
		targets = append(targets, x)
	}
	return targets, wrap("replay targets", rows.Err())
}

// KeyUnpublished implements driver.OperatorTx.
func (t *opTx) KeyUnpublished(ctx context.Context, key string) (bool, error) {
	var pending bool
	err := t.tx.QueryRowContext(ctx, t.s.q.keyUnpublished, keyUnpublishedParams{PartitionKey: key}.args()...).Scan(&pending)
	return pending, wrap("replay", err)
}

// Requeue implements driver.OperatorTx: records published before migration 010 lose their
// published_at (the update trigger gives them their pending rows), the others get theirs, as
// never attempted; their settle log rows go; and each gets its Lane (a row published before a
// ResizeLanes has its lane under the old count) under the meta row the immutability trigger
// allows a lane change under.
func (t *opTx) Requeue(ctx context.Context, rows []driver.ReplayTarget) (int64, error) {
	seqs := make([]int64, len(rows))
	to := make([]int, len(rows))
	for i, r := range rows {
		seqs[i], to[i] = r.Seq, r.Lane
	}
	var n int64
	for _, stmt := range []func() (string, []any){
		func() (string, []any) { return replayParams{Seqs: seqs}.query(t.s.q.replay) },
		func() (string, []any) { return replayPendingParams{Seqs: seqs}.query(t.s.q.replayPending) },
	} {
		query, args := stmt()
		res, err := t.tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, wrap("replay", err)
		}
		m, err := res.RowsAffected()
		if err != nil {
			return 0, wrap("replay", err)
		}
		n += m
	}
	query, args := replayUnsettleParams{Seqs: seqs}.query(t.s.q.replayUnsettle)
	if _, err := t.tx.ExecContext(ctx, query, args...); err != nil {
		return 0, wrap("replay", err)
	}
	if _, err := t.tx.ExecContext(ctx, t.s.q.resizeAllow); err != nil {
		return 0, wrap("replay", err)
	}
	if _, err := t.s.moveLanes(ctx, t.tx, seqs, to); err != nil {
		return 0, wrap("replay", err)
	}
	if _, err := t.tx.ExecContext(ctx, t.s.q.resizeDisallow); err != nil {
		return 0, wrap("replay", err)
	}
	return n, nil
}

// Unpark implements driver.OperatorTx. The key's lane is computed from the lane count read LOCK
// IN SHARE MODE (once per transaction), so that no resize moves the key meanwhile.
func (t *opTx) Unpark(ctx context.Context, key string) (int64, error) {
	if t.lanes == 0 {
		if _, err := t.BeginReplay(ctx); err != nil {
			return 0, err
		}
	}
	res, err := t.tx.ExecContext(ctx, t.s.q.unpark, unparkParams{Lane: driver.LaneOf(key, t.lanes), PartitionKey: key}.args()...)
	if err != nil {
		return 0, wrap("unpark", err)
	}
	n, err := res.RowsAffected()
	return n, wrap("unpark", err)
}

// PruneOutbox implements driver.OperatorTx: as Store.PruneOutbox, in the transaction.
func (t *opTx) PruneOutbox(ctx context.Context, p driver.PruneParams) (int64, error) {
	if p.PublishedBefore.IsZero() {
		return 0, nil
	}
	below, err := t.s.pruneBelow(ctx, t.tx, p)
	if err != nil {
		return 0, wrap("prune outbox", err)
	}
	n, err := t.s.pruneBatch(ctx, t.tx, p, below)
	return n, wrap("prune outbox", err)
}

// ResetLanes implements driver.OperatorTx: one statement (ResetLanes).
func (t *opTx) ResetLanes(ctx context.Context, p driver.ResetLanesParams) (int64, error) {
	query, args := resetLanesParams{All: len(p.Lanes) == 0, Lanes: p.Lanes, Owner: p.Owner}.query(t.s.q.resetLanes)
	res, err := t.tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, wrap("reset lanes", err)
	}
	n, err := res.RowsAffected()
	return n, wrap("reset lanes", err)
}

// resizeBatch is how many unpublished rows a resize reads, and moves with one statement, at a
// time (3 placeholders per row, far below the 65,535 of a prepared statement).
const resizeBatch = 2000

// ResizeLanes implements driver.OperatorTx: every lane row locked in lane order and its lease
// ended as ResetLanes does, lane rows dropped or added, the unpublished rows (pending, retrying,
// parked) moved resizeBatch at a time to LaneOf(key, to) while the meta row 'lanes_resize'
// exists (the immutability trigger allows the lane change then; migration 008), and the count
// recorded.
func (t *opTx) ResizeLanes(ctx context.Context, from, to int) (int64, error) {
	moved, err := t.resize(ctx, from, to)
	return moved, wrap("resize lanes", err)
}

func (t *opTx) resize(ctx context.Context, from, to int) (int64, error) {
	tx, q := t.tx, &t.s.q
	if _, err := tx.ExecContext(ctx, q.resizeLeases, resizeLeasesParams{}.args()...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, q.resizeDropLanes, resizeDropLanesParams{Lanes: to}.args()...); err != nil {
		return 0, err
	}
	if err := t.s.insertLanes(ctx, tx, from, to); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, q.resizeAllow); err != nil {
		return 0, err
	}
	var moved int64
	for after := int64(0); ; {
		rows, err := tx.QueryContext(ctx, q.resizeRows, resizeRowsParams{After: after, Limit: resizeBatch}.args()...)
		if err != nil {
			return 0, err
		}
		var seqs []int64
		var lanes []int
		read := 0
		for rows.Next() {
			read++
			var seq int64
			var key string
			var lane int
			if err := rows.Scan(&seq, &key, &lane); err != nil {
				rows.Close()
				return 0, err
			}
			after = seq
			if l := driver.LaneOf(key, to); l != lane {
				seqs, lanes = append(seqs, seq), append(lanes, l)
			}
		}
		if err := rows.Close(); err != nil {
			return 0, err
		}
		if err := rows.Err(); err != nil {
			return 0, err
		}
		n, err := t.s.moveLanes(ctx, tx, seqs, lanes)
		if err != nil {
			return 0, err
		}
		moved += n
		if read < resizeBatch {
			break
		}
	}
	if _, err := tx.ExecContext(ctx, q.resizeDisallow); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, q.laneCountSet, laneCountSetParams{Value: strconv.Itoa(to)}.args()...); err != nil {
		return 0, err
	}
	return moved, nil
}

// RaiseHorizon implements driver.OperatorTx.
func (t *opTx) RaiseHorizon(ctx context.Context, consumer string, before time.Time) (time.Time, error) {
	if _, err := t.tx.ExecContext(ctx, t.s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Horizon: timeArg(before)}.args()...); err != nil {
		return time.Time{}, wrap("raise horizon", err)
	}
	var h sql.NullTime
	if err := t.tx.QueryRowContext(ctx, t.s.q.horizonGet, horizonGetParams{Consumer: consumer}.args()...).Scan(&h); err != nil {
		return time.Time{}, wrap("raise horizon", err)
	}
	return nullTime(h), nil
}

// PruneInbox implements driver.OperatorTx.
func (t *opTx) PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error) {
	n, err := t.s.pruneRecords(ctx, t.tx, consumer, horizon, limit)
	return n, wrap("prune inbox", err)
}

// WriteAudit implements driver.OperatorTx.
func (t *opTx) WriteAudit(ctx context.Context, a driver.AuditEntry) (int64, error) {
	id, err := t.s.insertAudit(ctx, t.tx, a)
	return id, wrap("write audit", err)
}

// SetAuditRows implements driver.OperatorTx.
func (t *opTx) SetAuditRows(ctx context.Context, id, rows int64) error {
	_, err := t.tx.ExecContext(ctx, t.s.q.auditSetRows, auditSetRowsParams{Rows: rows, ID: id}.args()...)
	return wrap("write audit", err)
}

// insertAudit writes a (Rows as given) in tx and returns its ID.
func (s *Store) insertAudit(ctx context.Context, tx *sql.Tx, a driver.AuditEntry) (int64, error) {
	args := a.Arguments
	if args == "" {
		args = "{}"
	}
	res, err := tx.ExecContext(ctx, s.q.auditInsert, auditInsertParams{Now: timeArg(a.At), Actor: a.Actor, Command: a.Command, Arguments: args, Rows: a.Rows}.args()...)
	if err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// moveLanes sets the lane of the unpublished rows seqs to to (one statement; the caller inserted
// the meta row 'lanes_resize' in tx) and returns how many rows changed.
func (s *Store) moveLanes(ctx context.Context, tx *sql.Tx, seqs []int64, to []int) (int64, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	query, args := resizeMoveParams{Seqs: seqs, Lanes: to}.query(s.q.resizeMove)
	res, err := tx.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// ResizeLanes implements driver.LaneResizer with core.Operator (which holds the command's
// rules; the steps are this file's opTx).
func (s *Store) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	op, err := core.NewOperator(s, &core.OperatorOptions{Logger: s.log})
	if err != nil {
		return 0, err
	}
	return op.ResizeLanes(ctx, lanes, audit)
}

// ReleaseCheckpoint implements driver.CheckpointReleaser.
func (s *Store) ReleaseCheckpoint(ctx context.Context, audit driver.AuditEntry) (bool, error) {
	var n int64
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.checkpointDelete)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		audit.Rows = n
		_, err = s.insertAudit(ctx, tx, audit)
		return err
	})
	if err != nil {
		return false, wrap("release checkpoint", err)
	}
	return n > 0, nil
}

// WriteAudit implements driver.AuditWriter.
func (s *Store) WriteAudit(ctx context.Context, audit driver.AuditEntry) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		_, err := s.insertAudit(ctx, tx, audit)
		return err
	})
	if err != nil {
		return wrap("write audit", err)
	}
	return nil
}

// CheckAudit implements driver.AuditWriter.
func (s *Store) CheckAudit(ctx context.Context) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := s.insertAudit(ctx, tx, driver.AuditEntry{Actor: "check", Command: "check"}); err != nil {
			return err
		}
		return driver.ErrAuditChecked
	})
	if err != nil && !errors.Is(err, driver.ErrAuditChecked) {
		return wrap("check audit", err)
	}
	return nil
}
