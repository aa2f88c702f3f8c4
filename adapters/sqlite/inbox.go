package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// InTx implements driver.Transactor. The transaction takes SQLite's write lock with its first
// statement (whatever the DSN's _txlock), so inbox transactions, including concurrent
// deliveries of one message, run one at a time and never fail on a lock upgrade. fn must use
// tx, not the *sql.DB, and must not call the Store's other write methods (InTx, Settle,
// ClaimLanes, ...): they wait for the write lock this transaction holds.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	tx, err := s.beginWrite(ctx, s.q.inboxWriteLock)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", classify(err))
	}
	defer s.unlockWrite()
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: commit: %w", classify(err))
	}
	committed = true
	return nil
}

// Horizon implements driver.InboxStore. Inside InTx the transaction holds the write lock, which
// keeps PruneInbox out until it ends.
func (s *Store) Horizon(ctx context.Context, tx *sql.Tx, consumer string) (time.Time, error) {
	if err := checkInboxTx(tx); err != nil {
		return time.Time{}, fmt.Errorf("sqlite: horizon: %w", err)
	}
	var h int64
	err := s.queryRow(ctx, tx, s.q.horizon, horizonParams{Consumer: consumer}.args()...).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("sqlite: horizon: %w", classify(err))
	}
	return fromMicros(h), nil
}

// InboxConsumers implements driver.StatusReader: the names and horizons in one read, then
// each consumer's record count up to limit.
func (s *Store) InboxConsumers(ctx context.Context, limit int) ([]driver.InboxConsumer, error) {
	limit = max(limit, 1)
	rows, err := s.db.QueryContext(ctx, s.q.inboxConsumerNames, inboxConsumerNamesParams{Consumers: driver.MaxInboxConsumers}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: inbox consumers: %w", classify(err))
	}
	var out []driver.InboxConsumer
	for rows.Next() {
		var c driver.InboxConsumer
		var h sql.NullInt64
		if err := rows.Scan(&c.Consumer, &h); err != nil {
			rows.Close()
			return nil, fmt.Errorf("sqlite: inbox consumers: %w", classify(err))
		}
		if h.Valid {
			c.Horizon = fromMicros(h.Int64)
		}
		out = append(out, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("sqlite: inbox consumers: %w", classify(err))
	}
	for i := range out {
		c := &out[i]
		err := s.db.QueryRowContext(ctx, s.q.inboxConsumerCount, inboxConsumerCountParams{Consumer: c.Consumer, Limit: limit + 1}.args()...).Scan(&c.Records)
		if err != nil {
			return nil, fmt.Errorf("sqlite: inbox consumers: %w", classify(err))
		}
		if c.Records > int64(limit) {
			c.Records, c.More = int64(limit), true
		}
	}
	return out, nil
}

// InsertRecord implements driver.InboxStore. The record's key is (Consumer, Source, Tenant,
// EventID), the inbox table's primary key (inbox migration 0002): the same event ID under
// another source or tenant is another record. Inside InTx the write lock makes a concurrent
// delivery of the same key wait and then find the record.
func (s *Store) InsertRecord(ctx context.Context, tx *sql.Tx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	if err := checkInboxTx(tx); err != nil {
		return driver.InboxRecord{}, false, fmt.Errorf("sqlite: insert inbox record: %w", err)
	}
	res, err := s.exec(ctx, tx, s.q.insertInbox, insertInboxParams{
		Consumer: rec.Consumer, Source: rec.Source, Tenant: rec.Tenant, EventID: rec.EventID, Digest: rec.Digest[:],
		SourcePosition: rec.SourcePosition, Outcome: int(rec.Outcome), OccurredAt: nullMicros(rec.OccurredAt),
		ProcessedAt: nowMicros(time.Time{}),
	}.args()...)
	if err != nil {
		return driver.InboxRecord{}, false, fmt.Errorf("sqlite: insert inbox record: %w", classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return driver.InboxRecord{}, false, fmt.Errorf("sqlite: insert inbox record: %w", classify(err))
	}
	if n == 1 {
		return driver.InboxRecord{}, true, nil
	}
	ex := driver.InboxRecord{Consumer: rec.Consumer, Source: rec.Source, Tenant: rec.Tenant, EventID: rec.EventID}
	err = scanInbox(s.queryRow(ctx, tx, s.q.selectInbox, selectInboxParams{
		Consumer: rec.Consumer, Source: rec.Source, Tenant: rec.Tenant, EventID: rec.EventID,
	}.args()...), &ex)
	if err != nil {
		return driver.InboxRecord{}, false, fmt.Errorf("sqlite: read inbox record: %w", classify(err))
	}
	return ex, false, nil
}

// scanInbox reads a row of the SelectInbox query (or the columns of SelectInboxByIDs after
// the key's, the row given as *sql.Rows) into ex, whose key the caller set.
func scanInbox(row interface{ Scan(...any) error }, ex *driver.InboxRecord, key ...any) error {
	var (
		digest    []byte
		outcome   int
		occurred  sql.NullInt64
		processed int64
	)
	if err := row.Scan(append(key, &digest, &ex.SourcePosition, &outcome, &occurred, &processed)...); err != nil {
		return err
	}
	copy(ex.Digest[:], digest)
	ex.Outcome = core.Outcome(outcome)
	ex.OccurredAt = fromNullMicros(occurred)
	ex.ProcessedAt = fromMicros(processed)
	return nil
}

// LockVersion implements driver.InboxStore. Inside InTx the write lock holds the version.
func (s *Store) LockVersion(ctx context.Context, tx *sql.Tx, consumer, entity string) (int64, bool, error) {
	if err := checkInboxTx(tx); err != nil {
		return 0, false, fmt.Errorf("sqlite: lock version: %w", err)
	}
	var v int64
	err := s.queryRow(ctx, tx, s.q.lockVersion, lockVersionParams{Consumer: consumer, Entity: entity}.args()...).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("sqlite: lock version: %w", classify(err))
	}
	return v, true, nil
}

// SetVersion implements driver.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *sql.Tx, consumer, entity string, version int64) error {
	if err := checkInboxTx(tx); err != nil {
		return fmt.Errorf("sqlite: set version: %w", err)
	}
	if _, err := s.exec(ctx, tx, s.q.setVersion, setVersionParams{lockVersionParams: lockVersionParams{Consumer: consumer, Entity: entity}, Version: version}.args()...); err != nil {
		return fmt.Errorf("sqlite: set version: %w", classify(err))
	}
	return nil
}

// PruneInbox implements driver.InboxStore: in one write transaction it raises the consumer's
// horizon to before (never lowers it) and deletes up to limit records that occurred before the
// horizon (records without OccurredAt count as older than any horizon).
func (s *Store) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	limit = driver.PruneLimit(limit)
	var n int64
	err := s.inboxWriteTx(ctx, func(tx *sql.Tx) error {
		var h int64
		if err := s.queryRow(ctx, tx, s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Before: before.UnixMicro()}.args()...).Scan(&h); err != nil {
			return err
		}
		res, err := s.exec(ctx, tx, s.q.pruneInbox, pruneInboxParams{Consumer: consumer, Horizon: h, Limit: limit}.args()...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: prune inbox: %w", classify(err))
	}
	return int(n), nil
}
