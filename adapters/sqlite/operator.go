package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"time"
)

// Replay implements driver.Operator in one write transaction (which serialises it with the
// relays' marks and cleanup). SQLite has no change source, so the publisher is never a CDC
// relay.
func (s *Store) Replay(ctx context.Context, p driver.ReplayParams) (int, error) {
	ids, err := driver.CheckReplay(p)
	if err != nil {
		return 0, err
	}
	var n int64
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var rows *sql.Rows
		var err error
		if len(ids) > 0 {
			list, _ := json.Marshal(ids)
			rows, err = tx.QueryContext(ctx, s.q.replayByIDs, string(list))
		} else {
			since := int64(0)
			if !p.Since.IsZero() {
				since = nowMicros(p.Since)
			}
			rows, err = tx.QueryContext(ctx, s.q.replayByKey, p.PartitionKey, since, driver.MaxReplay+1)
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
		list, _ := json.Marshal(seqs)
		res, err := tx.ExecContext(ctx, s.q.replay, string(list))
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.replayForget, string(list)); err != nil {
			return err
		}
		if err := s.replayLanes(ctx, tx, targets); err != nil {
			return err
		}
		return s.audit(ctx, tx, p.Audit, n)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: replay: %w", classify(err))
	}
	_ = s.Notify(ctx) // wake local relays
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
	_, err := tx.ExecContext(ctx, s.q.auditInsert, nowMicros(a.At), a.Actor, a.Command, args, rows)
	return err
}

// UnparkKeys implements driver.Operator.
func (s *Store) UnparkKeys(ctx context.Context, keys []string, audit *driver.AuditEntry) (int, error) {
	var total int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		total = 0
		for _, k := range keys {
			res, err := tx.ExecContext(ctx, s.q.unpark, k)
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
		return 0, fmt.Errorf("sqlite: unpark: %w", classify(err))
	}
	if total > 0 {
		_ = s.Notify(ctx)
	}
	return int(total), nil
}

// PruneAudited implements driver.Operator.
func (s *Store) PruneAudited(ctx context.Context, p driver.PruneParams, audit driver.AuditEntry) (int, error) {
	var total int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		total = 0
		for {
			n, err := s.pruneIn(ctx, tx, p)
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
		return 0, fmt.Errorf("sqlite: prune outbox: %w", classify(err))
	}
	return int(total), nil
}

// AuditLog implements driver.Operator.
func (s *Store) AuditLog(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	since := int64(0)
	if !p.Since.IsZero() {
		since = nowMicros(p.Since)
	}
	rows, err := s.db.QueryContext(ctx, s.q.auditList, since, driver.ListParams{Limit: p.Limit}.PageSize())
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
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// ResetLanes implements driver.Operator: one statement (ResetLanes) and the audit row, in one
// write transaction. SQLite keeps no sign of life on a lane.
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
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.resetLanes, nowMicros(time.Time{}), len(lanes) == 0, intList(lanes), p.Owner)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err != nil {
			return err
		}
		return s.audit(ctx, tx, &audit, n)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: reset lanes: %w", classify(err))
	}
	return int(n), nil
}

// PruneInboxAudited implements driver.Operator in one write transaction: the horizon raise, the
// deletions (limit at a time) and the audit row with the records deleted. SQLite has one
// writer, so no inbox transaction runs beside it: the raise needs no commit of its own ahead
// of the deletions (driver.InboxStore.PruneInbox), and the audit row is never left at -1.
func (s *Store) PruneInboxAudited(ctx context.Context, consumer string, before time.Time, limit int, audit driver.AuditEntry) (int, error) {
	limit, err := driver.CheckInboxPrune(consumer, before, limit)
	if err != nil {
		return 0, err
	}
	var total int64
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		total = 0
		var h int64
		if err := s.queryRow(ctx, tx, s.q.raiseHorizon, consumer, before.UnixMicro()).Scan(&h); err != nil {
			return err
		}
		for {
			res, err := s.exec(ctx, tx, s.q.pruneInbox, consumer, h, limit)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			total += n
			if n < int64(limit) {
				return s.audit(ctx, tx, &audit, total)
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune inbox: %w", classify(err))
	}
	return int(total), nil
}

// replayLanes gives the rows a replay put back to pending their key's lane under the current
// lane count: a row published before a ResizeLanes still has its lane under the old count, and
// all unpublished rows of a key must share one lane.
func (s *Store) replayLanes(ctx context.Context, tx *sql.Tx, targets []driver.ReplayTarget) error {
	var lanes int
	if err := s.queryRow(ctx, tx, s.q.getLanes).Scan(&lanes); err != nil {
		return err
	}
	return s.moveLanes(ctx, tx, func(yield func(seq int64, key string, lane int) bool) error {
		for _, t := range targets {
			if !yield(t.Seq, t.PartitionKey, -1) {
				break
			}
		}
		return nil
	}, lanes, nil)
}

// moveLanes sets the lane of each row rows yields (seq, key, current lane or -1: unknown) to
// driver.LaneOf(key, lanes) under the marker the immutability trigger allows it under, and
// counts the rows whose lane changed in *moved (when not nil).
func (s *Store) moveLanes(ctx context.Context, tx *sql.Tx, rows func(yield func(seq int64, key string, lane int) bool) error, lanes int, moved *int64) error {
	if _, err := tx.ExecContext(ctx, s.q.resizeAllow); err != nil {
		return err
	}
	var ferr error
	err := rows(func(seq int64, key string, lane int) bool {
		to := driver.LaneOf(key, lanes)
		if to == lane {
			return true
		}
		res, err := tx.ExecContext(ctx, s.q.resizeMove, seq, to)
		if err != nil {
			ferr = err
			return false
		}
		if moved != nil {
			n, _ := res.RowsAffected()
			*moved += n
		}
		return true
	})
	if err == nil {
		err = ferr
	}
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q.resizeDone)
	return err
}

// resizeBatch is how many unpublished rows a resize reads at a time.
const resizeBatch = 10_000

// ResizeLanes implements driver.LaneResizer in one write transaction (SQLite's single writer: no
// writer transaction runs beside it, and one whose snapshot predates it cannot write
// afterwards): every lease ended (owner cleared, lease expired, generation incremented), the
// lane rows added or dropped, every unpublished row's lane set to driver.LaneOf(its key, lanes),
// the new count recorded and audit written (Rows: the rows moved).
func (s *Store) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	if err := driver.CheckResizeLanes(lanes); err != nil {
		return 0, err
	}
	if _, err := s.LaneCount(ctx); err != nil {
		return 0, err
	}
	var moved int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		moved = 0
		var old int
		if err := s.queryRow(ctx, tx, s.q.getLanes).Scan(&old); err != nil {
			return err
		}
		if old == lanes {
			return nil
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeLeases, nowMicros(time.Time{})); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeDropLanes, lanes); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.resizeAddLanes, lanes); err != nil {
			return err
		}
		type row struct {
			seq  int64
			key  string
			lane int
		}
		for after := int64(0); ; {
			r, err := tx.QueryContext(ctx, s.q.resizeRows, after, resizeBatch)
			if err != nil {
				return err
			}
			var batch []row
			for r.Next() {
				var x row
				if err := r.Scan(&x.seq, &x.key, &x.lane); err != nil {
					r.Close()
					return err
				}
				batch = append(batch, x)
			}
			if err := r.Close(); err != nil {
				return err
			}
			if err := r.Err(); err != nil {
				return err
			}
			if len(batch) == 0 {
				break
			}
			after = batch[len(batch)-1].seq
			err = s.moveLanes(ctx, tx, func(yield func(int64, string, int) bool) error {
				for _, x := range batch {
					if !yield(x.seq, x.key, x.lane) {
						break
					}
				}
				return nil
			}, lanes, &moved)
			if err != nil {
				return err
			}
			if len(batch) < resizeBatch {
				break
			}
		}
		if _, err := tx.ExecContext(ctx, s.q.lanesUpdate, lanes); err != nil {
			return err
		}
		return s.audit(ctx, tx, &audit, moved)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: resize lanes: %w", classify(err))
	}
	_ = s.Notify(ctx) // wake local relays
	return int(moved), nil
}
