package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
)

// Horizon returns the consumer's retention horizon (zero when never pruned). It takes no lock:
// in a read committed transaction each statement sees what committed before it began, and
// Inbox.Process calls it after InsertRecord (see core.InboxStore).
func (s *Store[TTx]) Horizon(ctx context.Context, tx TTx, consumer string) (time.Time, error) {
	var h pgtype.Timestamptz
	err := queryRow(ctx, s.txq(tx), s.q.horizonGet, []any{consumer}, &h)
	if errors.Is(err, errNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("postgres: horizon: %w", classify(err))
	}
	return tsOut(h), nil
}

// InsertRecord inserts rec with INSERT ... ON CONFLICT DO NOTHING. A concurrent transaction
// inserting the same key makes it wait on the unique index; when the key exists the existing
// record is read (a new snapshot, read committed) and returned with inserted=false. When that
// record is gone by the time it is read (a concurrent prune deleted it), the insert is tried
// again: the key is free now, and Inbox.Process's horizon check after the insert refuses a
// message older than the horizon the prune raised.
func (s *Store[TTx]) InsertRecord(ctx context.Context, tx TTx, rec core.InboxRecord) (core.InboxRecord, bool, error) {
	q := s.txq(tx)
	for attempt := 1; ; attempt++ {
		var processed time.Time
		err := queryRow(ctx, q, s.q.inboxInsert, []any{rec.Consumer, rec.EventID, rec.Digest[:],
			rec.SourcePosition, int16(rec.Outcome), occurredIn(rec.OccurredAt)}, &processed)
		if err == nil {
			return core.InboxRecord{}, true, nil
		}
		if !errors.Is(err, errNoRows) {
			return core.InboxRecord{}, false, fmt.Errorf("postgres: insert inbox record: %w", classify(err))
		}
		ex, err := s.readRecord(ctx, q, rec.Consumer, rec.EventID)
		if errors.Is(err, errNoRows) && attempt < 3 {
			continue // pruned between the insert and the read
		}
		if err != nil {
			return core.InboxRecord{}, false, fmt.Errorf("postgres: read inbox record: %w", classify(err))
		}
		return ex, false, nil
	}
}

// readRecord reads the inbox record of (consumer, eventID); errNoRows when there is none.
func (s *Store[TTx]) readRecord(ctx context.Context, q querier, consumer, eventID string) (core.InboxRecord, error) {
	var (
		digest              []byte
		outcome             int64
		occurred, processed time.Time
	)
	ex := core.InboxRecord{Consumer: consumer, EventID: eventID}
	if err := queryRow(ctx, q, s.q.inboxGet, []any{consumer, eventID},
		&digest, &ex.SourcePosition, &outcome, &occurred, &processed); err != nil {
		return core.InboxRecord{}, err
	}
	if len(digest) != len(ex.Digest) {
		return core.InboxRecord{}, fmt.Errorf("digest of %d bytes", len(digest))
	}
	copy(ex.Digest[:], digest)
	ex.Outcome = core.Outcome(outcome)
	ex.OccurredAt, ex.ProcessedAt = occurred.UTC(), processed.UTC()
	return ex, nil
}

// InboxRecords implements reconcile.InboxReader: the records of consumer among ids, by event
// ID (absent IDs omitted), read outside any transaction, one ID at a time.
func (s *Store[TTx]) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]core.InboxRecord, error) {
	out := make(map[string]core.InboxRecord, len(ids))
	for _, id := range ids {
		rec, err := s.readRecord(ctx, s.db, consumer, id)
		if errors.Is(err, errNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("postgres: inbox records: %w", classify(err))
		}
		out[id] = rec
	}
	return out, nil
}

// occurredIn stores the zero time as 0001-01-01 UTC, which is older than any horizon.
func occurredIn(t time.Time) time.Time {
	return t.Truncate(time.Microsecond).UTC()
}

// LockVersion returns the entity's last applied version and holds its row FOR UPDATE until tx
// ends (creating a row without a version first when missing).
func (s *Store[TTx]) LockVersion(ctx context.Context, tx TTx, consumer, entity string) (int64, bool, error) {
	q := s.txq(tx)
	var v pgtype.Int8
	err := queryRow(ctx, q, s.q.versionGet, []any{consumer, entity}, &v)
	if errors.Is(err, errNoRows) {
		if _, err = q.exec(ctx, s.q.versionEnsure, consumer, entity); err == nil {
			err = queryRow(ctx, q, s.q.versionGet, []any{consumer, entity}, &v)
		}
	}
	if err != nil {
		return 0, false, fmt.Errorf("postgres: lock version: %w", classify(err))
	}
	return v.Int64, v.Valid, nil
}

// SetVersion stores the entity's last applied version.
func (s *Store[TTx]) SetVersion(ctx context.Context, tx TTx, consumer, entity string, version int64) error {
	if _, err := s.txq(tx).exec(ctx, s.q.version, consumer, entity, version); err != nil {
		return fmt.Errorf("postgres: set version: %w", classify(err))
	}
	return nil
}

// PruneInbox raises the consumer's horizon to before (never lowers it) in one autocommit
// statement, then deletes up to limit of its records that occurred before the horizon in a
// second one. It waits for no inbox transaction: those that read the old horizon are safe
// because a deleted record's key can be inserted again only after the deletion committed, and
// their Horizon read comes after that insert (see core.InboxStore).
func (s *Store[TTx]) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	var h time.Time
	if err := queryRow(ctx, s.db, s.q.raiseHorizon, []any{consumer, occurredIn(before)}, &h); err != nil {
		return 0, fmt.Errorf("postgres: prune inbox: raise horizon: %w", classify(err))
	}
	n, err := s.db.exec(ctx, s.q.pruneInbox, consumer, h, core.PruneLimit(limit))
	if err != nil {
		return 0, fmt.Errorf("postgres: prune inbox: %w", classify(err))
	}
	return int(n), nil
}
