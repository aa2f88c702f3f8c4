package mysql_test

import (
	"errors"
	"fmt"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
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

// TestClassifyError: the adapter's one mapping of MySQL/MariaDB errors: a missing table, every
// missing-privileges error, deadlocks and lock waits; the *mysql.MySQLError stays reachable,
// other errors pass unchanged, and a mapped error is not wrapped twice.
func TestClassifyError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		number uint16
		want   error
	}{
		{1146, core.ErrSchemaMismatch},   // ER_NO_SUCH_TABLE
		{1044, core.ErrPermissionDenied}, // ER_DBACCESS_DENIED_ERROR
		{1142, core.ErrPermissionDenied}, // ER_TABLEACCESS_DENIED_ERROR
		{1143, core.ErrPermissionDenied}, // ER_COLUMNACCESS_DENIED_ERROR
		{1227, core.ErrPermissionDenied}, // ER_SPECIFIC_ACCESS_DENIED_ERROR
		{1213, mysql.ErrDeadlock},
		{1205, mysql.ErrLockWaitTimeout},
	} {
		raw := &mysqldrv.MySQLError{Number: c.number, Message: "x"}
		err := mysql.ClassifyError(fmt.Errorf("inner: %w", raw))
		require.ErrorIs(t, err, c.want, c.number)
		var me *mysqldrv.MySQLError
		require.ErrorAs(t, err, &me, "the database's error stays reachable")
		require.Equal(t, c.number, me.Number)
		require.Equal(t, err, mysql.ClassifyError(err), "mapped once")
	}
	for _, n := range []uint16{1062, 1045, 1048} {
		other := &mysqldrv.MySQLError{Number: n}
		require.Equal(t, error(other), mysql.ClassifyError(other), n)
	}
	plain := errors.New("plain")
	require.Equal(t, plain, mysql.ClassifyError(plain))
	require.NoError(t, mysql.ClassifyError(nil))
}
