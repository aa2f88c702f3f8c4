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

// Stats counts the outbox rows (a full scan: an operator's call, not a hot path).
func (s *Store[TTx]) Stats(ctx context.Context) (core.Stats, error) {
	var st core.Stats
	var oldest pgtype.Timestamptz
	if err := queryRow(ctx, s.db, s.q.stats, nil, &st.Pending, &st.Parked, &st.Published, &oldest); err != nil {
		return core.Stats{}, fmt.Errorf("postgres: stats: %w", classify(err))
	}
	st.OldestPendingAt = tsOut(oldest)
	return st, nil
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
