package sqlite

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

// LaneCount implements driver.OutboxStore and driver.RelayStore: the lane count recorded by
// Migrate (or by the last ResizeLanes), read at every call. An unmigrated database returns an
// error wrapping core.ErrSchemaMismatch.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	var n int
	err := s.db.QueryRowContext(ctx, s.q.getLanes).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("sqlite: lane count: %w", &core.NotMigratedError{Missing: "no lane count recorded"})
	}
	if err != nil {
		return 0, fmt.Errorf("sqlite: lane count: %w", classify(err))
	}
	if err := s.learnFile(ctx); err != nil {
		return 0, fmt.Errorf("sqlite: lane count: %w", err)
	}
	return n, nil
}

// maxVariables is SQLite's bound-parameter limit (SQLITE_MAX_VARIABLE_NUMBER) in
// modernc.org/sqlite.
const maxVariables = 32766

// insertChunkRows is how many rows one INSERT statement carries.
var insertChunkRows = maxVariables / insertArity

// Insert implements driver.OutboxStore. All records are written or none: when they need more
// than one statement, the statements run inside a SAVEPOINT that is rolled back on error,
// leaving tx usable. A duplicate ID (or aggregate version, with UniqueAggregateVersion)
// returns an error wrapping core.ErrDuplicateEvent.
//
// tx must be a live transaction on this Store's database file (through any *sql.DB): a nil or
// ended transaction, or (once LaneCount has run, as core.NewOutbox does) one of another
// database, returns an error wrapping core.ErrInvalidTx and writes nothing.
//
// Cancelling ctx never ends the caller's transaction: SQLite's interrupt, which database/sql
// issues when the context of a running statement ends, rolls back the whole enclosing
// transaction, after which the caller's later statements would run outside it. Insert
// therefore checks ctx before each of its statements and returns ctx's error (having undone its
// own earlier statements), but never interrupts a statement that is running.
//
// Insert does not check the records' lanes against the lane count: core.Outbox uses InsertLanes.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []driver.Record) error {
	return s.insert(ctx, tx, 0, records)
}

// InsertLanes implements driver.LaneInserter: Insert after reading the recorded lane count in tx,
// which writes nothing and returns an error wrapping core.ErrLaneCountChanged (tx stays usable)
// when it is not lanes. SQLite has one writer: a transaction that wrote holds a ResizeLanes
// back until it ends, and one whose read snapshot is older than a resize cannot write at all
// (SQLITE_BUSY_SNAPSHOT), so the count read is the one the insert commits under.
func (s *Store) InsertLanes(ctx context.Context, tx *sql.Tx, lanes int, records []driver.Record) error {
	return s.insert(ctx, tx, lanes, records)
}

func (s *Store) insert(ctx context.Context, tx *sql.Tx, lanes int, records []driver.Record) error {
	if tx == nil {
		return fmt.Errorf("sqlite: insert: %w: nil transaction", core.ErrInvalidTx)
	}
	if len(records) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	// From here on no statement is interrupted (see above); ctx is checked between them.
	sctx := context.WithoutCancel(ctx)
	if err := s.checkTx(sctx, tx); err != nil {
		return err
	}
	if lanes > 0 {
		var n int
		err := s.queryRow(sctx, tx, s.q.getLanes).Scan(&n)
		if err != nil && !errors.Is(err, sql.ErrTxDone) && s.stmt(s.q.getLanes) != nil {
			// A transaction of another *sql.DB cannot use this Store's prepared statement
			// (as in checkTx).
			err = tx.QueryRowContext(sctx, s.q.getLanes).Scan(&n)
		}
		if err != nil {
			return fmt.Errorf("sqlite: insert: lane count: %w", classify(err))
		}
		if n != lanes {
			return fmt.Errorf("sqlite: insert: %w: lanes computed with %d lanes, the outbox has %d", core.ErrLaneCountChanged, lanes, n)
		}
	}
	now := nowMicros(time.Time{})
	if len(records) <= insertChunkRows {
		if err := s.insertChunk(sctx, tx, records, now); err != nil {
			return insertError(err)
		}
		return nil
	}
	if _, err := tx.ExecContext(sctx, s.q.spSave); err != nil {
		return fmt.Errorf("sqlite: insert: %w", classify(err))
	}
	for start := 0; start < len(records); start += insertChunkRows {
		end := min(start+insertChunkRows, len(records))
		err := ctx.Err()
		if err == nil {
			err = s.insertChunk(sctx, tx, records[start:end], now)
		}
		if err != nil {
			// Undo the earlier chunks; the caller's transaction stays usable.
			_, rbErr := tx.ExecContext(sctx, s.q.spRollback)
			_, relErr := tx.ExecContext(sctx, s.q.spRelease)
			return errors.Join(insertError(err), rbErr, relErr)
		}
	}
	if _, err := tx.ExecContext(sctx, s.q.spRelease); err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	return nil
}

// checkTx refuses an ended transaction and, once LaneCount has run (see learnFile), one on
// another database file than the Store's.
func (s *Store) checkTx(ctx context.Context, tx *sql.Tx) error {
	var file string
	err := s.queryRow(ctx, tx, s.q.mainFile).Scan(&file)
	if err != nil && !errors.Is(err, sql.ErrTxDone) && s.stmt(s.q.mainFile) != nil {
		// A transaction of another *sql.DB cannot use this Store's prepared statement
		// (database/sql refuses it); ask its database directly.
		err = tx.QueryRowContext(ctx, s.q.mainFile).Scan(&file)
	}
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("sqlite: insert: %w: %w", core.ErrInvalidTx, err)
	}
	if err != nil {
		return fmt.Errorf("sqlite: insert: %w", err)
	}
	if want := s.file.Load(); want != nil && file != *want {
		return fmt.Errorf("sqlite: insert: %w: the transaction is on database %q, the store on %q", core.ErrInvalidTx, file, *want)
	}
	return nil
}

// learnFile records the path of the Store's database file. It runs on the pool, outside any
// transaction (a pool of one connection would otherwise wait forever), when LaneCount first
// reads the lane count, which core.NewOutbox does before any Write.
func (s *Store) learnFile(ctx context.Context) error {
	if s.file.Load() != nil {
		return nil
	}
	s.prepare(ctx) // so that Insert's transaction check runs a prepared statement
	var file string
	if err := s.db.QueryRowContext(ctx, s.q.mainFile).Scan(&file); err != nil {
		return err
	}
	s.file.Store(&file)
	return nil
}

func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, recs []driver.Record, now int64) error {
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
	return fmt.Errorf("sqlite: insert: %w", classify(err))
}
