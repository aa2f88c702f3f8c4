package mysql

import (
	"errors"
	"fmt"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		number   uint16
		sentinel error
	}{
		{errLockDeadlock, ErrDeadlock},
		{errLockWaitTimeout, ErrLockWaitTimeout},
	} {
		raw := &mysqldrv.MySQLError{Number: c.number, Message: "x"}
		err := wrap("settle", fmt.Errorf("inner: %w", raw))
		require.ErrorIs(t, err, c.sentinel)
		var me *mysqldrv.MySQLError
		require.True(t, errors.As(err, &me), "the driver error stays reachable")
		require.Equal(t, c.number, me.Number)
	}
	dup := &mysqldrv.MySQLError{Number: errDupEntry, Message: "Duplicate entry"}
	require.NotErrorIs(t, wrap("x", dup), core.ErrDuplicateEvent, "1062 means a duplicate event only for outbox inserts")
	require.ErrorIs(t, duplicate(dup), core.ErrDuplicateEvent)
	other := errors.New("plain")
	require.Equal(t, other, classify(other))
	require.True(t, isDeadlock(fmt.Errorf("a: %w", &mysqldrv.MySQLError{Number: 1213})))
}

func TestSplitSQL(t *testing.T) {
	t.Parallel()
	got := splitSQL("-- a; comment\nCREATE TABLE a (x INT);\n\n  -- b\nCREATE TABLE b (y INT);\n")
	require.Equal(t, []string{"CREATE TABLE a (x INT)", "CREATE TABLE b (y INT)"}, got)
	// A ';' that does not end its line stays inside the statement (a trigger body).
	got = splitSQL("CREATE TRIGGER t BEFORE UPDATE ON a FOR EACH ROW\n\tIF 1 THEN SIGNAL SQLSTATE '45000'; END IF;  \nCREATE TABLE c (z INT);")
	require.Equal(t, []string{"CREATE TRIGGER t BEFORE UPDATE ON a FOR EACH ROW\n\tIF 1 THEN SIGNAL SQLSTATE '45000'; END IF",
		"CREATE TABLE c (z INT)"}, got)
	// Every migration statement survives the split (no line-ending ';' inside comments or strings).
	files, err := migrationFS.ReadDir("migrations")
	require.NoError(t, err)
	for _, f := range files {
		b, err := migrationFS.ReadFile("migrations/" + f.Name())
		require.NoError(t, err)
		for _, stmt := range splitSQL(string(b)) {
			require.Regexp(t, `^(CREATE (TABLE IF NOT EXISTS \{\{[a-z]+\}\} \(|TRIGGER (IF NOT EXISTS )?\{\{[a-z_]+\}\} AFTER (UPDATE|INSERT|DELETE) ON \{\{(outbox|audit)\}\} FOR EACH ROW( FOLLOWS \{\{outbox_immutable\}\})?\n)|DROP TRIGGER IF EXISTS \{\{[a-z_]+\}\}$|ALTER TABLE \{\{[a-z]+\}\}\s+MODIFY [a-z_]+ +(VARBINARY\([0-9]+\)|MEDIUMBLOB) NOT NULL|ALTER TABLE \{\{inbox\}\}\s+ADD COLUMN [a-z_]+ VARBINARY\([0-9]+\) NOT NULL|START TRANSACTION$|COMMIT$|INSERT IGNORE INTO \{\{pending\}\}\n|INSERT INTO \{\{meta\}\} \(name, value\) VALUES \('migration:010_pending', '1'\)\n)`, stmt)
		}
	}
}
