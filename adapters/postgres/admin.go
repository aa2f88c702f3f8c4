package postgres

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/outboxkit/outbox/core/driver"
)

// PruneOutbox deletes up to p.BatchSize() published rows published before p.PublishedBefore and below
// both p.BelowSeq (when > 0) and the lowest unpublished seq. One transaction: a shared lock
// that Replay takes exclusively, then one statement that reads the pending table and the
// settle log in its snapshot and deletes.
func (s *Store[TTx]) PruneOutbox(ctx context.Context, p driver.PruneParams) (int, error) {
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	var n int64
	err := s.withTx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.exec(ctx, s.q.pruneLock, pruneLockParams{Class: s.n.lockKey}.args()...); err != nil {
			return err
		}
		var err error
		n, err = q.exec(ctx, s.q.pruneOutbox, pruneOutboxParams{Before: occurredIn(p.PublishedBefore), Below: below, Limit: p.BatchSize()}.args()...)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: prune outbox: %w", classify(err))
	}
	return int(n), nil
}

// List returns records after p.AfterSeq in seq order, filtered by p.State.
func (s *Store[TTx]) List(ctx context.Context, p driver.ListParams) ([]driver.Record, error) {
	if p.State < driver.StateAll || p.State > driver.StatePublished {
		return nil, fmt.Errorf("postgres: list: unknown state %d", p.State)
	}
	r, err := s.db.query(ctx, s.q.list[p.State], listAllParams{After: p.AfterSeq, Limit: p.PageSize()}.args()...)
	recs, err := scanRecords(r, err, 0)
	if err != nil {
		return nil, fmt.Errorf("postgres: list: %w", classify(err))
	}
	return recs, nil
}

// statsExactBytes: Stats counts the published rows exactly in an outbox table (partitions
// included) of at most this size, and estimates them beyond.
const statsExactBytes = 16 << 20

// statsExactUnpublished: Stats counts at most this many unpublished rows, and estimates them
// beyond; Blocked looks at most at this many pending rows.
const statsExactUnpublished = 10_000

// Stats counts the outbox rows with scans of at most 10,000 pending rows. Pending is
// exact up to there and otherwise the planner's estimate; Published is exact in a table of at
// most 16 MiB and otherwise an estimate from the table statistics (see the Stats statement in
// queries.sql).
func (s *Store[TTx]) Stats(ctx context.Context) (driver.Stats, error) {
	var st driver.Stats
	var unpublished, rows, bytes int64
	var pendingEst int64
	var oldest pgtype.Timestamptz
	if err := queryRow(ctx, s.db, s.q.stats, statsParams{Limit: statsExactUnpublished}.args(), &unpublished, &st.Parked, &rows, &bytes, &pendingEst, &oldest); err != nil {
		return driver.Stats{}, fmt.Errorf("postgres: stats: %w", classify(err))
	}
	if unpublished >= statsExactUnpublished {
		unpublished = max(unpublished, pendingEst)
	}
	st.Pending = max(unpublished-st.Parked, 0)
	st.Published = max(rows-unpublished, 0)
	if bytes <= statsExactBytes {
		if err := queryRow(ctx, s.db, s.q.statsPublished, nil, &st.Published); err != nil {
			return driver.Stats{}, fmt.Errorf("postgres: stats: %w", classify(err))
		}
	}
	st.OldestPendingAt = tsOut(oldest)
	return st, nil
}

// Blocked returns how many pending (unpublished, not parked) records wait behind an earlier
// parked record of their partition key, among the first 10,000 pending records after the first
// parked one (a lower bound beyond them). It reads the pending table and its failed index.
func (s *Store[TTx]) Blocked(ctx context.Context) (int64, error) {
	var n int64
	if err := queryRow(ctx, s.db, s.q.blocked, blockedParams{Limit: statsExactUnpublished}.args(), &n); err != nil {
		return 0, fmt.Errorf("postgres: blocked: %w", classify(err))
	}
	return n, nil
}

// InboxConsumers implements driver.StatusReader.
func (s *Store[TTx]) InboxConsumers(ctx context.Context, limit int) ([]driver.InboxConsumer, error) {
	limit = max(limit, 1)
	rows, err := s.db.query(ctx, s.q.inboxConsumers, inboxConsumersParams{Consumers: driver.MaxInboxConsumers, Limit: limit + 1}.args()...)
	if err != nil {
		return nil, fmt.Errorf("postgres: inbox consumers: %w", classify(err))
	}
	defer rows.Close()
	var out []driver.InboxConsumer
	for rows.Next() {
		var c driver.InboxConsumer
		var h pgtype.Timestamptz
		if err := rows.Scan(&c.Consumer, &h, &c.Records); err != nil {
			return nil, fmt.Errorf("postgres: inbox consumers: %w", err)
		}
		c.Horizon = tsOut(h)
		if c.Records > int64(limit) {
			c.Records, c.More = int64(limit), true
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: inbox consumers: %w", classify(err))
	}
	return out, nil
}

// Lanes returns every lane's lease as the lanes table holds it, in lane order: a free lane has
// no Owner (its Until is the last lease's expiry). TakenOver is never set.
func (s *Store[TTx]) Lanes(ctx context.Context) ([]driver.Lease, error) {
	rows, err := s.db.query(ctx, s.q.lanes)
	if err != nil {
		return nil, fmt.Errorf("postgres: lanes: %w", classify(err))
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		var l driver.Lease
		var until pgtype.Timestamptz
		if err := rows.Scan(&l.Lane, &l.Owner, &l.Generation, &until); err != nil {
			return nil, fmt.Errorf("postgres: lanes: %w", err)
		}
		l.Until = tsOut(until)
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: lanes: %w", classify(err))
	}
	return out, nil
}

// ParkedKeys implements driver.Admin.
func (s *Store[TTx]) ParkedKeys(ctx context.Context) ([]string, error) {
	rows, err := s.db.query(ctx, s.q.parkedKeys)
	if err != nil {
		return nil, fmt.Errorf("postgres: parked keys: %w", classify(err))
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("postgres: parked keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: parked keys: %w", classify(err))
	}
	return keys, nil
}

// Unpark clears ParkedAt, NextAttemptAt and Attempts of the key's unpublished records that have
// any of them set, and returns how many changed.
func (s *Store[TTx]) Unpark(ctx context.Context, partitionKey string) (int, error) {
	n, err := s.db.exec(ctx, s.q.unpark, unparkParams{PartitionKey: partitionKey}.args()...)
	if err != nil {
		return 0, fmt.Errorf("postgres: unpark: %w", classify(err))
	}
	return int(n), nil
}

// PendingDestinations returns how many pending (unpublished, not parked) records each
// destination has among the first limit pending records in seq order (the pending index, as
// Blocked): the whole backlog when it is smaller. Operators only (outboxkit status).
func (s *Store[TTx]) PendingDestinations(ctx context.Context, limit int) (map[string]int64, error) {
	rows, err := s.db.query(ctx, s.q.pendingDest, pendingDestParams{Limit: limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("postgres: pending destinations: %w", classify(err))
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var d string
		var n int64
		if err := rows.Scan(&d, &n); err != nil {
			return nil, fmt.Errorf("postgres: pending destinations: %w", err)
		}
		out[d] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: pending destinations: %w", classify(err))
	}
	return out, nil
}

// PublishRate returns the records published per second over the last window (by the database's
// clock), read from the settle log (migration 0008) for about limit of the most recent ones:
// when more were published in the window, the rate is that of the last ones read (over the time
// they took). ok is false, with nothing else read, when the outbox has no settle log (not
// migrated by this version). Records published by a relay that deletes on publish are not
// logged, hence not counted. Operators only (outboxkit status).
func (s *Store[TTx]) PublishRate(ctx context.Context, window time.Duration, limit int) (rate float64, ok bool, err error) {
	if err := queryRow(ctx, s.db, s.q.indexExists, indexExistsParams{Index: s.n.schema + "." + s.n.settledAtIdx}.args(), &ok); err != nil || !ok {
		if err != nil {
			err = fmt.Errorf("postgres: publish rate: %w", classify(err))
		}
		return 0, false, err
	}
	var n int64
	var oldest, now pgtype.Timestamptz
	if err := queryRow(ctx, s.db, s.q.publishedRecent, publishedRecentParams{Window: window.Seconds(), Limit: limit}.args(), &n, &oldest, &now); err != nil {
		return 0, false, fmt.Errorf("postgres: publish rate: %w", classify(err))
	}
	return recentRate(n, limit, window, tsOut(now).Sub(tsOut(oldest))), true, nil
}

// recentRate is n records over window, or, when n reached limit (more were published in the
// window), over span, the time the n most recent ones took.
func recentRate(n int64, limit int, window, span time.Duration) float64 {
	if n >= int64(limit) {
		window = max(span, time.Millisecond)
	}
	return float64(n) / window.Seconds()
}
