package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// InTx implements driver.Transactor: fn runs in one transaction (the *sql.DB's default
// isolation, REPEATABLE READ unless configured otherwise). When the server picks the
// transaction as a deadlock victim, the whole of fn runs again in a new transaction, at most
// Options.DeadlockRetries times; fn must therefore keep its effects inside tx.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	err := s.inTx(ctx, nil, func(tx *sql.Tx) error { return fn(ctx, tx) })
	if err != nil && isDeadlock(err) {
		return fmt.Errorf("mysql: transaction: %w", classify(err))
	}
	return err
}

// Horizon implements driver.InboxStore with a consistent read and no lock. Inbox.Process calls
// it after InsertRecord and runs only locking statements before it, so it is the transaction's
// first consistent read and its snapshot (REPEATABLE READ) or statement (READ COMMITTED) sees
// every horizon committed before the insert.
func (s *Store) Horizon(ctx context.Context, tx *sql.Tx, consumer string) (time.Time, error) {
	if err := nilTx("horizon", tx); err != nil {
		return time.Time{}, err
	}
	var h sql.NullTime
	err := tx.QueryRowContext(ctx, s.q.horizonGet, horizonGetParams{Consumer: consumer}.args()...).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, wrap("horizon", err)
	}
	return nullTime(h), nil
}

// InboxConsumers implements driver.StatusReader: the names and horizons in one read, then
// each consumer's record count up to limit (MariaDB has no correlated derived table to count
// them in the same statement).
func (s *Store) InboxConsumers(ctx context.Context, limit int) ([]driver.InboxConsumer, error) {
	limit = max(limit, 1)
	rows, err := s.db.QueryContext(ctx, s.q.inboxConsumerNames, inboxConsumerNamesParams{Consumers: driver.MaxInboxConsumers}.args()...)
	if err != nil {
		return nil, wrap("inbox consumers", err)
	}
	var out []driver.InboxConsumer
	for rows.Next() {
		var c driver.InboxConsumer
		var h sql.NullTime
		if err := rows.Scan(&c.Consumer, &h); err != nil {
			rows.Close()
			return nil, wrap("inbox consumers", err)
		}
		c.Horizon = nullTime(h)
		out = append(out, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, wrap("inbox consumers", err)
	}
	for i := range out {
		c := &out[i]
		err := s.db.QueryRowContext(ctx, s.q.inboxConsumerCount, inboxConsumerCountParams{Consumer: c.Consumer, Limit: limit + 1}.args()...).Scan(&c.Records)
		if err != nil {
			return nil, wrap("inbox consumers", err)
		}
		if c.Records > int64(limit) {
			c.Records, c.More = int64(limit), true
		}
	}
	return out, nil
}

// InsertRecord implements driver.InboxStore with INSERT IGNORE on the primary key (consumer,
// event_id, source, tenant), the record's key (Consumer, Source, Tenant, EventID): a concurrent
// transaction holding the same key makes it wait; when the row exists it is read with a shared
// lock (the latest committed version, whatever tx's snapshot). Records of the event ID under
// another source or tenant are other rows and neither wait nor are read.
func (s *Store) InsertRecord(ctx context.Context, tx *sql.Tx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	if err := nilTx("insert record", tx); err != nil {
		return driver.InboxRecord{}, false, err
	}
	res, err := tx.ExecContext(ctx, s.q.insertRecord, insertRecordParams{Consumer: rec.Consumer, Source: rec.Source, Tenant: rec.Tenant,
		EventID: rec.EventID, Digest: rec.Digest[:], SourcePosition: rec.SourcePosition, Outcome: int(rec.Outcome),
		OccurredAt: timeArg(rec.OccurredAt)}.args()...)
	if err != nil {
		return driver.InboxRecord{}, false, wrap("insert record", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return driver.InboxRecord{}, false, wrap("insert record", err)
	}
	if n == 1 {
		return driver.InboxRecord{}, true, nil
	}
	ex, err := s.readRecord(ctx, tx, rec.Consumer, rec.EventID, s.q.readRecord, readRecordParams{Consumer: rec.Consumer, Source: rec.Source,
		Tenant: rec.Tenant, EventID: rec.EventID}.args())
	if errors.Is(err, sql.ErrNoRows) {
		return driver.InboxRecord{}, false, fmt.Errorf("mysql: insert record: ignored, yet no row for consumer %q source %q tenant %q event %s",
			rec.Consumer, rec.Source, rec.Tenant, rec.EventID)
	}
	if err != nil {
		return driver.InboxRecord{}, false, wrap("insert record", err)
	}
	return ex, false, nil
}

// readRecord reads an inbox record of consumer and eventID through q (a transaction or the pool) with
// query and args, ReadRecord (one key) or ReadRecordByID (an event ID of any source and
// tenant); sql.ErrNoRows when there is none.
func (s *Store) readRecord(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, consumer, eventID, query string, args []any) (driver.InboxRecord, error) {
	ex := driver.InboxRecord{Consumer: consumer, EventID: eventID}
	var digest []byte
	var outcome int
	var occurred sql.NullTime
	if err := q.QueryRowContext(ctx, query, args...).Scan(&ex.Source, &ex.Tenant, &digest, &ex.SourcePosition,
		&outcome, &occurred, &ex.ProcessedAt); err != nil {
		return driver.InboxRecord{}, err
	}
	if len(digest) != len(ex.Digest) {
		return driver.InboxRecord{}, fmt.Errorf("stored digest has %d bytes", len(digest))
	}
	copy(ex.Digest[:], digest)
	ex.Outcome = core.Outcome(outcome)
	ex.OccurredAt = nullTime(occurred)
	ex.ProcessedAt = ex.ProcessedAt.UTC()
	return ex, nil
}

// InboxRecords implements reconcile.InboxReader: the records of consumer among ids, by event
// ID (absent IDs omitted), read outside any transaction, one ID at a time. The key of a record
// also holds its source and tenant: when records of several sources or tenants share an event
// ID, the one returned for it is any one of them (the one without source and tenant when there
// is one, else the first by source and tenant), with its Source and Tenant set.
func (s *Store) InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error) {
	out := make(map[string]driver.InboxRecord, len(ids))
	for _, id := range ids {
		rec, err := s.readRecord(ctx, s.db, consumer, id, s.q.readRecordByID, readRecordByIDParams{Consumer: consumer, EventID: id}.args())
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, wrap("inbox records", err)
		}
		out[id] = rec
	}
	return out, nil
}

// LockVersion implements driver.InboxStore. It creates the (consumer, entity) row when missing
// (version NULL) with INSERT ... ON DUPLICATE KEY UPDATE, which takes an exclusive row lock in
// both cases, so concurrent messages of one entity queue up instead of deadlocking.
func (s *Store) LockVersion(ctx context.Context, tx *sql.Tx, consumer, entity string) (int64, bool, error) {
	if err := nilTx("lock version", tx); err != nil {
		return 0, false, err
	}
	if _, err := tx.ExecContext(ctx, s.q.versionEnsure, versionEnsureParams{Consumer: consumer, Entity: entity}.args()...); err != nil {
		return 0, false, wrap("lock version", err)
	}
	var v sql.NullInt64
	if err := tx.QueryRowContext(ctx, s.q.versionRead, versionReadParams{Consumer: consumer, Entity: entity}.args()...).Scan(&v); err != nil {
		return 0, false, wrap("lock version", err)
	}
	return v.Int64, v.Valid, nil
}

// SetVersion implements driver.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *sql.Tx, consumer, entity string, version int64) error {
	if err := nilTx("set version", tx); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q.versionSet, versionSetParams{Consumer: consumer, Entity: entity, Version: version}.args()...); err != nil {
		return wrap("set version", err)
	}
	return nil
}

// PruneInbox implements driver.InboxStore: it raises the consumer's horizon to before (never
// lowers it) in one autocommit statement, reads it back, and only then deletes up to limit
// records that occurred before it: their IDs read without locks, then the records deleted by
// primary key, so that only the records it deletes are locked. It waits for no delivery in
// progress (see driver.InboxStore for why that is safe), not even one whose handler is still
// running.
func (s *Store) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	if _, err := s.db.ExecContext(ctx, s.q.raiseHorizon, raiseHorizonParams{Consumer: consumer, Horizon: timeArg(before)}.args()...); err != nil {
		return 0, wrap("prune inbox: raise horizon", err)
	}
	var h sql.NullTime
	if err := s.db.QueryRowContext(ctx, s.q.horizonGet, horizonGetParams{Consumer: consumer}.args()...).Scan(&h); err != nil {
		return 0, wrap("prune inbox: read horizon", err)
	}
	horizon := nullTime(h)
	if horizon.IsZero() {
		return 0, nil
	}
	n, err := s.pruneRecords(ctx, s.db, consumer, horizon, driver.PruneLimit(limit))
	if err != nil {
		return 0, wrap("prune inbox", err)
	}
	return int(n), nil
}

// pruneIDChunk is how many records one DELETE of pruneRecords names.
const pruneIDChunk = 5000

// pruneRecords deletes, with q, up to limit of consumer's records (of every source and tenant)
// that occurred before horizon and returns how many it deleted. It reads their keys first
// without locks and then deletes them by their whole primary key, so that it locks only the
// records it deletes: never the record a delivery in progress has inserted and not yet
// committed, not even one of another source or tenant with the same event ID.
func (s *Store) pruneRecords(ctx context.Context, q interface {
	querier
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}, consumer string, horizon time.Time, limit int) (int64, error) {
	keys, err := s.pruneKeys(ctx, q, consumer, horizon, limit)
	if err != nil {
		return 0, err
	}
	var total int64
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), pruneIDChunk)]
		keys = keys[len(chunk):]
		var b strings.Builder
		b.WriteString(s.q.pruneInbox)
		args := pruneInboxParams{Consumer: consumer, Horizon: timeArg(horizon)}.args()
		for i, k := range chunk {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s.q.pruneInboxKey)
			args = append(args, k.args()...)
		}
		b.WriteByte(')')
		res, err := q.ExecContext(ctx, b.String(), args...)
		if err != nil {
			return total, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// pruneKeys reads, without locks, the keys of up to limit of consumer's records that occurred
// before horizon (PruneInboxIDs).
func (s *Store) pruneKeys(ctx context.Context, q querier, consumer string, horizon time.Time, limit int) ([]pruneInboxKeyParams, error) {
	rows, err := q.QueryContext(ctx, s.q.pruneInboxIDs, pruneInboxIDsParams{Consumer: consumer, Horizon: timeArg(horizon), Limit: limit}.args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pruneInboxKeyParams
	for rows.Next() {
		var k pruneInboxKeyParams
		if err := rows.Scan(&k.EventID, &k.Source, &k.Tenant); err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
