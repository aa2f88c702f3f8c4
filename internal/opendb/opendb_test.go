package opendb

import (
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
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

	for _, bad := range []string{"", "redis://h", "mysql://h", "mysql://h/a/b", "sqlite:"} {
		_, _, err := ParseURL(bad)
		require.ErrorIs(t, err, ErrBadURL, bad)
	}
}
