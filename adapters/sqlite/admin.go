package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// PruneOutbox implements driver.Pruner. In one transaction it reads the lowest unpublished seq
// (the lowest queue row) and deletes up to p.Limit published rows below it (and below
// p.BelowSeq when > 0) whose publication time is before p.PublishedBefore (a zero
// PublishedBefore means now), read on the publications' time index; the delete trigger takes
// their publication rows along.
func (s *Store) PruneOutbox(ctx context.Context, p driver.PruneParams) (int, error) {
	var n int64
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var err error
		n, err = s.pruneIn(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune outbox: %w", classify(err))
	}
	return int(n), nil
}

// pruneIn is one batch of PruneOutbox in tx.
func (s *Store) pruneIn(ctx context.Context, tx *sql.Tx, p driver.PruneParams) (int64, error) {
	below := int64(math.MaxInt64)
	var minPending sql.NullInt64
	if err := s.queryRow(ctx, tx, s.q.minPending).Scan(&minPending); err != nil {
		return 0, err
	}
	if minPending.Valid {
		below = minPending.Int64
	}
	if p.BelowSeq > 0 {
		below = min(below, p.BelowSeq)
	}
	res, err := s.exec(ctx, tx, s.q.prune, pruneParams{Before: nowMicros(p.PublishedBefore), Below: below, Limit: p.BatchSize()}.args()...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// List implements driver.Admin: records with Seq > p.AfterSeq in seq order, filtered by p.State,
// at most p.PageSize().
func (s *Store) List(ctx context.Context, p driver.ListParams) ([]driver.Record, error) {
	if p.State < driver.StateAll || p.State > driver.StatePublished {
		return nil, &core.OptionError{Field: "State", Reason: fmt.Sprintf("unknown state %d", p.State)}
	}
	limit := p.PageSize()
	rows, err := s.db.QueryContext(ctx, s.q.list[p.State], listAllParams{After: p.AfterSeq, Limit: limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", classify(err))
	}
	recs, err := scanRecords(rows, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list: %w", classify(err))
	}
	return recs, nil
}

// statsExactPublished is how many published rows Stats counts exactly; beyond it Published is
// an estimate.
const statsExactPublished = 100_000

// Stats implements driver.Admin with scans of the queue (the unpublished rows) only. Published is exact
// up to 100,000 rows and beyond that an estimate from the seq range (see the Stats statement in
// queries.sql).
func (s *Store) Stats(ctx context.Context) (driver.Stats, error) {
	var st driver.Stats
	var unpublished, published, span int64
	var oldest sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.stats, statsParams{Limit: statsExactPublished}.args()...).Scan(&unpublished, &st.Parked, &published, &span, &oldest); err != nil {
		return driver.Stats{}, fmt.Errorf("sqlite: stats: %w", classify(err))
	}
	st.Pending = unpublished - st.Parked
	st.Published = published
	if published >= statsExactPublished {
		st.Published = max(published, span-unpublished)
	}
	st.OldestPendingAt = fromNullMicros(oldest)
	return st, nil
}

// Blocked returns how many pending (unpublished, not parked) records wait behind an earlier
// parked record of their partition key (index lookups from the parked records on).
func (s *Store) Blocked(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, s.q.blocked).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: blocked: %w", classify(err))
	}
	return n, nil
}

// Lanes returns every lane's lease as the lanes table holds it, in lane order: a free lane has
// no Owner. TakenOver is never set.
func (s *Store) Lanes(ctx context.Context) ([]driver.Lease, error) {
	rows, err := s.db.QueryContext(ctx, s.q.lanesList)
	if err != nil {
		return nil, fmt.Errorf("sqlite: lanes: %w", classify(err))
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		var l driver.Lease
		var until int64
		if err := rows.Scan(&l.Lane, &l.Owner, &l.Generation, &until); err != nil {
			return nil, fmt.Errorf("sqlite: lanes: %w", classify(err))
		}
		if until != 0 {
			l.Until = fromMicros(until)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: lanes: %w", classify(err))
	}
	return out, nil
}

// Unpark implements driver.Admin. It returns how many unpublished records of the key were
// parked or waiting for a retry.
func (s *Store) Unpark(ctx context.Context, partitionKey string) (int, error) {
	res, err := s.db.ExecContext(ctx, s.q.unpark, unparkParams{PartitionKey: partitionKey}.args()...)
	if err != nil {
		return 0, fmt.Errorf("sqlite: unpark: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: unpark: %w", classify(err))
	}
	if n > 0 {
		_ = s.Notify(ctx) // the key is deliverable again: wake local relays
	}
	return int(n), nil
}

// ParkedKeys implements driver.Admin.
func (s *Store) ParkedKeys(ctx context.Context) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, s.q.parkedKeys)
	if err != nil {
		return nil, fmt.Errorf("sqlite: parked keys: %w", classify(err))
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("sqlite: parked keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: parked keys: %w", classify(err))
	}
	return keys, nil
}

// PendingDestinations returns how many pending (unpublished, not parked) records each
// destination has among the first limit pending records in seq order (the queue): the
// whole backlog when it is smaller. Operators only (outboxkit status).
func (s *Store) PendingDestinations(ctx context.Context, limit int) (map[string]int64, error) {
	rows, err := s.db.QueryContext(ctx, s.q.pendingDest, pendingDestParams{Limit: limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: pending destinations: %w", classify(err))
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("sqlite: pending destinations: %w", classify(err))
		}
		out[d] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: pending destinations: %w", classify(err))
	}
	return out, nil
}

// PublishRate returns the records published per second over the last window, read from at
// most limit of the most recent ones on the publications' time index: when more were published in the
// window, the rate is that of the last limit records (over the time they took). ok is always
// true. Published rows already deleted (cleanup, a relay that deletes on publish) are not
// counted. Operators only (outboxkit status).
func (s *Store) PublishRate(ctx context.Context, window time.Duration, limit int) (rate float64, ok bool, err error) {
	now := time.Now()
	var n int64
	var oldest sql.NullInt64
	if err := s.db.QueryRowContext(ctx, s.q.pubRecent, pubRecentParams{After: nowMicros(now.Add(-window)), Limit: limit}.args()...).Scan(&n, &oldest); err != nil {
		return 0, false, fmt.Errorf("sqlite: publish rate: %w", classify(err))
	}
	if n >= int64(limit) {
		window = max(now.Sub(fromNullMicros(oldest)), time.Millisecond)
	}
	return float64(n) / window.Seconds(), true, nil
}
