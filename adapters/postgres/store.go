package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/core"
	odriver "github.com/outboxkit/outbox/core/driver"
)

// Store is the PostgreSQL adapter. TTx is the caller's transaction type: pgx.Tx for New,
// *sql.Tx for NewSQL. Both run the same SQL. A Store is safe for concurrent use.
type Store[TTx any] struct {
	o   Options
	n   names
	q   *queries
	log *slog.Logger

	db     querier           // autocommit statements
	txq    func(TTx) querier // statements in the caller's transaction
	inTx   func(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error
	listen func(ctx context.Context, fn func(l listener) error) error // a dedicated connection
	// connConfig returns a copy of the connection settings of the pool or database, for the
	// replication connections of the change source (package logical).
	connConfig func(ctx context.Context) (*pgconn.Config, error)

	lanesSet bool                   // Options.Lanes was given (Migrate then insists on it)
	checked  atomic.Bool            // migration 0007 applied: inserts are checked (InsertLanes)
	database atomic.Pointer[string] // current_database(), learned by LaneCount: inserts in a transaction on another database insert nothing
	live     sync.Map               // owner -> int32: server process id of its sign of life (HoldLiveness)

	notifyPending, notifyRunning atomic.Bool
	notifySent                   atomic.Int64 // NOTIFY statements sent (tests)
	notifyLast                   atomic.Int64 // when the last NOTIFY began, Unix nanoseconds (notifySpacing)

	fetched atomic.Int64 // records the last Fetch returned: the room the next one allocates
}

// Interface checks.
var (
	_ odriver.OutboxStore[pgx.Tx]   = (*Store[pgx.Tx])(nil)
	_ odriver.InboxStore[pgx.Tx]    = (*Store[pgx.Tx])(nil)
	_ odriver.OutboxStore[*sql.Tx]  = (*Store[*sql.Tx])(nil)
	_ odriver.InboxStore[*sql.Tx]   = (*Store[*sql.Tx])(nil)
	_ odriver.RelayStore            = (*Store[pgx.Tx])(nil)
	_ odriver.Pruner                = (*Store[pgx.Tx])(nil)
	_ odriver.PartitionPruner       = (*Store[pgx.Tx])(nil)
	_ odriver.PartitionPruner       = (*Store[*sql.Tx])(nil)
	_ odriver.Admin                 = (*Store[pgx.Tx])(nil)
	_ odriver.Notifier              = (*Store[pgx.Tx])(nil)
	_ odriver.Flusher               = (*Store[pgx.Tx])(nil)
	_ odriver.Flusher               = (*Store[*sql.Tx])(nil)
	_ odriver.Waker                 = (*Store[pgx.Tx])(nil)
	_ odriver.RelayStore            = (*Store[*sql.Tx])(nil)
	_ odriver.CDCStore              = (*Store[pgx.Tx])(nil)
	_ odriver.CDCStore              = (*Store[*sql.Tx])(nil)
	_ odriver.Waker                 = (*Store[*sql.Tx])(nil)
	_ odriver.LaneResizer           = (*Store[pgx.Tx])(nil)
	_ odriver.LaneResizer           = (*Store[*sql.Tx])(nil)
	_ odriver.LaneInserter[pgx.Tx]  = (*Store[pgx.Tx])(nil)
	_ odriver.LaneInserter[*sql.Tx] = (*Store[*sql.Tx])(nil)
)

// New returns a Store on a pgx pool; writers and the inbox use pgx.Tx. opts may be nil.
// It does not touch the database: call Migrate to create or check the schema.
func New(pool *pgxpool.Pool, opts *Options) (*Store[pgx.Tx], error) {
	if pool == nil {
		return nil, &core.OptionError{Field: "pool", Reason: "must not be nil"}
	}
	s, err := newStore[pgx.Tx](opts)
	if err != nil {
		return nil, err
	}
	s.db = pgxQ{pool}
	s.txq = func(tx pgx.Tx) querier {
		if tx == nil {
			return nilTxQ{}
		}
		return pgxQ{tx}
	}
	s.inTx = func(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
		return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return fn(ctx, tx) })
	}
	s.listen = func(ctx context.Context, fn func(listener) error) error {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conn := c.Hijack() // LISTEN state must not go back to the pool
		defer conn.Close(context.WithoutCancel(ctx))
		return fn(pgxListener{conn})
	}
	s.connConfig = func(context.Context) (*pgconn.Config, error) {
		return pool.Config().ConnConfig.Config.Copy(), nil
	}
	return s, nil
}

// NewSQL returns a Store on a database/sql handle opened with pgx's stdlib driver
// (github.com/jackc/pgx/v5/stdlib); writers and the inbox use *sql.Tx. opts may be nil.
func NewSQL(db *sql.DB, opts *Options) (*Store[*sql.Tx], error) {
	if db == nil {
		return nil, &core.OptionError{Field: "db", Reason: "must not be nil"}
	}
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, &core.OptionError{Field: "db", Reason: "must use the pgx stdlib driver (github.com/jackc/pgx/v5/stdlib)"}
	}
	s, err := newStore[*sql.Tx](opts)
	if err != nil {
		return nil, err
	}
	s.db = sqlQ{db}
	s.txq = func(tx *sql.Tx) querier {
		if tx == nil {
			return nilTxQ{}
		}
		return sqlQ{tx}
	}
	s.inTx = func(ctx context.Context, fn func(context.Context, *sql.Tx) error) (err error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		done := false
		defer func() {
			if !done {
				_ = tx.Rollback()
			}
		}()
		if err := fn(ctx, tx); err != nil {
			return err
		}
		done = true
		return tx.Commit()
	}
	s.listen = func(ctx context.Context, fn func(listener) error) error {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		var ferr error
		err = c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				ferr = fmt.Errorf("unexpected driver connection %T", dc)
				return nil
			}
			ferr = fn(pgxListener{sc.Conn()})
			// Close it (a pool-backed *sql.DB would otherwise put it back in the pool, still
			// LISTENing) and tell database/sql to discard it.
			_ = sc.Conn().Close(context.WithoutCancel(ctx))
			return driver.ErrBadConn
		})
		if ferr != nil {
			return ferr
		}
		if err != nil && !errors.Is(err, driver.ErrBadConn) {
			return err
		}
		return nil
	}
	s.connConfig = func(ctx context.Context) (*pgconn.Config, error) {
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		var cfg *pgconn.Config
		err = c.Raw(func(dc any) error {
			sc, ok := dc.(*stdlib.Conn)
			if !ok {
				return fmt.Errorf("unexpected driver connection %T", dc)
			}
			cfg = sc.Conn().Config().Config.Copy()
			return nil
		})
		return cfg, err
	}
	return s, nil
}

func newStore[TTx any](opts *Options) (*Store[TTx], error) {
	o, n, err := opts.resolve()
	if err != nil {
		return nil, err
	}
	q, err := buildQueries(n, o.Partitioning != nil, o.InboxPartitioning != nil)
	if err != nil {
		return nil, err
	}
	return &Store[TTx]{o: o, n: n, q: q, log: o.Logger, lanesSet: opts != nil && opts.Lanes != 0}, nil
}

// InTx runs fn in one transaction, read committed whatever the server's default (the inbox's
// retention check relies on it, see Horizon): commit when fn returns nil, roll back
// otherwise and when fn panics. It implements driver.Transactor.
func (s *Store[TTx]) InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	return s.inTx(ctx, fn)
}
