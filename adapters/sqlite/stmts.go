package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
)

// stmtCache holds one *sql.Stmt per fixed query text, so that SQLite parses each query once
// per connection instead of once per call (database/sql keeps the per-connection copies).
// Statements are prepared together, through the pool, and only outside a transaction (see
// prepare): preparing while holding a transaction's connection could wait forever on a pool
// with one connection. Until they are ready, calls run the query text as is.
type stmtCache struct {
	mu sync.Mutex // serialises prepare and Close
	m  atomic.Pointer[map[string]*sql.Stmt]
}

// prepare prepares every cached query once. It is called before a transaction begins. A
// failure (e.g. the schema is not migrated yet) leaves the cache empty for a later attempt.
func (s *Store) prepare(ctx context.Context) {
	c := &s.stmts
	if c.m.Load() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m.Load() != nil {
		return
	}
	m := make(map[string]*sql.Stmt, len(s.q.cached))
	for _, q := range s.q.cached {
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			for _, st := range m {
				_ = st.Close()
			}
			return
		}
		m[q] = st
	}
	c.m.Store(&m)
}

// stmt returns the prepared statement of q, or nil.
func (s *Store) stmt(q string) *sql.Stmt {
	m := s.stmts.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[q]
}

func (s *Store) exec(ctx context.Context, tx *sql.Tx, q string, args ...any) (sql.Result, error) {
	if st := s.stmt(q); st != nil {
		return tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return tx.ExecContext(ctx, q, args...)
}

func (s *Store) query(ctx context.Context, tx *sql.Tx, q string, args ...any) (*sql.Rows, error) {
	if st := s.stmt(q); st != nil {
		return tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return tx.QueryContext(ctx, q, args...)
}

func (s *Store) queryRow(ctx context.Context, tx *sql.Tx, q string, args ...any) *sql.Row {
	if st := s.stmt(q); st != nil {
		return tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return tx.QueryRowContext(ctx, q, args...)
}

// dbQuery runs a read outside any transaction.
func (s *Store) dbQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s.prepare(ctx)
	if st := s.stmt(q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.db.QueryContext(ctx, q, args...)
}

// Close releases the Store's prepared statements; call it when no other call of the Store is
// running. It does not close the *sql.DB, which belongs to the caller. Closing the *sql.DB
// releases them too, so Close is only needed when the database outlives the Store.
func (s *Store) Close() error {
	c := &s.stmts
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.m.Swap(nil)
	if m == nil {
		return nil
	}
	var errs []error
	for _, st := range *m {
		if err := st.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
