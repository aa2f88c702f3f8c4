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
// relay streams from it): Start and Resume wait ChangeSourceOptions.SlotBusyTimeout for it to be released
// and then fail with an error wrapping ErrSlotActive.
var ErrSlotActive = errors.New("postgres: replication slot is active in another connection")

// classify makes a missing table or function (SQLSTATE 42P01 or 42883: the schema is not
// migrated; the fetch is a function of migration 0001) match core.ErrSchemaMismatch and an ended transaction match core.ErrInvalidTx; other errors are
// returned as they are.
func classify(err error) error {
	switch {
	case err == nil || errors.Is(err, core.ErrSchemaMismatch) || errors.Is(err, core.ErrInvalidTx):
		return err
	case pgError(err) != nil && (pgError(err).Code == "42P01" || pgError(err).Code == "42883"):
		return fmt.Errorf("%w: not migrated (%w)", core.ErrSchemaMismatch, err)
	case errors.Is(err, pgx.ErrTxClosed) || errors.Is(err, sql.ErrTxDone):
		return fmt.Errorf("%w: %w", core.ErrInvalidTx, err)
	}
	return err
}

// isNilTx reports whether tx is a nil interface (pgx.Tx) or a nil pointer (*sql.Tx).
func isNilTx(tx any) bool {
	if tx == nil {
		return true
	}
	v := reflect.ValueOf(tx)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
