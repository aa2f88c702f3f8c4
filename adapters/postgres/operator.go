package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Replay implements driver.Operator: one transaction that takes the lock cleanup shares (so that no
// cleanup deletes a row it puts back: see PruneLock), reads the publisher kind, selects and
// locks the rows, applies driver.CheckReplayTargets, gives them pending rows (as never attempted,
// in their key's lane under the current lane count) and writes p.Audit.
func (s *Store[TTx]) Replay(ctx context.Context, p driver.ReplayParams) (int, error) {
	ids, err := driver.CheckReplay(p)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.exec(ctx, s.q.replayLock, s.n.lockKey); err != nil {
			return err
		}
		pub, err := scanPublisher(ctx, q, s.q.publisherGet)
		if err != nil {
			return err
		}
		if pub.Kind == driver.KindCDC {
			return &core.ReplayError{Err: core.ErrReplayCDC, Detail: fmt.Sprintf("generation %d held by %q", pub.Generation, pub.Holder)}
		}
		var r rows
		if len(ids) > 0 {
			r, err = q.query(ctx, s.q.replayByIDs, ids)
		} else {
			r, err = q.query(ctx, s.q.replayByKey, p.PartitionKey, occurredIn(p.Since), driver.MaxReplay+1)
		}
		if err != nil {
			return err
		}
		var targets []driver.ReplayTarget
		for r.Next() {
			var t driver.ReplayTarget
			if err := r.Scan(&t.Seq, &t.ID, &t.PartitionKey, &t.Published); err != nil {
				r.Close()
				return err
			}
			targets = append(targets, t)
		}
		r.Close()
		if err := r.Err(); err != nil {
			return err
		}
		seqs, err := driver.CheckReplayTargets(ids, p.PartitionKey, targets, func(key string) (bool, error) {
			var pending bool
			err := queryRow(ctx, q, s.q.keyUnpublished, []any{key}, &pending)
			return pending, err
		})
		if err != nil {
			return err
		}
		if n, err = s.replayPending(ctx, q, seqs, targets); err != nil {
			return err
		}
		return s.audit(ctx, q, p.Audit, n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: replay: %w", classify(err))
	}
	return int(n), nil
}

// audit writes a (when not nil) with rows affected.
func (s *Store[TTx]) audit(ctx context.Context, q querier, a *driver.AuditEntry, rows int64) error {
	if a == nil {
		return nil
	}
	args := a.Arguments
	if args == "" {
		args = "{}"
	}
	_, err := q.exec(ctx, s.q.auditInsert, a.Actor, a.Command, args, rows)
	return err
}

// UnparkKeys implements driver.Operator.
func (s *Store[TTx]) UnparkKeys(ctx context.Context, keys []string, audit *driver.AuditEntry) (int, error) {
	var total int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		total = 0
		for _, k := range keys {
			n, err := q.exec(ctx, s.q.unpark, k)
			if err != nil {
				return err
			}
			total += n
		}
		return s.audit(ctx, q, audit, total)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: unpark: %w", classify(err))
	}
	return int(total), nil
}

// PruneAudited implements driver.Operator. It deletes rows (a partitioned outbox's partitions
// are not dropped: use core.CleanupOutbox for that).
func (s *Store[TTx]) PruneAudited(ctx context.Context, p driver.PruneParams, audit driver.AuditEntry) (int, error) {
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	var total int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		total = 0
		if _, err := q.exec(ctx, s.q.pruneLock, s.n.lockKey); err != nil {
			return err
		}
		for {
			n, err := q.exec(ctx, s.q.pruneOutbox, occurredIn(p.PublishedBefore), below, p.BatchSize())
			if err != nil {
				return err
			}
			total += n
			if n < int64(p.BatchSize()) {
				break
			}
		}
		return s.audit(ctx, q, &audit, total)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune outbox: %w", classify(err))
	}
	return int(total), nil
}

// AuditLog implements driver.Operator.
func (s *Store[TTx]) AuditLog(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	r, err := s.db.query(ctx, s.q.auditList, tsIn(p.Since), driver.ListParams{Limit: p.Limit}.PageSize())
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
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// ReleaseCheckpoint implements driver.CheckpointReleaser.
func (s *Store[TTx]) ReleaseCheckpoint(ctx context.Context, audit driver.AuditEntry) (bool, error) {
	var n int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		var err error
		if n, err = q.exec(ctx, s.q.checkpointDelete); err != nil {
			return err
		}
		return s.audit(ctx, q, &audit, n)
	})
	if err != nil {
		return false, fmt.Errorf("postgres: release checkpoint: %w", classify(err))
	}
	return n > 0, nil
}

// WriteAudit implements driver.AuditWriter.
func (s *Store[TTx]) WriteAudit(ctx context.Context, audit driver.AuditEntry) error {
	if err := s.audit(ctx, s.db, &audit, audit.Rows); err != nil {
		return fmt.Errorf("postgres: write audit: %w", classify(err))
	}
	return nil
}

// CheckAudit implements driver.AuditWriter.
func (s *Store[TTx]) CheckAudit(ctx context.Context) error {
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if err := s.audit(ctx, q, &driver.AuditEntry{Actor: "check", Command: "check"}, 0); err != nil {
			return err
		}
		return driver.ErrAuditChecked
	})
	if err != nil && !errors.Is(err, driver.ErrAuditChecked) {
		return fmt.Errorf("postgres: check audit: %w", classify(err))
	}
	return nil
}

// ResetLanes implements driver.Operator: one statement (ResetLanes) and the audit row, in one
// transaction. Under either ClaimStrategy another relay claims a reset lane at its next claim:
// ClaimAdvisoryLock's advisory locks last only as long as a claim's own transaction, and the
// sign of life (live_pid) is cleared.
func (s *Store[TTx]) ResetLanes(ctx context.Context, p driver.ResetLanesParams, audit driver.AuditEntry) (int, error) {
	count, err := s.LaneCount(ctx)
	if err != nil {
		return 0, err
	}
	lanes, err := driver.CheckResetLanes(p, count)
	if err != nil {
		return 0, err
	}
	sel := make([]int32, len(lanes))
	for i, l := range lanes {
		sel[i] = int32(l)
	}
	var n int64
	err = s.withTx(ctx, func(ctx context.Context, q querier) error {
		var err error
		if n, err = q.exec(ctx, s.q.resetLanes, sel, p.Owner); err != nil {
			return err
		}
		return s.audit(ctx, q, &audit, n)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: reset lanes: %w", classify(err))
	}
	return int(n), nil
}

// PruneInboxAudited implements driver.Operator. The retention rule wants the horizon raise
// committed before any record below it is deleted (see PruneInbox), so the change spans
// transactions: the first raises the horizon and writes the audit row (rows -1), each next one
// deletes a batch, and the last (the batch that finds fewer than limit) also sets the audit
// row's rows to the total. The horizon thus never moves without its audit row; a failure or
// crash between them leaves the row at -1 (deletions unfinished) and the records for the next
// prune.
func (s *Store[TTx]) PruneInboxAudited(ctx context.Context, consumer string, before time.Time, limit int, audit driver.AuditEntry) (int, error) {
	limit, err := driver.CheckInboxPrune(consumer, before, limit)
	if err != nil {
		return 0, err
	}
	args := audit.Arguments
	if args == "" {
		args = "{}"
	}
	var h time.Time
	var id int64
	err = s.withTx(ctx, func(ctx context.Context, q querier) error {
		if err := queryRow(ctx, q, s.q.raiseHorizon, []any{consumer, occurredIn(before)}, &h); err != nil {
			return err
		}
		return queryRow(ctx, q, s.q.auditInsertPending, []any{audit.Actor, audit.Command, args}, &id)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune inbox: raise horizon: %w", classify(err))
	}
	total := int64(0)
	for {
		var n int64
		err := s.withTx(ctx, func(ctx context.Context, q querier) error {
			var err error
			if n, err = q.exec(ctx, s.q.pruneInbox, consumer, h, limit); err != nil || n >= int64(limit) {
				return err
			}
			_, err = q.exec(ctx, s.q.auditSetRows, id, total+n)
			return err
		})
		if err != nil {
			return int(total), fmt.Errorf("postgres: prune inbox: %w", classify(err))
		}
		total += n
		if n < int64(limit) {
			return int(total), nil
		}
	}
}

// resizeBatch is how many unpublished rows a resize reads and moves per statement.
const resizeBatch = 10_000

// ResizeLanes implements driver.LaneResizer in one read-committed transaction: the outbox table
// locked IN SHARE ROW EXCLUSIVE MODE (it waits for the writer transactions that inserted, whose
// ROW EXCLUSIVE lock lasts until they end, and holds the next inserts back; see migration 0007)
// and the lane count's meta row FOR UPDATE (REPEATABLE READ writers read it FOR SHARE), the
// publisher kind (a CDC relay's generation is refused), every lane row locked in lane order with
// its lease ended and its generation incremented (ResizeLeases), the lane rows added or dropped,
// every pending row's lane set to driver.LaneOf(its key, lanes) (read in seq order and moved
// resizeBatch at a time; the outbox rows keep the lane they were written with), the new count recorded and audit written (Rows: the rows moved). An outbox not
// migrated by this version returns an error wrapping core.ErrSchemaMismatch.
func (s *Store[TTx]) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	if err := driver.CheckResizeLanes(lanes); err != nil {
		return 0, err
	}
	if _, err := s.LaneCount(ctx); err != nil {
		return 0, err
	}
	if !s.checked.Load() {
		return 0, fmt.Errorf("postgres: resize lanes: %w: outbox %s lacks migration 0007_lanes_resize (run Migrate)", core.ErrSchemaMismatch, s.n.outbox)
	}
	var moved int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		moved = 0
		if _, err := q.exec(ctx, s.q.resizeLock); err != nil {
			return err
		}
		old, err := readLanes(ctx, q, s.q.laneCountLocked)
		if err != nil {
			return err
		}
		if old == lanes {
			return nil
		}
		pub, err := scanPublisher(ctx, q, s.q.publisherGet)
		if err != nil {
			return err
		}
		if pub.Kind == driver.KindCDC {
			return fmt.Errorf("%w: generation %d held by %q", core.ErrResizeCDC, pub.Generation, pub.Holder)
		}
		var held int64
		if err := queryRow(ctx, q, s.q.resizeLeases, nil, &held); err != nil {
			return err
		}
		if _, err := q.exec(ctx, s.q.resizeDropLanes, lanes); err != nil {
			return err
		}
		if _, err := q.exec(ctx, s.q.lanesFill, lanes); err != nil {
			return err
		}
		for after := int64(0); ; {
			r, err := q.query(ctx, s.q.resizeRows, after, resizeBatch)
			if err != nil {
				return err
			}
			var seqs []int64
			var to []int32
			read := 0
			for r.Next() {
				read++
				var seq, lane int64
				var key string
				if err := r.Scan(&seq, &key, &lane); err != nil {
					r.Close()
					return err
				}
				after = seq
				if l := driver.LaneOf(key, lanes); int64(l) != lane {
					seqs, to = append(seqs, seq), append(to, int32(l))
				}
			}
			r.Close()
			if err := r.Err(); err != nil {
				return err
			}
			if len(seqs) > 0 {
				n, err := q.exec(ctx, s.q.resizeMove, seqs, to)
				if err != nil {
					return err
				}
				moved += n
			}
			if read < resizeBatch {
				break
			}
		}
		if _, err := q.exec(ctx, s.q.laneCountSet, strconv.Itoa(lanes)); err != nil {
			return err
		}
		return s.audit(ctx, q, &audit, moved)
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: resize lanes: %w", classify(err))
	}
	return int(moved), nil
}

// replayPending gives the rows seqs (among targets) pending rows in their key's lane under the
// current lane count (all pending rows of a key share one lane; a row published before a
// ResizeLanes has its lane under the old count). The count is read after the outbox's ROW
// EXCLUSIVE lock (a writer's), which a resize waits for, so no resize runs in between.
func (s *Store[TTx]) replayPending(ctx context.Context, q querier, seqs []int64, targets []driver.ReplayTarget) (int64, error) {
	if _, err := q.exec(ctx, s.q.replayLockOutbox); err != nil {
		return 0, err
	}
	lanes, err := readLanes(ctx, q, s.q.laneCountShared)
	if err != nil {
		return 0, err
	}
	keys := make(map[int64]string, len(targets))
	for _, t := range targets {
		keys[t.Seq] = t.PartitionKey
	}
	to := make([]int32, len(seqs))
	for i, seq := range seqs {
		to[i] = int32(driver.LaneOf(keys[seq], lanes))
	}
	return q.exec(ctx, s.q.replay, seqs, to)
}
