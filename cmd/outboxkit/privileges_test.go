package main

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// A role without the privileges a command needs gets one line that names them and exit
// status 1, and the command changes nothing: status by a role with no grant at all, an audited
// cleanup by a read-only role (its audit row and deletions are refused together).
func TestOpsMissingPrivileges(t *testing.T) {
	t.Parallel()
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dsn := testkit.Need(t, testkit.PostgresDSN)
		ctx := t.Context()
		d := opsPostgres(t)
		ok(t, append([]string{"migrate"}, d.flags...)...)
		schema := d.flags[3]
		admin, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer admin.Close(context.Background())
		role := "okt_" + randSuffix()
		_, err = admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = admin.Exec(context.Background(), "DROP OWNED BY "+role)
			_, _ = admin.Exec(context.Background(), "DROP ROLE "+role)
		})
		u, err := url.Parse(dsn)
		require.NoError(t, err)
		u.User = url.UserPassword(role, "pw")
		as := []string{"--db", u.String(), "--schema", schema}

		fails(t, 1, "missing privileges", append([]string{"status"}, as...)...)

		_, err = admin.Exec(ctx, "GRANT USAGE ON SCHEMA "+schema+" TO "+role+"; GRANT SELECT ON ALL TABLES IN SCHEMA "+schema+" TO "+role)
		require.NoError(t, err)
		ok(t, append([]string{"status"}, as...)...)
		line := fails(t, 1, "missing privileges", append([]string{"cleanup", "--retention", "1ns"}, as...)...)
		require.Contains(t, line, "permission denied")
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox_audit").Scan(&n))
		require.Zero(t, n, "no audit row for the refused cleanup")
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		dsn := testkit.Need(t, testkit.MySQLDSN)
		ctx := t.Context()
		d := opsMySQL(t)
		ok(t, append([]string{"migrate"}, d.flags...)...)
		cfg, err := gomysql.ParseDSN(dsn)
		require.NoError(t, err)
		dbName := d.flags[1][strings.LastIndex(d.flags[1], "/")+1:]
		admin, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		defer admin.Close()
		user := "okt_" + randSuffix()
		_, err = admin.ExecContext(ctx, "CREATE USER '"+user+"'@'%' IDENTIFIED BY 'pw'")
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = admin.Exec("DROP USER '" + user + "'@'%'") })
		as := []string{"--db", "mysql://" + user + ":pw@" + cfg.Addr + "/" + dbName}

		fails(t, 1, "missing privileges", append([]string{"status"}, as...)...)

		_, err = admin.ExecContext(ctx, "GRANT SELECT ON `"+dbName+"`.* TO '"+user+"'@'%'")
		require.NoError(t, err)
		ok(t, append([]string{"status"}, as...)...)
		fails(t, 1, "missing privileges", append([]string{"cleanup", "--retention", "1ns"}, as...)...)
		var n int
		require.NoError(t, admin.QueryRowContext(ctx, "SELECT count(*) FROM `"+dbName+"`.outbox_audit").Scan(&n))
		require.Zero(t, n, "no audit row for the refused cleanup")
	})
}
