package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testhook"
)

// Horizon implements core.InboxStore. PruneInbox waits for the writer lock that tx holds.
func (s *Store) Horizon(ctx context.Context, tx *Tx, consumer string) (time.Time, error) {
	if err := tx.check(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: horizon: %w", err)
	}
	if tx.horizons != nil {
		return tx.horizons[consumer], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.horizons[consumer], nil
}

// InsertRecord implements core.InboxStore.
func (s *Store) InsertRecord(ctx context.Context, tx *Tx, rec core.InboxRecord) (core.InboxRecord, bool, error) {
	if err := tx.check(ctx); err != nil {
		return core.InboxRecord{}, false, fmt.Errorf("memory: insert record: %w", err)
	}
	k := inboxKey{rec.Consumer, rec.EventID}
	if s.fault != testhook.FaultNoInboxKey {
		if ex, ok := tx.inbox[k]; ok {
			return ex, false, nil
		}
		s.mu.Lock()
		ex, ok := s.inbox[k]
		s.mu.Unlock()
		if ok {
			return ex, false, nil
		}
	}
	rec.ProcessedAt = clock(time.Time{})
	if !rec.OccurredAt.IsZero() {
		rec.OccurredAt = rec.OccurredAt.UTC().Truncate(time.Microsecond)
	}
	if tx.inbox == nil {
		tx.inbox = map[inboxKey]core.InboxRecord{}
	}
	tx.inbox[k] = rec
	return core.InboxRecord{}, true, nil
}

// LockVersion implements core.InboxStore.
func (s *Store) LockVersion(ctx context.Context, tx *Tx, consumer, entity string) (int64, bool, error) {
	if err := tx.check(ctx); err != nil {
		return 0, false, fmt.Errorf("memory: lock version: %w", err)
	}
	k := inboxKey{consumer, entity}
	if v, ok := tx.versions[k]; ok {
		return v, true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[k]
	return v, ok, nil
}

// SetVersion implements core.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *Tx, consumer, entity string, version int64) error {
	if err := tx.check(ctx); err != nil {
		return fmt.Errorf("memory: set version: %w", err)
	}
	if tx.versions == nil {
		tx.versions = map[inboxKey]int64{}
	}
	tx.versions[inboxKey{consumer, entity}] = version
	return nil
}

// PruneInbox implements core.InboxStore. It takes the writer lock, so it waits for open
// transactions (which may have read the horizon) to end.
func (s *Store) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	if s.fault != testhook.FaultStaleHorizon {
		if err := s.lockWriter(ctx); err != nil {
			return 0, fmt.Errorf("memory: prune inbox: %w", err)
		}
		defer s.unlockWriter()
	} else if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: prune inbox: %w", err)
	}
	limit = core.PruneLimit(limit)
	before = before.UTC().Truncate(time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.horizons[consumer]
	if before.After(h) {
		h = before
		s.horizons[consumer] = h
	}
	n := 0
	for k, r := range s.inbox {
		if n >= limit {
			break
		}
		if k.a == consumer && r.OccurredAt.Before(h) {
			delete(s.inbox, k)
			n++
		}
	}
	return n, nil
}

// LockVersions implements core.InboxBatchStore: LockVersion for each entity.
func (s *Store) LockVersions(ctx context.Context, tx *Tx, consumer string, entities []string) (map[string]int64, error) {
	out := make(map[string]int64, len(entities))
	for _, e := range entities {
		v, ok, err := s.LockVersion(ctx, tx, consumer, e)
		if err != nil {
			return nil, err
		}
		if ok {
			out[e] = v
		}
	}
	return out, nil
}

// InsertRecords implements core.InboxBatchStore: InsertRecord for each record.
func (s *Store) InsertRecords(ctx context.Context, tx *Tx, recs []core.InboxRecord) ([]core.InboxRecord, []bool, error) {
	existing, inserted := make([]core.InboxRecord, len(recs)), make([]bool, len(recs))
	for i, rec := range recs {
		var err error
		if existing[i], inserted[i], err = s.InsertRecord(ctx, tx, rec); err != nil {
			return nil, nil, err
		}
	}
	return existing, inserted, nil
}

// SetVersions implements core.InboxBatchStore: SetVersion for each entity.
func (s *Store) SetVersions(ctx context.Context, tx *Tx, consumer string, versions map[string]int64) error {
	for e, v := range versions {
		if err := s.SetVersion(ctx, tx, consumer, e, v); err != nil {
			return err
		}
	}
	return nil
}
