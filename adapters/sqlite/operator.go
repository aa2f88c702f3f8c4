package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The steps of the operator commands (driver.OperatorTx) that core.Operator runs in one write
// transaction (which serialises them with the relays' marks and cleanup): SQL and scanning
// only. The commands' rules (checks, refusals, audit, wake-ups) are core.Operator's. SQLite has
// no change source, so the publisher is never a CDC relay.

// Interface checks.
var (
	_ driver.OperatorStore = (*Store)(nil)
	_ driver.SingleWriter  = (*Store)(nil)
)

// InOperatorTx implements driver.OperatorStore: one write transaction.
func (s *Store) InOperatorTx(ctx context.Context, fn func(ctx context.Context, tx driver.OperatorTx) error) error {
	var fnErr error
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		fnErr = fn(ctx, opTx{s: s, tx: tx})
		return fnErr
	})
	if err != nil && !errors.Is(err, fnErr) {
		return fmt.Errorf("sqlite: operator transaction: %w", classify(err))
	}
	return err
}

// SingleWriter implements driver.SingleWriter: SQLite runs one write transaction at a time.
func (s *Store) SingleWriter() bool { return true }

// ListAudit implements driver.OperatorStore.
func (s *Store) ListAudit(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	since := int64(0)
	if !p.Since.IsZero() {
		since = nowMicros(p.Since)
	}
	rows, err := s.db.QueryContext(ctx, s.q.auditList, auditListParams{Since: since, Limit: p.Limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: audit log: %w", classify(err))
	}
	defer rows.Close()
	var out []driver.AuditEntry
	for rows.Next() {
		var e driver.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Command, &e.Arguments, &e.Rows); err != nil {
			return nil, fmt.Errorf("sqlite: audit log: %w", err)
		}
		e.At = fromMicros(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: audit log: %w", classify(err))
	}
	return out, nil
}

// opTx is driver.OperatorTx in a write transaction of s.
type opTx struct {
	s  *Store
	tx *sql.Tx
}

// stepErr names the step of a failed statement and classifies the database's error.
func stepErr(step string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite: %s: %w", step, classify(err))
}

// lanes reads the lane count (the write transaction holds every other writer back).
func (t opTx) lanes(ctx context.Context) (int, error) {
	var n int
	err := t.s.queryRow(ctx, t.tx, t.s.q.getLanes).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("sqlite: lane count: %w", &core.NotMigratedError{Missing: "no lane count recorded"})
	}
	return n, stepErr("lane count", err)
}

// BeginReplay implements driver.OperatorTx.
func (t opTx) BeginReplay(ctx context.Context) (int, error) { return t.lanes(ctx) }

// BeginResize implements driver.OperatorTx.
func (t opTx) BeginResize(ctx context.Context) (int, error) { return t.lanes(ctx) }

// Publisher implements driver.OperatorTx.
func (t opTx) Publisher(ctx context.Context) (driver.Publisher, error) {
	pub, err := readPublisher(t.s.queryRow(ctx, t.tx, t.s.q.publisherGet))
	return pub, stepErr("publisher", err)
}

// ReplayTargets implements driver.OperatorTx.
func (t opTx) ReplayTargets(ctx context.Context, p driver.ReplayParams, limit int) ([]driver.ReplayTarget, error) {
	var rows *sql.Rows
	var err error
	if len(p.IDs) > 0 {
		list, _ := json.Marshal(p.IDs)
		rows, err = t.tx.QueryContext(ctx, t.s.q.replayByIDs, replayByIDsParams{IDs: string(list)}.args()...)
	} else {
		since := int64(0)
		if !p.Since.IsZero() {
			since = nowMicros(p.Since)
		}
		rows, err = t.tx.QueryContext(ctx, t.s.q.replayByKey, replayByKeyParams{PartitionKey: p.PartitionKey, Since: since, Limit: limit}.args()...)
	}
	if err != nil {
		return nil, stepErr("replay targets", err)
	}
	defer rows.Close()
	var targets []driver.ReplayTarget
	for rows.Next() {
		var x driver.ReplayTarget
		if err := rows.Scan(&x.Seq, &x.ID, &x.PartitionKey, &x.Published); err != nil {
			return nil, stepErr("replay targets", err)
		}
		targets = append(targets, x)
	}
	return targets, stepErr("replay targets", rows.Err())
}

// KeyUnpublished implements driver.OperatorTx.
func (t opTx) KeyUnpublished(ctx context.Context, key string) (bool, error) {
	var pending bool
	err := t.tx.QueryRowContext(ctx, t.s.q.keyUnpublished, keyUnpublishedParams{PartitionKey: key}.args()...).Scan(&pending)
	return pending, stepErr("replay", err)
}

// Requeue implements driver.OperatorTx: a queue row each (Replay, in the outbox row's lane),
// their publication rows dropped (ReplayForget), and each moved to its Lane.
func (t opTx) Requeue(ctx context.Context, rows []driver.ReplayTarget) (int64, error) {
	seqs := make([]int64, len(rows))
	moves := make([]laneMove, len(rows))
	for i, r := range rows {
		seqs[i] = r.Seq
		moves[i] = laneMove{seq: r.Seq, from: -1, to: r.Lane}
	}
	list, _ := json.Marshal(seqs)
	res, err := t.tx.ExecContext(ctx, t.s.q.replay, replayParams{Seqs: string(list)}.args()...)
	if err != nil {
		return 0, stepErr("replay", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, stepErr("replay", err)
	}
	if _, err := t.tx.ExecContext(ctx, t.s.q.replayForget, replayParams{Seqs: string(list)}.args()...); err != nil {
		return 0, stepErr("replay", err)
	}
	_, err = t.s.moveLanes(ctx, t.tx, moves)
	return n, stepErr("replay", err)
}

// Unpark implements driver.OperatorTx.
func (t opTx) Unpark(ctx context.Context, key string) (int64, error) {
	res, err := t.tx.ExecContext(ctx, t.s.q.unpark, unparkParams{PartitionKey: key}.args()...)
	if err != nil {
		return 0, stepErr("unpark", err)
	}
	n, err := res.RowsAffected()
	return n, stepErr("unpark", err)
}

// PruneOutbox implements driver.OperatorTx: as Store.PruneOutbox, in the transaction.
func (t opTx) PruneOutbox(ctx context.Context, p driver.PruneParams) (int64, error) {
	n, err := t.s.pruneIn(ctx, t.tx, p)
	return n, stepErr("prune outbox", err)
}

// ResetLanes implements driver.OperatorTx: one statement (ResetLanes). SQLite keeps no sign of
// life on a lane.
func (t opTx) ResetLanes(ctx context.Context, p driver.ResetLanesParams) (int64, error) {
	res, err := t.tx.ExecContext(ctx, t.s.q.resetLanes, resetLanesParams{
		Now: nowMicros(time.Time{}), All: len(p.Lanes) == 0, Lanes: intList(p.Lanes), Owner: p.Owner,
	}.args()...)
	if err != nil {
		return 0, stepErr("reset lanes", err)
	}
	n, err := res.RowsAffected()
	return n, stepErr("reset lanes", err)
}

// resizeBatch is how many unpublished rows a resize reads at a time.
const resizeBatch = 10_000

// ResizeLanes implements driver.OperatorTx (SQLite's single writer: no writer transaction runs
// beside it, and one whose snapshot predates it cannot write afterwards): every lease ended
// (owner cleared, lease expired, generation incremented), the lane rows added or dropped,
// every unpublished row's lane set to driver.LaneOf(its key, to), the new count recorded.
func (t opTx) ResizeLanes(ctx context.Context, from, to int) (int64, error) {
	moved, err := t.resize(ctx, to)
	return moved, stepErr("resize lanes", err)
}

func (t opTx) resize(ctx context.Context, to int) (int64, error) {
	tx, q := t.tx, &t.s.q
	if _, err := tx.ExecContext(ctx, q.resizeLeases, resizeLeasesParams{Now: nowMicros(time.Time{})}.args()...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, q.resizeDropLanes, resizeDropLanesParams{Lanes: to}.args()...); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, q.resizeAddLanes, resizeDropLanesParams{Lanes: to}.args()...); err != nil {
		return 0, err
	}
	var moved int64
	for after := int64(0); ; {
		r, err := tx.QueryContext(ctx, q.resizeRows, resizeRowsParams{After: after, Limit: resizeBatch}.args()...)
		if err != nil {
			return 0, err
		}
		var batch []laneMove
		for r.Next() {
			var seq int64
			var key string
			var lane int
			if err := r.Scan(&seq, &key, &lane); err != nil {
				r.Close()
				return 0, err
			}
			batch = append(batch, laneMove{seq: seq, from: lane, to: driver.LaneOf(key, to)})
		}
		if err := r.Close(); err != nil {
			return 0, err
		}
		if err := r.Err(); err != nil {
			return 0, err
		}
		if len(batch) == 0 {
			break
		}
		after = batch[len(batch)-1].seq
		n, err := t.s.moveLanes(ctx, tx, batch)
		if err != nil {
			return 0, err
		}
		moved += n
		if len(batch) < resizeBatch {
			break
		}
	}
	_, err := tx.ExecContext(ctx, q.lanesUpdate, lanesUpdateParams{Lanes: to}.args()...)
	return moved, err
}

// RaiseHorizon implements driver.OperatorTx.
func (t opTx) RaiseHorizon(ctx context.Context, consumer string, before time.Time) (time.Time, error) {
	var h int64
	err := t.s.queryRow(ctx, t.tx, t.s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Before: before.UnixMicro()}.args()...).Scan(&h)
	return time.UnixMicro(h).UTC(), stepErr("raise horizon", err)
}

// PruneInbox implements driver.OperatorTx.
func (t opTx) PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error) {
	res, err := t.s.exec(ctx, t.tx, t.s.q.pruneInbox, pruneInboxParams{Consumer: consumer, Horizon: horizon.UnixMicro(), Limit: limit}.args()...)
	if err != nil {
		return 0, stepErr("prune inbox", err)
	}
	n, err := res.RowsAffected()
	return n, stepErr("prune inbox", err)
}

// WriteAudit implements driver.OperatorTx.
func (t opTx) WriteAudit(ctx context.Context, a driver.AuditEntry) (int64, error) {
	args := a.Arguments
	if args == "" {
		args = "{}"
	}
	res, err := t.tx.ExecContext(ctx, t.s.q.auditInsert, auditInsertParams{
		At: nowMicros(a.At), Actor: a.Actor, Command: a.Command, Arguments: args, Rows: a.Rows,
	}.args()...)
	if err != nil {
		return 0, stepErr("write audit", err)
	}
	id, err := res.LastInsertId()
	return id, stepErr("write audit", err)
}

// SetAuditRows implements driver.OperatorTx.
func (t opTx) SetAuditRows(ctx context.Context, id, rows int64) error {
	_, err := t.tx.ExecContext(ctx, t.s.q.auditSetRows, auditSetRowsParams{ID: id, Rows: rows}.args()...)
	return stepErr("write audit", err)
}

// laneMove is one unpublished row whose lane becomes to (from: its lane, -1 when unknown).
type laneMove struct {
	seq      int64
	from, to int
}

// moveLanes sets the lane of each row of moves whose lane changes, under the marker the
// immutability trigger allows it under, and returns how many rows changed.
func (s *Store) moveLanes(ctx context.Context, tx *sql.Tx, moves []laneMove) (int64, error) {
	if _, err := tx.ExecContext(ctx, s.q.resizeAllow); err != nil {
		return 0, err
	}
	var moved int64
	for _, m := range moves {
		if m.from == m.to {
			continue
		}
		res, err := tx.ExecContext(ctx, s.q.resizeMove, resizeMoveParams{Seq: m.seq, Lane: m.to}.args()...)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		moved += n
	}
	_, err := tx.ExecContext(ctx, s.q.resizeDone)
	return moved, err
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
