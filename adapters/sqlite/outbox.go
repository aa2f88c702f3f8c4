package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// LaneCount implements core.OutboxStore and core.RelayStore: the lane count recorded by
// Migrate. An unmigrated database returns an error wrapping core.ErrSchemaMismatch.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	if n := s.lanes.Load(); n > 0 {
		return int(n), nil
	}
	var n int
	err := s.db.QueryRowContext(ctx, s.q.getLanes).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) || isNoSuchTable(err) {
		return 0, fmt.Errorf("sqlite: lane count: %w: outbox not migrated (%v)", core.ErrSchemaMismatch, err)
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: lane count: %w", err)
	}
	s.lanes.Store(int64(n))
	return n, nil
}

// maxVariables is SQLite's bound-parameter limit (SQLITE_MAX_VARIABLE_NUMBER) in
// modernc.org/sqlite.
const maxVariables = 32766

// insertChunkRows is how many rows one INSERT statement carries.
var insertChunkRows = maxVariables / insertArity

// Insert implements core.OutboxStore. All records are written or none: when they need more
// than one statement, the statements run inside a SAVEPOINT that is rolled back on error,
// leaving tx usable. A duplicate ID (or aggregate version, with UniqueAggregateVersion)
// returns an error wrapping core.ErrDuplicateEvent.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []core.Record) error {
	if len(records) == 0 {
		return nil
	}
	if tx == nil {
		return fmt.Errorf("sqlite: insert: nil transaction")
	}
	now := nowMicros(time.Time{})
	if len(records) <= insertChunkRows {
		if err := s.insertChunk(ctx, tx, records, now); err != nil {
			return insertError(err)
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, s.q.spSave); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	for start := 0; start < len(records); start += insertChunkRows {
		end := min(start+insertChunkRows, len(records))
		if err := s.insertChunk(ctx, tx, records[start:end], now); err != nil {
			// Undo the earlier chunks; the caller's transaction stays usable.
			_, rbErr := tx.ExecContext(context.WithoutCancel(ctx), s.q.spRollback)
			_, relErr := tx.ExecContext(context.WithoutCancel(ctx), s.q.spRelease)
			return errors.Join(insertError(err), rbErr, relErr)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q.spRelease); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	return nil
}

func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, recs []core.Record, now int64) error {
	var b strings.Builder
	b.Grow(len(s.q.insertPrefix) + len(recs)*(len(insertRowPlaceholder)+1))
	b.WriteString(s.q.insertPrefix)
	args := make([]any, 0, len(recs)*insertArity)
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(insertRowPlaceholder)
		headers, err := encodeHeaders(r.Headers)
		if err != nil {
			return err
		}
		args = append(args, r.ID, r.AggregateType, r.AggregateID, r.AggregateVersion, r.Type,
			r.SchemaID, r.PartitionKey, r.Destination, payloadArg(r.Payload), headers, r.Tenant,
			r.CausationID, r.CorrelationID, r.Lane, now)
	}
	_, err := tx.ExecContext(ctx, b.String(), args...)
	return err
}

func insertError(err error) error {
	if isUniqueViolation(err) {
		return fmt.Errorf("sqlite: insert: %w: %w", core.ErrDuplicateEvent, err)
	}
	return fmt.Errorf("sqlite: insert: %w", err)
}
