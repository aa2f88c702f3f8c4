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

// TestParseDSN: the accepted forms map to a driver and its DSN; a bare word, host:port/db, a
// key=value DSN without its driver, an unknown scheme and a URL of another driver than the one
// named are refused with ErrBadDSN and the list of accepted forms (never read as a SQLite file).
func TestParseDSN(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ driverName, in, driver, dsn string }{
		{"", "postgres://u:p@h:5432/db?sslmode=disable", "postgres", "postgres://u:p@h:5432/db?sslmode=disable"},
		{"", "postgresql://h/db", "postgres", "postgresql://h/db"},
		{"postgres", "postgres://h/db", "postgres", "postgres://h/db"},
		{"postgres", "host=h dbname=d sslmode=disable", "postgres", "host=h dbname=d sslmode=disable"},
		{"", "sqlite:/var/app.db", "sqlite", "/var/app.db"},
		{"", "sqlite:app.db", "sqlite", "app.db"},
		{"", "sqlite:///var/app.db", "sqlite", "/var/app.db"},
		{"", "file:app.db", "sqlite", "app.db"},
		{"", "file:///var/app.db", "sqlite", "/var/app.db"},
		{"sqlite", "app.db", "sqlite", "app.db"},
		{"sqlite", "sqlite:app.db", "sqlite", "app.db"},
		{"mysql", "u:p@tcp(h:3306)/app?parseTime=true", "mysql", "u:p@tcp(h:3306)/app?parseTime=true"},
	} {
		driver, dsn, err := ParseDSN(c.driverName, c.in)
		require.NoError(t, err, c.in)
		require.Equal(t, [2]string{c.driver, c.dsn}, [2]string{driver, dsn}, c.in)
	}

	driver, dsn, err := ParseDSN("", "mysql://u:p%40ss@db.example:3307/app?timeout=2s&tls=preferred")
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

	_, dsn, err = ParseDSN("", "mysql://u@h/app")
	require.NoError(t, err)
	cfg, err = gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	require.Equal(t, "h:3306", cfg.Addr)

	for _, bad := range []struct{ driverName, in string }{
		{"", ""}, {"", "app"}, {"", "app.db"}, {"", "./app.db"}, {"", "127.0.0.1:5432/app"}, {"", "host=h dbname=d"},
		{"", "redis://h"}, {"", "mysql://h"}, {"", "mysql://h/a/b"}, {"", "sqlite:"}, {"", "file:x.db?mode=ro"},
		{"", "postgres://u:p@127.0.0.1:notaport/db"}, {"", "postgresql://h:99999/db"}, {"", "postgres://h/db?sslmode=bogus"},
		{"postgres", "127.0.0.1:5432/app"}, {"postgres", "app"}, {"mysql", "127.0.0.1:3306/app"}, {"mysql", "app"},
		{"mysql", "postgres://h/db"}, {"sqlite", "postgres://h/db"}, {"postgres", "sqlite:x.db"}, {"oracle", "x"},
		{"sqlite", ""},
	} {
		_, _, err := ParseDSN(bad.driverName, bad.in)
		require.ErrorIs(t, err, ErrBadDSN, "%+v", bad)
	}
	_, _, err = ParseDSN("", "app")
	require.ErrorContains(t, err, `"app" names no driver`)
	require.ErrorContains(t, err, Forms, "the accepted forms are listed")
	_, _, err = ParseDSN("", "postgres://u:s3cret@127.0.0.1:notaport/db")
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
