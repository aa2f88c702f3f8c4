package postgres

import (
	"database/sql"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/core"
)

// ErrSlotActive means a ChangeSource's replication slot is in use by another connection (another
// relay streams from it): Start and Resume wait logical.Options.SlotBusyTimeout for it to be released
// and then fail with an error wrapping ErrSlotActive.
var ErrSlotActive = errors.New("postgres: replication slot is active in another connection")

// ClassifyError is the adapter's one mapping of PostgreSQL's errors (every error of a Store
// went through it; cmd/outboxkit applies it to its own statements' errors): an undefined
// table, function or schema (SQLSTATE 42P01, 42883, 3F000: the schema is not migrated; the
// fetch is a function of migration 0001) is a *core.NotMigratedError (core.ErrSchemaMismatch,
// with the remedy), missing privileges
// (42501) wrap core.ErrPermissionDenied, an ended transaction wraps core.ErrInvalidTx; the
// *pgconn.PgError stays reachable with errors.As. Other errors are returned as they are.
func ClassifyError(err error) error {
	if err == nil || errors.Is(err, core.ErrSchemaMismatch) || errors.Is(err, core.ErrInvalidTx) || errors.Is(err, core.ErrPermissionDenied) {
		return err
	}
	if pg := pgError(err); pg != nil {
		switch pg.Code {
		case "42P01", "42883", "3F000": // undefined_table, undefined_function, invalid_schema_name
			return &core.NotMigratedError{Err: err}
		case "42501": // insufficient_privilege
			return fmt.Errorf("%w: %w", core.ErrPermissionDenied, err)
		}
	}
	if errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("%w: %w", core.ErrInvalidTx, err)
	}
	return err
}

// classify is ClassifyError under the short name the package's files use.
func classify(err error) error { return ClassifyError(err) }

// isNilTx reports whether tx is a nil interface (pgx.Tx) or a nil pointer (*sql.Tx).
func isNilTx(tx any) bool {
	if tx == nil {
		return true
	}
	v := reflect.ValueOf(tx)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// ErrPooledConnection means a feature that needs a server session of its own (the sign of life
// of HoldLiveness, the LISTEN connection of Wakeups, the replication connection of package
// logical) was given a connection through a connection pooler such as PgBouncer, which runs a
// client's statements on whichever server connection is free (pool_mode=transaction) and
// answers for the server. Wakeups and HoldLiveness detect it (the BackendKeyData of the
// connection names another process than pg_backend_pid()) and fail with an error wrapping
// ErrPooledConnection; relays then log why and go on without the feature (polling, leases
// alone). Connect those features directly to PostgreSQL, or set Options.PoolerKeepsSessions
// for a pooler in session mode.
var ErrPooledConnection = errors.New("postgres: the connection goes through a connection pooler")
