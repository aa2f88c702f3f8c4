package mysql

import (
	"database/sql"
	"errors"
	"fmt"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
)

// Sentinel errors of this adapter. Errors returned by the Store wrap them (and the driver's
// *mysql.MySQLError, which stays reachable with errors.As).
var (
	// ErrUnsupportedServer: the server is older than MySQL 8.0 or MariaDB 10.6, or its version
	// string cannot be parsed.
	ErrUnsupportedServer = errors.New("mysql: unsupported server version")
	// ErrConnection: the *sql.DB is not configured as the adapter requires (parseTime=true,
	// loc=UTC, a database selected in the DSN).
	ErrConnection = errors.New("mysql: unsupported connection settings")
	// ErrDeadlock: the server chose this transaction as a deadlock victim (error 1213) and the
	// adapter's bounded retries were used up. The transaction was rolled back.
	ErrDeadlock = errors.New("mysql: deadlock")
	// ErrLockWaitTimeout: a row lock was not granted within innodb_lock_wait_timeout (error
	// 1205, also what NOWAIT reports). The transaction was rolled back.
	ErrLockWaitTimeout = errors.New("mysql: lock wait timeout")
)

// MySQL / MariaDB server error numbers the adapter maps.
const (
	errDupEntry        = 1062
	errLockWaitTimeout = 1205
	errLockDeadlock    = 1213
	errNoSuchTable     = 1146
	errBadNull         = 1048 // "Column ... cannot be null"
	errBadField        = 1054 // "Unknown column ..."
	// Missing privileges: on the database, a table, a column; a privilege such as SUPER.
	errDBAccessDenied     = 1044
	errTableAccessDenied  = 1142
	errColumnAccessDenied = 1143
	errSpecificAccess     = 1227
)

func errNumber(err error) uint16 {
	var me *mysqldrv.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func isDeadlock(err error) bool { return errNumber(err) == errLockDeadlock }

// mapped is an error with a sentinel meaning and the original driver error.
type mapped struct {
	sentinel error
	err      error
}

func (m *mapped) Error() string   { return m.sentinel.Error() + ": " + m.err.Error() }
func (m *mapped) Unwrap() []error { return []error{m.sentinel, m.err} }

// ClassifyError is the adapter's one mapping of MySQL/MariaDB errors (every error of a Store
// went through it; cmd/outboxkit applies it to its own statements' errors): a deadlock victim
// (1213) wraps ErrDeadlock, a lock wait timeout (1205) ErrLockWaitTimeout, a missing table
// (1146: not migrated) a *core.NotMigratedError (core.ErrSchemaMismatch, with the remedy),
// missing privileges (1044, 1142, 1143, 1227)
// core.ErrPermissionDenied, an ended transaction core.ErrInvalidTx; the *mysql.MySQLError stays
// reachable with errors.As. Other errors are returned as they are.
func ClassifyError(err error) error {
	if err == nil {
		return nil
	}
	var m *mapped
	if errors.As(err, &m) || errors.Is(err, core.ErrNotMigrated) {
		return err
	}
	switch errNumber(err) {
	case errLockDeadlock:
		return &mapped{sentinel: ErrDeadlock, err: err}
	case errLockWaitTimeout:
		return &mapped{sentinel: ErrLockWaitTimeout, err: err}
	case errNoSuchTable:
		return &core.NotMigratedError{Err: err}
	case errDBAccessDenied, errTableAccessDenied, errColumnAccessDenied, errSpecificAccess:
		return &mapped{sentinel: core.ErrPermissionDenied, err: err}
	}
	if errors.Is(err, sql.ErrTxDone) {
		return &mapped{sentinel: core.ErrInvalidTx, err: err}
	}
	return err
}

// classify is ClassifyError under the short name the package's files use.
func classify(err error) error { return ClassifyError(err) }

// duplicate maps error 1062 of an outbox insert to core.ErrDuplicateEvent.
func duplicate(err error) error {
	if errNumber(err) == errDupEntry {
		return &mapped{sentinel: core.ErrDuplicateEvent, err: err}
	}
	return err
}

// wrap prefixes err with the operation and maps driver errors.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("mysql: %s: %w", op, classify(err))
}

// nilTx refuses a nil caller transaction with core.ErrInvalidTx (op names the call).
func nilTx(op string, tx *sql.Tx) error {
	if tx == nil {
		return fmt.Errorf("mysql: %s: %w: nil transaction", op, core.ErrInvalidTx)
	}
	return nil
}

// notMigrated is the *core.NotMigratedError for what the outbox lacks.
func (s *Store) notMigrated(missing string) error {
	return &core.NotMigratedError{Missing: missing + " for outbox " + s.names.outbox}
}
