package postgres

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// operatorOf is the core.Operator of the operator commands on s.
func operatorOf(t testing.TB, s driver.OperatorStore) *core.Operator {
	t.Helper()
	op, err := core.NewOperator(s, nil)
	require.NoError(t, err)
	return op
}

// TestClassifyError: the adapter's one mapping of PostgreSQL's errors: every SQLSTATE of an
// unmigrated schema, missing privileges, an ended transaction; the *pgconn.PgError stays
// reachable, other errors pass unchanged, and a mapped error is not wrapped twice.
func TestClassifyError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code string
		want error
	}{
		{"42P01", core.ErrSchemaMismatch}, // undefined_table
		{"42883", core.ErrSchemaMismatch}, // undefined_function
		{"3F000", core.ErrSchemaMismatch}, // invalid_schema_name
		{"42501", core.ErrPermissionDenied},
	} {
		raw := &pgconn.PgError{Code: c.code, Message: "x"}
		err := ClassifyError(fmt.Errorf("inner: %w", raw))
		require.ErrorIs(t, err, c.want, c.code)
		var pg *pgconn.PgError
		require.ErrorAs(t, err, &pg, "the database's error stays reachable")
		require.Equal(t, c.code, pg.Code)
		require.Equal(t, err, ClassifyError(err), "mapped once")
	}
	other := &pgconn.PgError{Code: "23505"}
	require.Equal(t, error(other), ClassifyError(other))
	require.NotErrorIs(t, ClassifyError(other), core.ErrSchemaMismatch)
	require.NotErrorIs(t, ClassifyError(other), core.ErrPermissionDenied)
	require.ErrorIs(t, ClassifyError(pgx.ErrTxClosed), core.ErrInvalidTx)
	plain := errors.New("plain")
	require.Equal(t, plain, ClassifyError(plain))
	require.NoError(t, ClassifyError(nil))
}
