package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// stmtCache holds one *sql.Stmt per fixed query text, so that SQLite parses each query once
// per connection instead of once per call (database/sql keeps the per-connection copies).
// Statements are prepared through the pool, and only outside a transaction (see prepare):
// preparing while holding a transaction's connection could wait forever on a pool with one
// connection. A query without a statement runs as text.
type stmtCache struct {
	mu sync.Mutex // serialises prepare and Close
	m  atomic.Pointer[map[string]*sql.Stmt]
	// complete is set once every cached query has its statement; until then prepare tries
	// the missing ones again at most once per retryPrepare (retryAt, Unix nanoseconds).
	complete atomic.Bool
	retryAt  atomic.Int64
}

// retryPrepare is how long prepare waits before it tries again the queries it could not
// prepare: those of tables that do not exist (an inbox-only database has no outbox tables), or
// a database not migrated yet. Each failed attempt costs a parse of the query.
const retryPrepare = 5 * time.Second

// prepare prepares the cached queries. It is called before a transaction begins. The queries
// it cannot prepare run as text, and it tries them again after retryPrepare, so that an
// inbox-only database keeps the inbox's statements and does not parse the outbox's queries
// at every transaction.
func (s *Store) prepare(ctx context.Context) {
	c := &s.stmts
	if c.complete.Load() || time.Now().UnixNano() < c.retryAt.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.complete.Load() || time.Now().UnixNano() < c.retryAt.Load() {
		return
	}
	m := make(map[string]*sql.Stmt, len(s.q.cached))
	if old := c.m.Load(); old != nil {
		maps.Copy(m, *old)
	}
	missing := 0
	for _, q := range s.q.cached {
		if m[q] != nil {
			continue
		}
		st, err := s.db.PrepareContext(ctx, q)
		if err != nil {
			missing++
			continue
		}
		m[q] = st
	}
	c.m.Store(&m)
	if missing == 0 {
		c.complete.Store(true)
	} else {
		c.retryAt.Store(time.Now().Add(retryPrepare).UnixNano())
	}
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
	c.complete.Store(false)
	c.retryAt.Store(0)
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
