package opendb

import (
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, driver, dsn string }{
		{"postgres://u:p@h:5432/db?sslmode=disable", "postgres", "postgres://u:p@h:5432/db?sslmode=disable"},
		{"postgresql://h/db", "postgres", "postgresql://h/db"},
		{"sqlite:/var/app.db", "sqlite", "/var/app.db"},
		{"sqlite:app.db", "sqlite", "app.db"},
		{"app.db", "sqlite", "app.db"},
	} {
		driver, dsn, err := ParseURL(c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, [2]string{c.driver, c.dsn}, [2]string{driver, dsn}, c.in)
	}

	driver, dsn, err := ParseURL("mysql://u:p%40ss@db.example:3307/app?timeout=2s&tls=preferred")
	require.NoError(t, err)
	require.Equal(t, "mysql", driver)
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	require.Equal(t, "u", cfg.User)
	require.Equal(t, "p@ss", cfg.Passwd)
	require.Equal(t, "tcp", cfg.Net)
	require.Equal(t, "db.example:3307", cfg.Addr)
	require.Equal(t, "app", cfg.DBName)
	require.True(t, cfg.ParseTime)
	require.Equal(t, "UTC", cfg.Loc.String())
	require.Equal(t, "2s", cfg.Timeout.String())
	require.Equal(t, "preferred", cfg.TLSConfig)

	_, dsn, err = ParseURL("mysql://u@h/app")
	require.NoError(t, err)
	cfg, err = gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	require.Equal(t, "h:3306", cfg.Addr)

	for _, bad := range []string{"", "redis://h", "mysql://h", "mysql://h/a/b", "sqlite:",
		"postgres://u:p@127.0.0.1:notaport/db", "postgresql://h:99999/db", "postgres://h/db?sslmode=bogus"} {
		_, _, err := ParseURL(bad)
		require.ErrorIs(t, err, ErrBadURL, bad)
	}
	_, _, err = ParseURL("postgres://u:s3cret@127.0.0.1:notaport/db")
	require.NotContains(t, err.Error(), "s3cret", "pgx redacts the password")
}

// Check finds, without a database, what Open or Migrate would refuse: a DSN that does not parse
// and the adapter's identifier and lane rules, one problem per field.
func TestCheck(t *testing.T) {
	t.Parallel()
	fields := func(cfg Config) []string {
		var out []string
		for _, p := range Check(cfg) {
			out = append(out, p.Field)
		}
		return out
	}
	require.Empty(t, Check(Config{Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:5432/db", Schema: "app", Table: "events", Lanes: 8}))
	require.Empty(t, Check(Config{Driver: "mysql", DSN: "u:p@tcp(127.0.0.1:3306)/app?parseTime=true"}))
	require.Empty(t, Check(Config{Driver: "sqlite", DSN: "/tmp/x.db", Lanes: 4096}))
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Driver: "postgres", DSN: "postgres://u:p@127.0.0.1:notaport/db"}, []string{"DSN"}},
		{Config{Driver: "postgres", DSN: "host=127.0.0.1 port=x"}, []string{"DSN"}},
		{Config{Driver: "mysql", DSN: "garbage@@"}, []string{"DSN"}},
		// The adapter needs DATETIME as time.Time in UTC (mysql.New's ErrConnection).
		{Config{Driver: "mysql", DSN: "u:p@tcp(127.0.0.1:3306)/app"}, []string{"DSN"}},
		{Config{Driver: "mysql", DSN: "u:p@tcp(127.0.0.1:3306)/app?parseTime=true&loc=Local"}, []string{"DSN"}},
		{Config{Driver: "sqlite", DSN: "x.db", Lanes: 4097}, []string{"Lanes"}},
		{Config{Driver: "sqlite", DSN: "x.db", Table: "null;"}, []string{"Table"}},
		{Config{Driver: "mysql", DSN: "u@tcp(h)/d?parseTime=true", Table: "a b", Lanes: -1}, []string{"Lanes", "Table"}},
		{Config{Driver: "postgres", DSN: "postgres://h/db", Schema: "a-b", Table: "x y", Lanes: 5000}, []string{"Lanes", "Schema", "Table"}},
		{Config{Driver: "oracle"}, []string{"Driver"}},
	} {
		require.Equal(t, c.want, fields(c.cfg), "%+v", c.cfg)
	}
}

// TestClassifyError: every code the operator commands map, whichever driver raised it, through
// the adapters' own mappings: a missing table or schema is a schema mismatch (no migrated
// outbox), a privilege refusal is core.ErrPermissionDenied; other errors pass unchanged.
func TestClassifyError(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"postgres 42P01", &pgconn.PgError{Code: "42P01"}, core.ErrSchemaMismatch},
		{"postgres 42883", &pgconn.PgError{Code: "42883"}, core.ErrSchemaMismatch},
		{"postgres 3F000", &pgconn.PgError{Code: "3F000"}, core.ErrSchemaMismatch},
		{"postgres 42501", &pgconn.PgError{Code: "42501"}, core.ErrPermissionDenied},
		{"mysql 1146", &gomysql.MySQLError{Number: 1146}, core.ErrSchemaMismatch},
		{"mysql 1044", &gomysql.MySQLError{Number: 1044}, core.ErrPermissionDenied},
		{"mysql 1142", &gomysql.MySQLError{Number: 1142}, core.ErrPermissionDenied},
		{"mysql 1143", &gomysql.MySQLError{Number: 1143}, core.ErrPermissionDenied},
		{"mysql 1227", &gomysql.MySQLError{Number: 1227}, core.ErrPermissionDenied},
	} {
		err := ClassifyError(fmt.Errorf("wrapped: %w", c.err))
		require.ErrorIs(t, err, c.want, c.name)
		for _, other := range []error{core.ErrSchemaMismatch, core.ErrPermissionDenied} {
			if other != c.want {
				require.NotErrorIs(t, err, other, c.name)
			}
		}
	}
	for _, e := range []error{&pgconn.PgError{Code: "23505"}, &gomysql.MySQLError{Number: 1062}, errors.New("plain")} {
		require.Equal(t, e, ClassifyError(e))
	}
}
