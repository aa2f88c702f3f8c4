package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"strconv"
)

// List implements driver.Admin: records after p.AfterSeq in seq order.
func (s *Store) List(ctx context.Context, p driver.ListParams) ([]driver.Record, error) {
	limit := p.PageSize()
	q := s.q.listPrefix
	switch p.State {
	case driver.StateAll:
	case driver.StatePending:
		q += " " + s.q.listPending
	case driver.StateParked:
		q += " " + s.q.listParked
	case driver.StatePublished:
		q += " " + s.q.listPublished
	default:
		return nil, fmt.Errorf("mysql: list: unknown state %d", p.State)
	}
	args := listPrefixParams{After: p.AfterSeq}.args()
	args = append(args, listEndParams{Limit: limit}.args()...)
	rows, err := s.db.QueryContext(ctx, q+" "+s.q.listEnd, args...)
	if err != nil {
		return nil, wrap("list", err)
	}
	recs, err := scanRecords(rows, min(limit, 1000))
	if err != nil {
		return nil, wrap("list", err)
	}
	return recs, nil
}

// statsExactRows: Stats counts the published rows exactly when InnoDB estimates the table at
// fewer rows than this, and estimates them beyond.
const statsExactRows = 100_000

// statsExactUnpublished: Stats counts at most this many unpublished rows, and estimates them
// beyond; Blocked looks at most at this many pending rows.
const statsExactUnpublished = 10_000

// Stats implements driver.Admin with index scans of at most 10,000 unpublished rows. Pending is
// exact up to there and otherwise the optimizer's estimate; Published is exact in a table
// InnoDB estimates at fewer than 100,000 rows and otherwise an estimate from InnoDB's table
// statistics (see the Stats statement in queries.sql).
func (s *Store) Stats(ctx context.Context) (driver.Stats, error) {
	var st driver.Stats
	var unpublished, rows int64
	var oldest sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q.stats, statsParams{Limit: statsExactUnpublished, Table: s.names.outbox}.args()...).Scan(&unpublished, &st.Parked, &rows, &oldest); err != nil {
		return driver.Stats{}, wrap("stats", err)
	}
	if unpublished >= statsExactUnpublished {
		est, err := s.pendingEstimate(ctx)
		if err != nil {
			return driver.Stats{}, wrap("stats", err)
		}
		unpublished = max(unpublished, est)
	}
	st.Pending = max(unpublished-st.Parked, 0)
	st.Published = max(rows-unpublished, 0)
	if rows < statsExactRows {
		if err := s.db.QueryRowContext(ctx, s.q.statsPublished).Scan(&st.Published); err != nil {
			return driver.Stats{}, wrap("stats", err)
		}
	}
	st.OldestPendingAt = nullTime(oldest)
	return st, nil
}

// pendingEstimate reads the "rows" column of the optimizer's plan of the unpublished rows.
func (s *Store) pendingEstimate(ctx context.Context) (int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.pendingEstimate)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	var est int64
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return 0, err
		}
		for i, c := range cols {
			if c == "rows" && vals[i].Valid {
				n, err := strconv.ParseInt(vals[i].String, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("pending estimate: rows %q: %w", vals[i].String, err)
				}
				est = max(est, n)
			}
		}
	}
	return est, rows.Err()
}

// Blocked returns how many pending (unpublished, not parked) records wait behind an earlier
// parked record of their partition key, among the first 10,000 pending records after the first
// parked one (a lower bound beyond them).
func (s *Store) Blocked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.q.blocked, blockedParams{Limit: statsExactUnpublished}.args()...).Scan(&n); err != nil {
		return 0, wrap("blocked", err)
	}
	return n, nil
}

// Lanes returns every lane's lease as the lanes table holds it, in lane order: a free lane has
// no Owner. TakenOver is never set.
func (s *Store) Lanes(ctx context.Context) ([]driver.Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.q.lanes)
	if err != nil {
		return nil, wrap("lanes", err)
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		var l driver.Lease
		var until sql.NullTime
		if err := rows.Scan(&l.Lane, &l.Owner, &l.Generation, &until); err != nil {
			return nil, wrap("lanes", err)
		}
		l.Until = nullTime(until)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("lanes", err)
	}
	return out, nil
}

// Unpark implements driver.Admin. The key's lane is computed from the recorded lane count.
func (s *Store) Unpark(ctx context.Context, partitionKey string) (int, error) {
	lanes, err := s.LaneCount(ctx)
	if err != nil {
		return 0, err
	}
	res, err := s.exec(ctx, s.q.unpark, unparkParams{Lane: driver.LaneOf(partitionKey, lanes), PartitionKey: partitionKey}.args()...)
	if err != nil {
		return 0, wrap("unpark", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, wrap("unpark", err)
	}
	return int(n), nil
}

// PruneOutbox implements driver.Pruner: it deletes, in seq order, up to p.BatchSize() rows published
// before p.PublishedBefore whose seq is below p.BelowSeq (when > 0) and below the lowest
// pending seq: first records published since migration 010 (their settle log time before the
// cut-off, checked again on the locked log rows), then records published before it (their
// published_at).
func (s *Store) PruneOutbox(ctx context.Context, p driver.PruneParams) (int, error) {
	if p.PublishedBefore.IsZero() {
		return 0, nil
	}
	below, err := s.pruneBelow(ctx, s.db, p)
	if err != nil {
		return 0, wrap("prune outbox", err)
	}
	var n int64
	err = s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		var err error
		n, err = s.pruneBatch(ctx, tx, p, below)
		return err
	})
	if err != nil {
		return 0, wrap("prune outbox", err)
	}
	return int(n), nil
}

// pruneBatch deletes up to p.BatchSize() published rows below below in tx (see PruneOutbox) and
// returns how many outbox rows it deleted: fewer only when none is left to delete (core's cleanup
// stops then). The settle log rows it reads may yield fewer deletions than rows (orphans, whose
// outbox row is already gone, are deleted alone; a record replayed since the read is spared), so
// it reads again until it has its batch, the log is exhausted, or a read brings no progress (in
// a REPEATABLE READ transaction a replay committed since its snapshot stays invisible to the
// read), then deletes records published before migration 010 for the rest.
func (s *Store) pruneBatch(ctx context.Context, tx *sql.Tx, p driver.PruneParams, below int64) (int64, error) {
	limit := int64(p.BatchSize())
	cut := timeArg(p.PublishedBefore)
	var n int64
	for n < limit {
		want := limit - n
		seqs, err := queryInt64s(ctx, tx, s.q.pruneSettledIDs, pruneSettledIDsParams{Below: below, Before: cut, Limit: want}.args()...)
		if err != nil || len(seqs) == 0 {
			if err != nil {
				return 0, err
			}
			break
		}
		query, args := pruneSettledParams{Seqs: seqs, Before: cut}.query(s.q.pruneSettled)
		res, err := tx.ExecContext(ctx, s.markPrefix+query, args...)
		if err != nil {
			return 0, err
		}
		pairs, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		n += pairs / 2 // an outbox row and its settle log row each
		query, args = pruneSettledOrphansParams{Seqs: seqs}.query(s.q.pruneSettledOrphans)
		res, err = tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, err
		}
		orphans, err := res.RowsAffected()
		if err != nil {
			return 0, err
		}
		if int64(len(seqs)) < want || pairs+orphans == 0 {
			break // the log is exhausted below the watermark and cut-off, or no progress
		}
	}
	if n == limit {
		return n, nil
	}
	res, err := tx.ExecContext(ctx, s.markPrefix+s.q.pruneOutbox, pruneOutboxParams{Before: cut, Below: below, Limit: limit - n}.args()...)
	if err != nil {
		return 0, err
	}
	legacy, err := res.RowsAffected()
	return n + legacy, err
}

// pruneBelow is the exclusive seq bound of a prune: the lowest pending seq (the watermark), or
// p.BelowSeq when that is lower.
func (s *Store) pruneBelow(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, p driver.PruneParams) (int64, error) {
	var low sql.NullInt64
	if err := q.QueryRowContext(ctx, s.q.minUnpublished).Scan(&low); err != nil {
		return 0, err
	}
	below := int64(1<<63 - 1)
	if low.Valid {
		below = low.Int64
	}
	if p.BelowSeq > 0 && p.BelowSeq < below {
		below = p.BelowSeq
	}
	return below, nil
}

// ParkedKeys implements driver.Admin.
func (s *Store) ParkedKeys(ctx context.Context) ([]string, error) {
	keys, err := queryStrings(ctx, s.db, s.q.parkedKeys)
	if err != nil {
		return nil, wrap("parked keys", err)
	}
	return keys, nil
}

// PendingDestinations returns how many pending (unpublished, not parked) records each
// destination has among the first limit pending records in seq order (ix_unpublished, as
// Blocked): the whole backlog when it is smaller. Operators only (outboxkit status).
func (s *Store) PendingDestinations(ctx context.Context, limit int) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.pendingDestinations, pendingDestinationsParams{Limit: limit}.args()...)
	if err != nil {
		return nil, wrap("pending destinations", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			return nil, wrap("pending destinations", err)
		}
		out[d] = n
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("pending destinations", err)
	}
	return out, nil
}
