package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/sqlfile"
)

// Replay implements driver.Operator: one transaction that reads the lane count LOCK IN SHARE MODE
// (as a checked insert does: no resize runs until it ends), reads the publisher kind, selects and
// locks the rows, applies driver.CheckReplayTargets, gives them pending rows as never attempted
// (and deletes their settle log rows), gives them their key's lane under the current count (rows published before a ResizeLanes) and writes p.Audit.
func (s *Store) Replay(ctx context.Context, p driver.ReplayParams) (int, error) {
	ids, err := driver.CheckReplay(p)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		// First, as a checked insert: a resize waits for the replay, or the replay for it.
		lanes, err := s.readLanes(ctx, tx, s.q.laneCountShared)
		if err != nil {
			return err
		}
		pub, err := scanPublisher(tx.QueryRowContext(ctx, s.q.publisherRead))
		if err != nil {
			return s.publisherErr("replay", err)
		}
		if pub.Kind == driver.KindCDC {
			return &core.ReplayError{Err: core.ErrReplayCDC, Detail: fmt.Sprintf("generation %d held by %q", pub.Generation, pub.Holder)}
		}
		var rows *sql.Rows
		if len(ids) > 0 {
			args := make([]any, len(ids))
			for i, id := range ids {
				args[i] = id
			}
			rows, err = tx.QueryContext(ctx, lists(s.q.replayByIDs, 0, len(ids)), args...)
		} else {
			rows, err = tx.QueryContext(ctx, s.q.replayByKey, p.PartitionKey, sinceArg(p.Since), driver.MaxReplay+1)
		}
		if err != nil {
			return err
		}
		var targets []driver.ReplayTarget
		for rows.Next() {
			var t driver.ReplayTarget
			if err := rows.Scan(&t.Seq, &t.ID, &t.PartitionKey, &t.Published); err != nil {
				rows.Close()
				return err
			}
			targets = append(targets, t)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		seqs, err := driver.CheckReplayTargets(ids, p.PartitionKey, targets, func(key string) (bool, error) {
			var pending bool
			err := tx.QueryRowContext(ctx, s.q.keyUnpublished, key).Scan(&pending)
			return pending, err
		})
		if err != nil {
			return err
		}
		args := make([]any, len(seqs))
		for i, seq := range seqs {
			args[i] = seq
		}
		// Records published before migration 010 lose their published_at (the update trigger
		// gives them their pending rows), the others get theirs; the settle log rows go.
		n = 0
		for _, stmt := range []string{s.q.replay, s.q.replayPending} {
			res, err := tx.ExecContext(ctx, lists(stmt, 0, len(seqs)), args...)
			if err != nil {
				return err
			}
			m, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += m
		}
		if _, err := tx.ExecContext(ctx, lists(s.q.replayUnsettle, 0, len(seqs)), args...); err != nil {
			return err
		}
		if err := s.replayLanes(ctx, tx, lanes, targets, seqs); err != nil {
			return err
		}
		return s.audit(ctx, tx, p.Audit, n)
	})
	if err != nil {
		return 0, wrap("replay", err)
	}
	return int(n), nil
}

// audit writes a (when not nil) with rows affected in tx.
func (s *Store) audit(ctx context.Context, tx *sql.Tx, a *driver.AuditEntry, rows int64) error {
	if a == nil {
		return nil
	}
	args := a.Arguments
	if args == "" {
		args = "{}"
	}
	_, err := tx.ExecContext(ctx, s.q.auditInsert, timeArg(a.At), a.Actor, a.Command, args, rows)
	return err
}

// UnparkKeys implements driver.Operator.
func (s *Store) UnparkKeys(ctx context.Context, keys []string, audit *driver.AuditEntry) (int, error) {
	lanes, err := s.LaneCount(ctx)
	if err != nil {
		return 0, err
	}
	var total int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		total = 0
		for _, k := range keys {
			res, err := tx.ExecContext(ctx, s.q.unpark, driver.LaneOf(k, lanes), k)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			total += n
		}
		return s.audit(ctx, tx, audit, total)
	})
	if err != nil {
		return 0, wrap("unpark", err)
	}
	return int(total), nil
}

// PruneAudited implements driver.Operator.
func (s *Store) PruneAudited(ctx context.Context, p driver.PruneParams, audit driver.AuditEntry) (int, error) {
	var total int64
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		total = 0
		below, err := s.pruneBelow(ctx, tx, p)
		if err != nil {
			return err
		}
		for !p.PublishedBefore.IsZero() {
			n, err := s.pruneBatch(ctx, tx, p, below)
			if err != nil {
				return err
			}
			total += n
			if n < int64(p.BatchSize()) {
				break
			}
		}
		return s.audit(ctx, tx, &audit, total)
	})
	if err != nil {
		return 0, wrap("prune outbox", err)
	}
	return int(total), nil
}

// AuditLog implements driver.Operator.
func (s *Store) AuditLog(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	rows, err := s.db.QueryContext(ctx, s.q.auditList, sinceArg(p.Since), driver.ListParams{Limit: p.Limit}.PageSize())
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
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// sinceArg is a lower time bound: the zero time is the Unix epoch (before any row).
func sinceArg(t time.Time) any {
	if t.IsZero() {
		t = time.Unix(0, 0)
	}
	return timeArg(t)
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
		return s.audit(ctx, tx, &audit, n)
	})
	if err != nil {
		return false, wrap("release checkpoint", err)
	}
	return n > 0, nil
}

var _ driver.CheckpointReleaser = (*Store)(nil)

// WriteAudit implements driver.AuditWriter.
func (s *Store) WriteAudit(ctx context.Context, audit driver.AuditEntry) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error { return s.audit(ctx, tx, &audit, audit.Rows) })
	if err != nil {
		return wrap("write audit", err)
	}
	return nil
}

// CheckAudit implements driver.AuditWriter.
func (s *Store) CheckAudit(ctx context.Context) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if err := s.audit(ctx, tx, &driver.AuditEntry{Actor: "check", Command: "check"}, 0); err != nil {
			return err
		}
		return driver.ErrAuditChecked
	})
	if err != nil && !errors.Is(err, driver.ErrAuditChecked) {
		return wrap("check audit", err)
	}
	return nil
}

var _ driver.AuditWriter = (*Store)(nil)

// ResetLanes implements driver.Operator: one statement (ResetLanes) and the audit row, in one
// READ COMMITTED transaction (the isolation of every lanes-table transaction).
func (s *Store) ResetLanes(ctx context.Context, p driver.ResetLanesParams, audit driver.AuditEntry) (int, error) {
	count, err := s.LaneCount(ctx)
	if err != nil {
		return 0, err
	}
	lanes, err := driver.CheckResetLanes(p, count)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		args := appendInts([]any{nil, len(lanes) == 0}, lanes)
		res, err := tx.ExecContext(ctx, lists(s.q.resetLanes, len(lanes), 0), append(args, p.Owner, p.Owner)...)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return s.audit(ctx, tx, &audit, n)
	})
	if err != nil {
		return 0, wrap("reset lanes", err)
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
func (s *Store) PruneInboxAudited(ctx context.Context, consumer string, before time.Time, limit int, audit driver.AuditEntry) (int, error) {
	limit, err := driver.CheckInboxPrune(consumer, before, limit)
	if err != nil {
		return 0, err
	}
	var horizon time.Time
	var id int64
	err = s.inTx(ctx, nil, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.q.raiseHorizon, consumer, timeArg(before)); err != nil {
			return err
		}
		var h sql.NullTime
		if err := tx.QueryRowContext(ctx, s.q.horizonGet, consumer).Scan(&h); err != nil {
			return err
		}
		horizon = nullTime(h)
		args := audit.Arguments
		if args == "" {
			args = "{}"
		}
		res, err := tx.ExecContext(ctx, s.q.auditInsert, timeArg(audit.At), audit.Actor, audit.Command, args, -1)
		if err != nil {
			return err
		}
		id, err = res.LastInsertId()
		return err
	})
	if err != nil {
		return 0, wrap("prune inbox: raise horizon", err)
	}
	total := int64(0)
	for {
		var n int64
		err := s.inTx(ctx, nil, func(tx *sql.Tx) error {
			var err error
			if n, err = s.pruneRecords(ctx, tx, consumer, horizon, limit); err != nil || n >= int64(limit) {
				return err
			}
			_, err = tx.ExecContext(ctx, s.q.auditSetRows, total+n, id)
			return err
		})
		if err != nil {
			return int(total), wrap("prune inbox", err)
		}
		total += n
		if n < int64(limit) {
			return int(total), nil
		}
	}
}

// resizeBatch is how many unpublished rows a resize reads, and moves with one statement, at a
// time (3 placeholders per row, far below the 65,535 of a prepared statement).
const resizeBatch = 2000

var _ driver.LaneResizer = (*Store)(nil)

// ResizeLanes implements driver.LaneResizer in one READ COMMITTED transaction: the lane count's
// meta row locked FOR UPDATE first (it waits for the writer transactions whose checked inserts
// hold it LOCK IN SHARE MODE, and holds the next ones back), the publisher row read LOCK IN
// SHARE MODE (a CDC generation refuses; a CDC relay's AcquireGeneration waits), every lane row
// locked in lane order and its lease ended as ResetLanes does, lane rows dropped or added, the
// unpublished rows (pending, retrying, parked) moved resizeBatch at a time to LaneOf(key, lanes)
// while the meta row 'lanes_resize' exists (the immutability trigger allows the lane change
// then; migration 008), the count recorded and the audit row written. It needs migration 008
// (run Migrate): without it, an error wrapping core.ErrSchemaMismatch.
func (s *Store) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	if err := driver.CheckResizeLanes(lanes); err != nil {
		return 0, err
	}
	if _, err := s.LaneCount(ctx); err != nil {
		return 0, err
	}
	var marker string
	if err := s.db.QueryRowContext(ctx, s.q.metaGet, resizeMarker).Scan(&marker); errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("mysql: resize lanes: %w: outbox %s lacks migration 008_lanes_resize (run Migrate)", core.ErrSchemaMismatch, s.names.outbox)
	} else if err != nil {
		return 0, wrap("resize lanes", err)
	}
	var moved int64
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		moved = 0
		old, err := s.readLanes(ctx, tx, s.q.laneCountLocked)
		if err != nil {
			return err
		}
		if old == lanes {
			return nil
		}
		pub, err := scanPublisher(tx.QueryRowContext(ctx, s.q.publisherReadShared))
		if err != nil {
			return s.publisherErr("resize lanes", err)
		}
		if pub.Kind == driver.KindCDC {
			return fmt.Errorf("%w: generation %d held by %q", core.ErrResizeCDC, pub.Generation, pub.Holder)
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeLeases, nil); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeDropLanes, lanes); err != nil {
			return err
		}
		for start := old; start < lanes; start += 500 {
			end := min(start+500, lanes)
			args := make([]any, 0, end-start)
			for l := start; l < end; l++ {
				args = append(args, l)
			}
			if _, err := tx.ExecContext(ctx, s.q.laneInsert+strings.Repeat("(?),", len(args)-1)+"(?)", args...); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeAllow); err != nil {
			return err
		}
		for after := int64(0); ; {
			rows, err := tx.QueryContext(ctx, s.q.resizeRows, after, resizeBatch)
			if err != nil {
				return err
			}
			var seqs []int64
			var to []int
			read := 0
			for rows.Next() {
				read++
				var seq int64
				var key string
				var lane int
				if err := rows.Scan(&seq, &key, &lane); err != nil {
					rows.Close()
					return err
				}
				after = seq
				if l := driver.LaneOf(key, lanes); l != lane {
					seqs, to = append(seqs, seq), append(to, l)
				}
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
			n, err := s.moveLanes(ctx, tx, seqs, to)
			if err != nil {
				return err
			}
			moved += n
			if read < resizeBatch {
				break
			}
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeDisallow); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.laneCountSet, strconv.Itoa(lanes)); err != nil {
			return err
		}
		return s.audit(ctx, tx, &audit, moved)
	})
	if err != nil {
		return 0, wrap("resize lanes", err)
	}
	_ = s.Notify(ctx) // wake local relays: they claim the new lanes at their next round
	return int(moved), nil
}

// moveLanes sets the lane of the unpublished rows seqs to to (one statement; the caller inserted
// the meta row 'lanes_resize' in tx) and returns how many rows changed.
func (s *Store) moveLanes(ctx context.Context, tx *sql.Tx, seqs []int64, to []int) (int64, error) {
	if len(seqs) == 0 {
		return 0, nil
	}
	stmt, err := sqlfile.Idents{"case_list": strings.Repeat("WHEN ? THEN ? ", len(seqs)), "seq_list": placeholders(len(seqs))}.Expand(s.q.resizeMove)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, 3*len(seqs))
	for i, seq := range seqs {
		args = append(args, seq, to[i])
	}
	args = appendInt64s(args, seqs)
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// replayLanes gives the rows a replay put back to pending (seqs) their key's lane under lanes,
// the count the replay read LOCK IN SHARE MODE before selecting them (so no resize runs until it
// ends): a row published before a ResizeLanes still has its lane under the old count, and all
// unpublished rows of a key must share one lane. Without a resize since the rows were written
// no lane changes, and the trigger (perhaps without migration 008) refuses nothing.
func (s *Store) replayLanes(ctx context.Context, tx *sql.Tx, lanes int, targets []driver.ReplayTarget, seqs []int64) error {
	keys := make(map[int64]string, len(targets))
	for _, t := range targets {
		keys[t.Seq] = t.PartitionKey
	}
	to := make([]int, len(seqs))
	for i, seq := range seqs {
		to[i] = driver.LaneOf(keys[seq], lanes)
	}
	if _, err := tx.ExecContext(ctx, s.q.resizeAllow); err != nil {
		return err
	}
	if _, err := s.moveLanes(ctx, tx, seqs, to); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, s.q.resizeDisallow)
	return err
}
