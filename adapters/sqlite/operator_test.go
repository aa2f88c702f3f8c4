package sqlite

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"modernc.org/sqlite"

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

// TestClassifyError: the adapter's one mapping of SQLite's errors, on real errors of the
// driver: a missing table, a read-only database, an ended transaction; the *sqlite.Error stays
// reachable, other errors pass unchanged, and a mapped error is not wrapped twice.
func TestClassifyError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "c.db")
	db, err := OpenDB(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE TABLE t (x INT)")
	require.NoError(t, err)

	_, err = db.ExecContext(ctx, "SELECT * FROM nope")
	mapped := ClassifyError(err)
	require.ErrorIs(t, mapped, core.ErrSchemaMismatch)
	var se *sqlite.Error
	require.ErrorAs(t, mapped, &se, "the database's error stays reachable")
	require.Equal(t, mapped, ClassifyError(mapped), "mapped once")

	ro, err := sql.Open(DriverName, "file:"+path+"?mode=ro")
	require.NoError(t, err)
	defer ro.Close()
	_, err = ro.ExecContext(ctx, "INSERT INTO t VALUES (1)")
	require.Error(t, err)
	mapped = ClassifyError(err)
	require.ErrorIs(t, mapped, core.ErrPermissionDenied, "%v", err)
	require.NotErrorIs(t, mapped, core.ErrSchemaMismatch)
	require.ErrorAs(t, mapped, &se)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.ErrorIs(t, ClassifyError(tx.Commit()), core.ErrInvalidTx)

	_, err = db.ExecContext(ctx, "CREATE TABLE t (x INT)") // exists: not a mapped error
	require.Error(t, err)
	require.Equal(t, err, ClassifyError(err))
	plain := errors.New("plain")
	require.Equal(t, plain, ClassifyError(plain))
	require.NoError(t, ClassifyError(nil))
}
