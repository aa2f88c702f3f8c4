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

// classify wraps driver errors with the adapter's sentinels; other errors are returned as is.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var m *mapped
	if errors.As(err, &m) {
		return err
	}
	switch errNumber(err) {
	case errLockDeadlock:
		return &mapped{sentinel: ErrDeadlock, err: err}
	case errLockWaitTimeout:
		return &mapped{sentinel: ErrLockWaitTimeout, err: err}
	case errNoSuchTable:
		return &mapped{sentinel: core.ErrSchemaMismatch, err: err} // not migrated
	}
	if errors.Is(err, sql.ErrTxDone) {
		return &mapped{sentinel: core.ErrInvalidTx, err: err}
	}
	return err
}

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
