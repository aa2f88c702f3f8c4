package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core/driver"
)

// minUnpublished returns the lowest Seq of an unpublished row, 0 when none. Caller holds s.mu.
func (s *Store) minUnpublished() int64 {
	var m int64
	for _, rs := range s.unpub {
		if len(rs) > 0 && (m == 0 || rs[0].Seq < m) {
			m = rs[0].Seq
		}
	}
	return m
}

// PruneOutbox implements driver.Pruner.
func (s *Store) PruneOutbox(ctx context.Context, p driver.PruneParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: prune outbox: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.prune(p)), nil
}

// prune deletes up to p.BatchSize() rows that PruneOutbox may delete under p and returns them
// (their Seq negated). Caller holds s.mu.
func (s *Store) prune(p driver.PruneParams) []*driver.Record {
	limit := p.BatchSize()
	low := s.minUnpublished()
	var gone []*driver.Record
	for _, r := range s.rows {
		if len(gone) >= limit {
			break
		}
		if p.BelowSeq > 0 && r.Seq >= p.BelowSeq {
			break
		}
		if low > 0 && r.Seq >= low {
			break
		}
		if r.PublishedAt.IsZero() || !r.PublishedAt.Before(p.PublishedBefore) {
			continue
		}
		r.Seq = -r.Seq
		gone = append(gone, r)
	}
	if len(gone) > 0 {
		for _, r := range gone {
			delete(s.ids, r.ID)
		}
		s.rows = slices.DeleteFunc(s.rows, func(r *driver.Record) bool { return r.Seq < 0 })
		for lane := range s.unpub {
			s.unpub[lane] = slices.DeleteFunc(s.unpub[lane], func(r *driver.Record) bool { return r.Seq < 0 })
		}
	}
	return gone
}

// List implements driver.Admin: records with Seq > p.AfterSeq in Seq order, at most p.Limit
// (p.PageSize()). It starts at p.AfterSeq (a binary search), as a database's index does, so
// that paging through a large outbox while a writer appends to it ends.
func (s *Store) List(ctx context.Context, p driver.ListParams) ([]driver.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list: %w", err)
	}
	limit := p.PageSize()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []driver.Record
	from, _ := slices.BinarySearchFunc(s.rows, p.AfterSeq+1, func(r *driver.Record, seq int64) int { return cmpInt64(abs(r.Seq), seq) })
	for _, r := range s.rows[from:] {
		if len(out) >= limit {
			break
		}
		if r.Seq <= p.AfterSeq || !matches(r, p.State) {
			continue
		}
		out = append(out, cloneRecord(r))
	}
	return out, nil
}

func matches(r *driver.Record, st driver.RecordState) bool {
	switch st {
	case driver.StatePending:
		return r.PublishedAt.IsZero() && r.ParkedAt.IsZero()
	case driver.StateParked:
		return r.PublishedAt.IsZero() && !r.ParkedAt.IsZero()
	case driver.StatePublished:
		return !r.PublishedAt.IsZero()
	}
	return true
}

// Stats implements driver.Admin.
func (s *Store) Stats(ctx context.Context) (driver.Stats, error) {
	if err := ctx.Err(); err != nil {
		return driver.Stats{}, fmt.Errorf("memory: stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var st driver.Stats
	for _, r := range s.rows {
		switch {
		case !r.PublishedAt.IsZero():
			st.Published++
		case !r.ParkedAt.IsZero():
			st.Parked++
		default:
			st.Pending++
			if st.OldestPendingAt.IsZero() || r.CreatedAt.Before(st.OldestPendingAt) {
				st.OldestPendingAt = r.CreatedAt
			}
		}
	}
	return st, nil
}

// Unpark implements driver.Admin. It counts the unpublished records of the key that had
// ParkedAt, NextAttemptAt or Attempts set.
func (s *Store) Unpark(ctx context.Context, partitionKey string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: unpark: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unpark(partitionKey, nil), nil
}

// unpark is Unpark with s.mu held; save (when not nil) is called with each record before it
// changes.
func (s *Store) unpark(partitionKey string, save func(r *driver.Record)) int {
	n := 0
	for _, rs := range s.unpub {
		for _, r := range rs {
			if r.PartitionKey != partitionKey || (r.ParkedAt.IsZero() && r.NextAttemptAt.IsZero() && r.Attempts == 0) {
				continue
			}
			if save != nil {
				save(r)
			}
			r.ParkedAt, r.NextAttemptAt, r.Attempts = time.Time{}, time.Time{}, 0
			n++
		}
	}
	if n > 0 {
		s.log.Info("memory_unparked", "partition_key", partitionKey, "records", n)
	}
	return n
}

// ParkedKeys implements driver.Admin.
func (s *Store) ParkedKeys(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: parked keys: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var keys []string
	for _, rs := range s.unpub {
		for _, r := range rs {
			if !r.ParkedAt.IsZero() && !seen[r.PartitionKey] {
				seen[r.PartitionKey] = true
				keys = append(keys, r.PartitionKey)
			}
		}
	}
	return keys, nil
}
