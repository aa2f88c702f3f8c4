package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/core"
)

// querier runs one statement on a pool, a connection or a transaction of either driver, so that
// every operation is written once.
type querier interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	query(ctx context.Context, sql string, args ...any) (rows, error)
}

// rows is what both pgx.Rows and *sql.Rows provide. Scan destinations used by this package
// (int, int64, string, []byte, time.Time, pgtype.Timestamptz, pgtype.Int8) work with both.
type rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

var errNoRows = bridge.ErrNoRows

type pgxQ struct {
	c interface {
		Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	}
}

func (p pgxQ) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := p.c.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (p pgxQ) query(ctx context.Context, sql string, args ...any) (rows, error) {
	return p.c.Query(ctx, sql, args...)
}

type sqlQ struct {
	c interface {
		ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlQ) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (s sqlQ) query(ctx context.Context, query string, args ...any) (rows, error) {
	r, err := s.c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{r}, nil
}

type sqlRows struct{ r *sql.Rows }

func (r sqlRows) Next() bool             { return r.r.Next() }
func (r sqlRows) Scan(dest ...any) error { return r.r.Scan(dest...) }
func (r sqlRows) Err() error             { return r.r.Err() }
func (r sqlRows) Close()                 { _ = r.r.Close() }

// queryRow scans the first row into dest and reads the rest (so that the errors of a
// data-modifying statement surface). No row returns errNoRows.
func queryRow(ctx context.Context, q querier, sql string, args []any, dest ...any) error {
	r, err := q.query(ctx, sql, args...)
	if err != nil {
		return err
	}
	found := false
	for r.Next() {
		if !found {
			if err := r.Scan(dest...); err != nil {
				r.Close()
				return err
			}
			found = true
		}
	}
	r.Close()
	if err := r.Err(); err != nil {
		return err
	}
	if !found {
		return errNoRows
	}
	return nil
}

// pgError returns the server error in err's chain, if any.
func pgError(err error) *pgconn.PgError {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe
	}
	return nil
}

// listener is a dedicated connection that LISTENs.
type listener interface {
	conn() *pgconn.PgConn
	exec(ctx context.Context, sql string) error
	wait(ctx context.Context) error
}

type pgxListener struct{ c *pgx.Conn }

func (l pgxListener) conn() *pgconn.PgConn { return l.c.PgConn() }

func (l pgxListener) exec(ctx context.Context, sql string) error {
	_, err := l.c.Exec(ctx, sql)
	return err
}

func (l pgxListener) wait(ctx context.Context) error {
	_, err := l.c.WaitForNotification(ctx)
	return err
}

// nilTxQ is the querier of a nil caller transaction: every statement fails with
// core.ErrInvalidTx instead of a nil pointer panic.
type nilTxQ struct{}

var errNilTx = fmt.Errorf("%w: nil transaction", core.ErrInvalidTx)

func (nilTxQ) exec(context.Context, string, ...any) (int64, error) { return 0, errNilTx }
func (nilTxQ) query(context.Context, string, ...any) (rows, error) { return nil, errNilTx }
