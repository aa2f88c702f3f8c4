package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// LaneCount implements driver.OutboxStore and driver.RelayStore.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: lane count: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lanes, nil
}

// Insert implements driver.OutboxStore: the records become visible when tx commits.
func (s *Store) Insert(ctx context.Context, tx *Tx, records []driver.Record) error {
	if err := tx.check(ctx, s); err != nil {
		return fmt.Errorf("memory: insert: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	batch := make(map[string]bool, len(records))
	for i := range records {
		r := &records[i]
		if r.Lane < 0 || r.Lane >= s.lanes {
			return fmt.Errorf("memory: insert: event %s: lane %d out of range [0,%d)", r.ID, r.Lane, s.lanes)
		}
		if _, dup := s.ids[r.ID]; dup || tx.ids[r.ID] || batch[r.ID] {
			return fmt.Errorf("memory: insert: event %s: %w", r.ID, core.ErrDuplicateEvent)
		}
		batch[r.ID] = true
	}
	now := clock(time.Time{})
	if tx.ids == nil {
		tx.ids = map[string]bool{}
	}
	for i := range records {
		c := cloneRecord(&records[i])
		s.seq++
		c.Seq = s.seq
		c.CreatedAt = now
		c.PublishedAt, c.NextAttemptAt, c.ParkedAt = time.Time{}, time.Time{}, time.Time{}
		c.Attempts, c.LastError = 0, ""
		tx.inserts = append(tx.inserts, &c)
		tx.ids[c.ID] = true
	}
	return nil
}
