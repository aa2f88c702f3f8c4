package postgres

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
)

// PruneOutbox deletes up to p.BatchSize() published rows published before p.PublishedBefore and below
// both p.BelowSeq (when > 0) and the lowest unpublished seq. One statement.
func (s *Store[TTx]) PruneOutbox(ctx context.Context, p core.PruneParams) (int, error) {
	below := p.BelowSeq
	if below <= 0 {
		below = math.MaxInt64
	}
	n, err := s.db.exec(ctx, s.q.pruneOutbox, occurredIn(p.PublishedBefore), below, p.BatchSize())
	if err != nil {
		return 0, fmt.Errorf("postgres: prune outbox: %w", classify(err))
	}
	return int(n), nil
}

// List returns records after p.AfterSeq in seq order, filtered by p.State.
func (s *Store[TTx]) List(ctx context.Context, p core.ListParams) ([]core.Record, error) {
	if p.State < core.StateAll || p.State > core.StatePublished {
		return nil, fmt.Errorf("postgres: list: unknown state %d", p.State)
	}
	recs, err := scanRecords(s.db.query(ctx, s.q.list[p.State], p.AfterSeq, p.PageSize()))
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

// Stats counts the outbox rows with index scans of at most 10,000 unpublished rows. Pending is
// exact up to there and otherwise the planner's estimate; Published is exact in a table of at
// most 16 MiB and otherwise an estimate from the table statistics (see the Stats statement in
// queries.sql).
func (s *Store[TTx]) Stats(ctx context.Context) (core.Stats, error) {
	var st core.Stats
	var unpublished, rows, bytes int64
	var nullFrac float64
	var oldest pgtype.Timestamptz
	if err := queryRow(ctx, s.db, s.q.stats, []any{statsExactUnpublished}, &unpublished, &st.Parked, &rows, &bytes, &nullFrac, &oldest); err != nil {
		return core.Stats{}, fmt.Errorf("postgres: stats: %w", classify(err))
	}
	if unpublished >= statsExactUnpublished {
		unpublished = max(unpublished, int64(nullFrac*float64(rows)))
	}
	st.Pending = max(unpublished-st.Parked, 0)
	st.Published = max(rows-unpublished, 0)
	if bytes <= statsExactBytes {
		if err := queryRow(ctx, s.db, s.q.statsExact, nil, &st.Published); err != nil {
			return core.Stats{}, fmt.Errorf("postgres: stats: %w", classify(err))
		}
	}
	st.OldestPendingAt = tsOut(oldest)
	return st, nil
}

// Blocked returns how many pending (unpublished, not parked) records wait behind an earlier
// parked record of their partition key, among the first 10,000 pending records after the first
// parked one (a lower bound beyond them). It reads the failed and the pending index.
func (s *Store[TTx]) Blocked(ctx context.Context) (int64, error) {
	var n int64
	if err := queryRow(ctx, s.db, s.q.blocked, []any{statsExactUnpublished}, &n); err != nil {
		return 0, fmt.Errorf("postgres: blocked: %w", classify(err))
	}
	return n, nil
}

// Lanes returns every lane's lease as the lanes table holds it, in lane order: a free lane has
// no Owner (its Until is the last lease's expiry). TakenOver is never set.
func (s *Store[TTx]) Lanes(ctx context.Context) ([]core.Lease, error) {
	rows, err := s.db.query(ctx, s.q.lanesList)
	if err != nil {
		return nil, fmt.Errorf("postgres: lanes: %w", classify(err))
	}
	defer rows.Close()
	var out []core.Lease
	for rows.Next() {
		var l core.Lease
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

// ParkedKeys implements core.Admin.
func (s *Store[TTx]) ParkedKeys(ctx context.Context) ([]string, error) {
	rows, err := s.db.query(ctx, s.q.parkedKeys)
	if err != nil {
		return nil, fmt.Errorf("postgres: parked keys: %w", err)
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
		return nil, fmt.Errorf("postgres: parked keys: %w", err)
	}
	return keys, nil
}

// Unpark clears ParkedAt, NextAttemptAt and Attempts of the key's unpublished records that have
// any of them set, and returns how many changed.
func (s *Store[TTx]) Unpark(ctx context.Context, partitionKey string) (int, error) {
	n, err := s.db.exec(ctx, s.q.unpark, partitionKey)
	if err != nil {
		return 0, fmt.Errorf("postgres: unpark: %w", classify(err))
	}
	return int(n), nil
}
