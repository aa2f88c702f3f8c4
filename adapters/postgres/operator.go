package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The steps of the operator commands (driver.OperatorTx) that core.Operator runs in one
// transaction: SQL and scanning only. The commands' rules (checks, refusals, audit, wake-ups)
// are core.Operator's.

// InOperatorTx implements driver.OperatorStore: one READ COMMITTED transaction.
func (s *Store[TTx]) InOperatorTx(ctx context.Context, fn func(ctx context.Context, tx driver.OperatorTx) error) error {
	var fnErr error
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		fnErr = fn(ctx, opTx[TTx]{s: s, q: q})
		return fnErr
	})
	if err != nil && !errors.Is(err, fnErr) {
		return fmt.Errorf("postgres: operator transaction: %w", classify(err))
	}
	return err
}

// ListAudit implements driver.OperatorStore.
func (s *Store[TTx]) ListAudit(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	r, err := s.db.query(ctx, s.q.auditList, auditListParams{Since: tsIn(p.Since), Limit: p.Limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("postgres: audit log: %w", classify(err))
	}
	defer r.Close()
	var out []driver.AuditEntry
	for r.Next() {
		var e driver.AuditEntry
		var at pgtype.Timestamptz
		if err := r.Scan(&e.ID, &at, &e.Actor, &e.Command, &e.Arguments, &e.Rows); err != nil {
			return nil, fmt.Errorf("postgres: audit log: %w", err)
		}
		e.At = tsOut(at)
		out = append(out, e)
	}
	if err := r.Err(); err != nil {
		return nil, fmt.Errorf("postgres: audit log: %w", classify(err))
	}
	return out, nil
}

// opTx is driver.OperatorTx in a transaction of s.
type opTx[TTx any] struct {
	s *Store[TTx]
	q querier
}

// stepErr names the step of a failed statement and classifies the database's error.
func stepErr(step string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("postgres: %s: %w", step, classify(err))
}

// BeginReplay takes the advisory lock cleanup shares (so that no cleanup deletes a row the
// replay puts back: see PruneLock), then the outbox's ROW EXCLUSIVE lock (a writer's, which a
// resize waits for), and reads the lane count.
func (t opTx[TTx]) BeginReplay(ctx context.Context) (int, error) {
	if _, err := t.q.exec(ctx, t.s.q.replayLock, pruneLockParams{Class: t.s.n.lockKey}.args()...); err != nil {
		return 0, stepErr("replay lock", err)
	}
	if _, err := t.q.exec(ctx, t.s.q.replayLockOutbox); err != nil {
		return 0, stepErr("replay lock", err)
	}
	n, err := readLanes(ctx, t.q, t.s.q.laneCountShared)
	return n, stepErr("lane count", err)
}

// BeginResize checks migration 0007, locks the outbox IN SHARE ROW EXCLUSIVE MODE (it waits
// for the writer transactions that inserted, whose ROW EXCLUSIVE lock lasts until they end,
// and holds the next inserts back) and the lane count's meta row FOR UPDATE (REPEATABLE READ
// writers read it FOR SHARE).
func (t opTx[TTx]) BeginResize(ctx context.Context) (int, error) {
	var v, database string
	var checked bool
	if err := queryRow(ctx, t.q, t.s.q.laneCountChecked, nil, &v, &checked, &database); err != nil {
		if errors.Is(err, errNoRows) {
			return 0, fmt.Errorf("postgres: resize lanes: %w", &core.NotMigratedError{Missing: "no lane count recorded in " + t.s.n.meta})
		}
		return 0, stepErr("resize lanes", err)
	}
	if !checked {
		return 0, fmt.Errorf("postgres: resize lanes: %w", &core.NotMigratedError{Missing: "migration 0007_lanes_resize of outbox " + t.s.n.outbox})
	}
	if _, err := t.q.exec(ctx, t.s.q.resizeLock); err != nil {
		return 0, stepErr("resize lock", err)
	}
	n, err := readLanes(ctx, t.q, t.s.q.laneCountLocked)
	return n, stepErr("lane count", err)
}

// Publisher implements driver.OperatorTx.
func (t opTx[TTx]) Publisher(ctx context.Context) (driver.Publisher, error) {
	pub, err := scanPublisher(ctx, t.q, t.s.q.publisherGet)
	return pub, stepErr("publisher", err)
}

// ReplayTargets implements driver.OperatorTx: the rows locked FOR UPDATE.
func (t opTx[TTx]) ReplayTargets(ctx context.Context, p driver.ReplayParams, limit int) ([]driver.ReplayTarget, error) {
	var r rows
	var err error
	if len(p.IDs) > 0 {
		r, err = t.q.query(ctx, t.s.q.replayByIDs, replayByIDsParams{IDs: p.IDs}.args()...)
	} else {
		r, err = t.q.query(ctx, t.s.q.replayByKey, replayByKeyParams{PartitionKey: p.PartitionKey, Since: occurredIn(p.Since), Limit: limit}.args()...)
	}
	if err != nil {
		return nil, stepErr("replay targets", err)
	}
	defer r.Close()
	var targets []driver.ReplayTarget
	for r.Next() {
		var x driver.ReplayTarget
		if err := r.Scan(&x.Seq, &x.ID, &x.PartitionKey, &x.Published); err != nil {
			return nil, stepErr("replay targets", err)
		}
		targets = append(targets, x)
	}
	return targets, stepErr("replay targets", r.Err())
}

// KeyUnpublished implements driver.OperatorTx.
func (t opTx[TTx]) KeyUnpublished(ctx context.Context, key string) (bool, error) {
	var pending bool
	err := queryRow(ctx, t.q, t.s.q.keyUnpublished, keyUnpublishedParams{PartitionKey: key}.args(), &pending)
	return pending, stepErr("replay", err)
}

// Requeue implements driver.OperatorTx: one statement (Replay) gives the rows pending rows.
func (t opTx[TTx]) Requeue(ctx context.Context, rows []driver.ReplayTarget) (int64, error) {
	seqs := make([]int64, len(rows))
	to := make([]int32, len(rows))
	for i, r := range rows {
		seqs[i], to[i] = r.Seq, int32(r.Lane)
	}
	n, err := t.q.exec(ctx, t.s.q.replay, replayParams{Seqs: seqs, Lanes: to}.args()...)
	return n, stepErr("replay", err)
}

// Unpark implements driver.OperatorTx.
func (t opTx[TTx]) Unpark(ctx context.Context, key string) (int64, error) {
	n, err := t.q.exec(ctx, t.s.q.unpark, unparkParams{PartitionKey: key}.args()...)
	return n, stepErr("unpark", err)
}

// PruneOutbox implements driver.OperatorTx: as Store.PruneOutbox, in the transaction.
func (t opTx[TTx]) PruneOutbox(ctx context.Context, p driver.PruneParams) (int64, error) {
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	if _, err := t.q.exec(ctx, t.s.q.pruneLock, pruneLockParams{Class: t.s.n.lockKey}.args()...); err != nil {
		return 0, stepErr("prune outbox", err)
	}
	n, err := t.q.exec(ctx, t.s.q.pruneOutbox, pruneOutboxParams{Before: occurredIn(p.PublishedBefore), Below: below, Limit: p.BatchSize()}.args()...)
	return n, stepErr("prune outbox", err)
}

// ResetLanes implements driver.OperatorTx: one statement (ResetLanes). Under either
// ClaimStrategy another relay claims a reset lane at its next claim: ClaimAdvisoryLock's
// advisory locks last only as long as a claim's own transaction, and the sign of life
// (live_pid) is cleared.
func (t opTx[TTx]) ResetLanes(ctx context.Context, p driver.ResetLanesParams) (int64, error) {
	sel := make([]int32, len(p.Lanes))
	for i, l := range p.Lanes {
		sel[i] = int32(l)
	}
	n, err := t.q.exec(ctx, t.s.q.resetLanes, resetLanesParams{Lanes: sel, Owner: p.Owner}.args()...)
	return n, stepErr("reset lanes", err)
}

// resizeBatch is how many unpublished rows a resize reads and moves per statement.
const resizeBatch = 10_000

// ResizeLanes implements driver.OperatorTx: every lane row locked in lane order with its lease
// ended and its generation incremented (ResizeLeases), the lane rows added or dropped, every
// pending row's lane set to driver.LaneOf(its key, to) (read in seq order and moved resizeBatch
// at a time; the outbox rows keep the lane they were written with), the new count recorded.
func (t opTx[TTx]) ResizeLanes(ctx context.Context, from, to int) (int64, error) {
	var held int64
	if err := queryRow(ctx, t.q, t.s.q.resizeLeases, nil, &held); err != nil {
		return 0, stepErr("resize lanes", err)
	}
	if _, err := t.q.exec(ctx, t.s.q.resizeDropLanes, resizeDropLanesParams{Lanes: to}.args()...); err != nil {
		return 0, stepErr("resize lanes", err)
	}
	if _, err := t.q.exec(ctx, t.s.q.lanesFill, lanesFillParams{Lanes: to}.args()...); err != nil {
		return 0, stepErr("resize lanes", err)
	}
	var moved int64
	for after := int64(0); ; {
		r, err := t.q.query(ctx, t.s.q.resizeRows, resizeRowsParams{After: after, Limit: resizeBatch}.args()...)
		if err != nil {
			return 0, stepErr("resize lanes", err)
		}
		var seqs []int64
		var lanes []int32
		read := 0
		for r.Next() {
			read++
			var seq, lane int64
			var key string
			if err := r.Scan(&seq, &key, &lane); err != nil {
				r.Close()
				return 0, stepErr("resize lanes", err)
			}
			after = seq
			if l := driver.LaneOf(key, to); int64(l) != lane {
				seqs, lanes = append(seqs, seq), append(lanes, int32(l))
			}
		}
		r.Close()
		if err := r.Err(); err != nil {
			return 0, stepErr("resize lanes", err)
		}
		if len(seqs) > 0 {
			n, err := t.q.exec(ctx, t.s.q.resizeMove, resizeMoveParams{Seqs: seqs, Lanes: lanes}.args()...)
			if err != nil {
				return 0, stepErr("resize lanes", err)
			}
			moved += n
		}
		if read < resizeBatch {
			break
		}
	}
	if _, err := t.q.exec(ctx, t.s.q.laneCountSet, laneCountSetParams{Value: strconv.Itoa(to)}.args()...); err != nil {
		return 0, stepErr("resize lanes", err)
	}
	return moved, nil
}

// RaiseHorizon implements driver.OperatorTx.
func (t opTx[TTx]) RaiseHorizon(ctx context.Context, consumer string, before time.Time) (time.Time, error) {
	var h time.Time
	err := queryRow(ctx, t.q, t.s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Before: occurredIn(before)}.args(), &h)
	return h, stepErr("raise horizon", err)
}

// PruneInbox implements driver.OperatorTx. On a partitioned inbox it drops partitions as
// Store.PruneInbox does, in this transaction, whether or not the store's options say
// InboxPartitioning (it reads how the inbox was migrated): so does `outboxkit inbox prune`.
func (t opTx[TTx]) PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error) {
	r, partitioned, err := t.s.migratedInboxRanges(ctx, t.q)
	if err != nil {
		return 0, stepErr("prune inbox", err)
	}
	if partitioned {
		n, err := t.s.dropInboxPartitions(ctx, t.q, r, consumer, t.savepoint)
		return n, stepErr("prune inbox", err)
	}
	n, err := t.q.exec(ctx, t.s.q.pruneInbox, pruneInboxParams{Consumer: consumer, Horizon: horizon, Limit: limit}.args()...)
	return n, stepErr("prune inbox", err)
}

// savepoint runs fn in a savepoint of the operator transaction: an error of fn (a lock timeout)
// rolls back fn alone, and the transaction goes on.
func (t opTx[TTx]) savepoint(ctx context.Context, fn func(context.Context, querier) error) error {
	if _, err := t.q.exec(ctx, t.s.q.savepoint); err != nil {
		return err
	}
	if err := fn(ctx, t.q); err != nil {
		if _, rerr := t.q.exec(ctx, t.s.q.rollbackToSavepoint); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	_, err := t.q.exec(ctx, t.s.q.releaseSavepoint)
	return err
}

// WriteAudit implements driver.OperatorTx.
func (t opTx[TTx]) WriteAudit(ctx context.Context, a driver.AuditEntry) (int64, error) {
	id, err := t.s.insertAudit(ctx, t.q, a)
	return id, stepErr("write audit", err)
}

// SetAuditRows implements driver.OperatorTx.
func (t opTx[TTx]) SetAuditRows(ctx context.Context, id, rows int64) error {
	_, err := t.q.exec(ctx, t.s.q.auditSetRows, auditSetRowsParams{ID: id, Rows: rows}.args()...)
	return stepErr("write audit", err)
}

// insertAudit writes a (Rows as given) in q and returns its ID.
func (s *Store[TTx]) insertAudit(ctx context.Context, q querier, a driver.AuditEntry) (int64, error) {
	args := a.Arguments
	if args == "" {
		args = "{}"
	}
	var id int64
	err := queryRow(ctx, q, s.q.auditInsert, auditInsertParams{Actor: a.Actor, Command: a.Command, Arguments: args, Rows: a.Rows}.args(), &id)
	return id, err
}

// ResizeLanes implements driver.LaneResizer with core.Operator (which holds the command's
// rules; the steps are this file's opTx).
func (s *Store[TTx]) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	op, err := core.NewOperator(s, &core.OperatorOptions{Logger: s.log})
	if err != nil {
		return 0, err
	}
	return op.ResizeLanes(ctx, lanes, audit)
}

// ReleaseCheckpoint implements driver.CheckpointReleaser.
func (s *Store[TTx]) ReleaseCheckpoint(ctx context.Context, audit driver.AuditEntry) (bool, error) {
	var n int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		var err error
		if n, err = q.exec(ctx, s.q.checkpointDelete); err != nil {
			return err
		}
		audit.Rows = n
		_, err = s.insertAudit(ctx, q, audit)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: release checkpoint: %w", classify(err))
	}
	return n > 0, nil
}

// WriteAudit implements driver.AuditWriter.
func (s *Store[TTx]) WriteAudit(ctx context.Context, audit driver.AuditEntry) error {
	if _, err := s.insertAudit(ctx, s.db, audit); err != nil {
		return fmt.Errorf("postgres: write audit: %w", classify(err))
	}
	return nil
}

// CheckAudit implements driver.AuditWriter.
func (s *Store[TTx]) CheckAudit(ctx context.Context) error {
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := s.insertAudit(ctx, q, driver.AuditEntry{Actor: "check", Command: "check"}); err != nil {
			return err
		}
		return driver.ErrAuditChecked
	})
	if err != nil && !errors.Is(err, driver.ErrAuditChecked) {
		return fmt.Errorf("postgres: check audit: %w", classify(err))
	}
	return nil
}

// Interface checks.
var (
	_ driver.OperatorStore = (*Store[pgx.Tx])(nil)
	_ driver.OperatorStore = (*Store[*sql.Tx])(nil)
)
