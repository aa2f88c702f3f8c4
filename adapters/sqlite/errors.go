package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/core"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// isUniqueViolation reports whether err is SQLite's UNIQUE or PRIMARY KEY constraint failure.
func isUniqueViolation(err error) bool {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// isNoSuchTable reports whether err says a table is missing (the schema is not migrated).
func isNoSuchTable(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_ERROR && strings.Contains(e.Error(), "no such table")
}

// isReadOnly reports whether err is SQLite's refusal to write a read-only database (a file or
// directory the process may not write, a read-only open).
func isReadOnly(err error) bool {
	var e *sqlite.Error
	return errors.As(err, &e) && e.Code()&0xff == sqlite3.SQLITE_READONLY
}

// ClassifyError is the adapter's one mapping of SQLite's errors (every error of a Store went
// through it; cmd/outboxkit applies it to its own statements' errors): a missing table (an
// unmigrated database) is a *core.NotMigratedError (core.ErrSchemaMismatch, with the remedy),
// a read-only database
// core.ErrPermissionDenied, and a transaction that ended or belongs to another *sql.DB
// (database/sql refuses the Store's prepared statements in it: see checkInboxTx)
// core.ErrInvalidTx; the *sqlite.Error stays reachable with errors.As. Other errors are
// returned as they are.
func ClassifyError(err error) error {
	switch {
	case err == nil || errors.Is(err, core.ErrSchemaMismatch) || errors.Is(err, core.ErrInvalidTx) || errors.Is(err, core.ErrPermissionDenied):
		return err
	case isNoSuchTable(err):
		return &core.NotMigratedError{Err: err}
	case isReadOnly(err):
		return fmt.Errorf("%w: %w", core.ErrPermissionDenied, err)
	case errors.Is(err, sql.ErrTxDone) || strings.Contains(err.Error(), errForeignStmt):
		return fmt.Errorf("%w: %w", core.ErrInvalidTx, err)
	}
	return err
}

// classify is ClassifyError under the short name the package's files use.
func classify(err error) error { return ClassifyError(err) }

// errForeignStmt is the text of database/sql's error for a statement prepared on one *sql.DB
// and run in a transaction of another (it has no sentinel).
const errForeignStmt = "statement from different database used"

// checkInboxTx refuses a nil transaction. The inbox methods run the Store's prepared
// statements in tx once they exist (InTx, LaneCount and the Store's reads prepare them, outside
// any transaction: preparing inside one could wait forever for a pool of one connection), and
// in a transaction of another *sql.DB database/sql refuses them (classify: core.ErrInvalidTx)
// instead of running them in that database.
func checkInboxTx(tx *sql.Tx) error {
	if tx == nil {
		return fmt.Errorf("%w: nil transaction", core.ErrInvalidTx)
	}
	return nil
}
