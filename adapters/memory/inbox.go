package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testhook"
)

// Horizon implements driver.InboxStore. PruneInbox waits for the writer lock that tx holds.
func (s *Store) Horizon(ctx context.Context, tx *Tx, consumer string) (time.Time, error) {
	if err := tx.check(ctx, s); err != nil {
		return time.Time{}, fmt.Errorf("memory: horizon: %w", err)
	}
	if tx.horizons != nil {
		return tx.horizons[consumer], nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.horizons[consumer], nil
}

// InsertRecord implements driver.InboxStore.
func (s *Store) InsertRecord(ctx context.Context, tx *Tx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	if err := tx.check(ctx, s); err != nil {
		return driver.InboxRecord{}, false, fmt.Errorf("memory: insert record: %w", err)
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
		tx.inbox = map[inboxKey]driver.InboxRecord{}
	}
	tx.inbox[k] = rec
	return driver.InboxRecord{}, true, nil
}

// LockVersion implements driver.InboxStore.
func (s *Store) LockVersion(ctx context.Context, tx *Tx, consumer, entity string) (int64, bool, error) {
	if err := tx.check(ctx, s); err != nil {
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

// SetVersion implements driver.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *Tx, consumer, entity string, version int64) error {
	if err := tx.check(ctx, s); err != nil {
		return fmt.Errorf("memory: set version: %w", err)
	}
	if tx.versions == nil {
		tx.versions = map[inboxKey]int64{}
	}
	tx.versions[inboxKey{consumer, entity}] = version
	return nil
}

// PruneInbox implements driver.InboxStore. It takes the writer lock, so it waits for open
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
	limit = driver.PruneLimit(limit)
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

// CheckInbox implements driver.InboxStore: a memory store needs no migration, so it is nil.
func (s *Store) CheckInbox(context.Context) error { return nil }
