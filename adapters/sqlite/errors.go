package sqlite

import (
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

// classify makes a missing table (an unmigrated database) match core.ErrSchemaMismatch; other
// errors are returned as they are.
func classify(err error) error {
	if isNoSuchTable(err) && !errors.Is(err, core.ErrSchemaMismatch) {
		return fmt.Errorf("%w: not migrated (%w)", core.ErrSchemaMismatch, err)
	}
	return err
}
