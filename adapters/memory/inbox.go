package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core/driver"
)

// Interface checks.
var _ driver.InboxBatchStore[*Tx] = (*Store)(nil)

// Horizon implements driver.InboxStore. PruneInbox waits for the writer lock that tx holds.
func (s *Store) Horizon(ctx context.Context, tx *Tx, consumer string) (time.Time, error) {
	if err := tx.check(ctx, s); err != nil {
		return time.Time{}, fmt.Errorf("memory: horizon: %w", err)
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
	ex, inserted := s.insertRecord(tx, rec)
	return ex, inserted, nil
}

// insertRecord is InsertRecord in the checked tx.
func (s *Store) insertRecord(tx *Tx, rec driver.InboxRecord) (driver.InboxRecord, bool) {
	k := recordKey{rec.Consumer, rec.Source, rec.Tenant, rec.EventID}
	if ex, ok := tx.inbox[k]; ok {
		return ex, false
	}
	s.mu.Lock()
	ex, ok := s.inbox[k]
	s.mu.Unlock()
	if ok {
		return ex, false
	}
	rec.ProcessedAt = clock(time.Time{})
	if !rec.OccurredAt.IsZero() {
		rec.OccurredAt = rec.OccurredAt.UTC().Truncate(time.Microsecond)
	}
	if tx.inbox == nil {
		tx.inbox = map[recordKey]driver.InboxRecord{}
	}
	tx.inbox[k] = rec
	return driver.InboxRecord{}, true
}

// LockVersion implements driver.InboxStore.
func (s *Store) LockVersion(ctx context.Context, tx *Tx, consumer, entity string) (int64, bool, error) {
	if err := tx.check(ctx, s); err != nil {
		return 0, false, fmt.Errorf("memory: lock version: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.version(tx, consumer, entity)
	return v, ok, nil
}

// version returns the version of (consumer, entity) as tx sees it: tx's own, else the committed
// one. Caller holds s.mu. The writer lock that tx holds keeps every version as it is until tx
// ends.
func (s *Store) version(tx *Tx, consumer, entity string) (int64, bool) {
	k := inboxKey{consumer, entity}
	if v, ok := tx.versions[k]; ok {
		return v, true
	}
	v, ok := s.versions[k]
	return v, ok
}

// SetVersion implements driver.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *Tx, consumer, entity string, version int64) error {
	if err := tx.check(ctx, s); err != nil {
		return fmt.Errorf("memory: set version: %w", err)
	}
	tx.setVersion(consumer, entity, version)
	return nil
}

func (tx *Tx) setVersion(consumer, entity string, version int64) {
	if tx.versions == nil {
		tx.versions = map[inboxKey]int64{}
	}
	tx.versions[inboxKey{consumer, entity}] = version
}

// LockVersions implements driver.InboxBatchStore: LockVersion for each entity (the writer lock
// that tx holds already keeps every version).
func (s *Store) LockVersions(ctx context.Context, tx *Tx, consumer string, entities []string) (map[string]int64, error) {
	if err := tx.check(ctx, s); err != nil {
		return nil, fmt.Errorf("memory: lock versions: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int64, len(entities))
	for _, e := range entities {
		if v, ok := s.version(tx, consumer, e); ok {
			out[e] = v
		}
	}
	return out, nil
}

// InsertRecords implements driver.InboxBatchStore: InsertRecord for each record, in order.
func (s *Store) InsertRecords(ctx context.Context, tx *Tx, recs []driver.InboxRecord) ([]driver.InboxRecord, []bool, error) {
	if err := tx.check(ctx, s); err != nil {
		return nil, nil, fmt.Errorf("memory: insert records: %w", err)
	}
	existing, inserted := make([]driver.InboxRecord, len(recs)), make([]bool, len(recs))
	for i, rec := range recs {
		existing[i], inserted[i] = s.insertRecord(tx, rec)
	}
	return existing, inserted, nil
}

// SetVersions implements driver.InboxBatchStore.
func (s *Store) SetVersions(ctx context.Context, tx *Tx, consumer string, versions map[string]int64) error {
	if err := tx.check(ctx, s); err != nil {
		return fmt.Errorf("memory: set versions: %w", err)
	}
	for e, v := range versions {
		tx.setVersion(consumer, e, v)
	}
	return nil
}

// PruneInbox implements driver.InboxStore. It takes the writer lock, so it waits for open
// transactions (which may have read the horizon) to end.
func (s *Store) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	if err := s.lockWriter(ctx); err != nil {
		return 0, fmt.Errorf("memory: prune inbox: %w", err)
	}
	defer s.unlockWriter()
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
		if k.consumer == consumer && r.OccurredAt.Before(h) {
			delete(s.inbox, k)
			n++
		}
	}
	return n, nil
}

// CheckInbox implements driver.InboxStore: a memory store needs no migration, so it is nil.
func (s *Store) CheckInbox(context.Context) error { return nil }

// InboxRecords implements reconcile.InboxReader: the committed records of consumer among ids,
// by event ID (absent IDs omitted).
func (s *Store) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: inbox records: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	out := make(map[string]driver.InboxRecord, len(ids))
	for k, r := range s.inbox {
		if k.consumer == consumer && want[k.eventID] {
			out[k.eventID] = r
		}
	}
	return out, nil
}
