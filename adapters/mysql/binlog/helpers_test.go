package binlog_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The fixtures of this package's tests: a fresh database per test on the server that
// OUTBOXKIT_MYSQL_DSN names (the same as the mysql package's tests build). The server needs the
// binary log: scripts/lib/mariadb.sh starts one.

// testConfig returns the driver config of OUTBOXKIT_MYSQL_DSN. Without it the test skips, or
// fails when CI is set.
func testConfig(tb testing.TB) *mysqldrv.Config {
	tb.Helper()
	cfg, err := mysqldrv.ParseDSN(testkit.Need(tb, testkit.MySQLDSN))
	require.NoError(tb, err)
	return cfg
}

var (
	adminOnce sync.Once
	adminDB   *sql.DB
	adminErr  error
)

func admin(tb testing.TB) *sql.DB {
	cfg := testConfig(tb)
	adminOnce.Do(func() {
		c := cfg.Clone()
		c.DBName = ""
		adminDB, adminErr = sql.Open("mysql", c.FormatDSN())
	})
	require.NoError(tb, adminErr)
	return adminDB
}

// newDB creates a fresh database, dropped when the test ends, and returns a pool on it with
// the settings the adapter requires (parseTime, loc=UTC) plus interpolateParams.
func newDB(tb testing.TB) (*sql.DB, string) {
	tb.Helper()
	cfg := testConfig(tb)
	adm := admin(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "obk_" + hex.EncodeToString(b[:])
	_, err := adm.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(tb, err)
	c := cfg.Clone()
	c.DBName = name
	c.ParseTime = true
	c.Loc = time.UTC
	c.InterpolateParams = true
	db, err := sql.Open("mysql", c.FormatDSN())
	require.NoError(tb, err)
	db.SetMaxOpenConns(100)
	db.SetMaxIdleConns(20)
	tb.Cleanup(func() {
		_ = db.Close()
		if _, err := adm.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			tb.Logf("drop database %s: %v", name, err)
		}
	})
	return db, name
}

// dsnOf is the DSN of database name on the test server, for a change source's binlog connection.
func dsnOf(tb testing.TB, name string) string {
	c := testConfig(tb).Clone()
	c.DBName = name
	c.ParseTime = true
	c.Loc = time.UTC
	return c.FormatDSN()
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newStore returns a migrated store on a fresh database, with an effects table.
func newStore(tb testing.TB, opts *mysql.Options) *mysql.Store {
	tb.Helper()
	db, _ := newDB(tb)
	return storeOn(tb, db, opts)
}

func storeOn(tb testing.TB, db *sql.DB, opts *mysql.Options) *mysql.Store {
	tb.Helper()
	ctx := context.Background()
	var o mysql.Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	s, err := mysql.New(ctx, db, &o)
	require.NoError(tb, err)
	require.NoError(tb, s.Migrate(ctx))
	_, err = db.Exec("CREATE TABLE IF NOT EXISTS effects (name VARCHAR(255) NOT NULL PRIMARY KEY, n INT NOT NULL) ENGINE=InnoDB")
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func effect(ctx context.Context, tx *sql.Tx, key string) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO effects (name, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", key)
	return err
}

func effectCount(ctx context.Context, db *sql.DB, key string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT n FROM effects WHERE name = ?", key).Scan(&n)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	return n, err
}

// Benchmarks need OUTBOXKIT_MYSQL_DSN (they skip without it, CI or not: CI does not run
// benchmarks). OUTBOXKIT_BENCH_EVENTS sets the drain backlog (default 200,000).
func benchConfig(b *testing.B) {
	if os.Getenv("OUTBOXKIT_MYSQL_DSN") == "" {
		b.Skip("OUTBOXKIT_MYSQL_DSN is not set")
	}
}

func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// benchPayload is a ~1.1 KiB JSON payload.
var benchPayload = func() []byte {
	p := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"c-000000","lines":[`)
	for i := range 12 {
		p = fmt.Appendf(p, `{"sku":"sku-%03d","qty":%d,"price":"10.00","description":"a line of about sixty bytes"},`, i, i+1)
	}
	return append(p[:len(p)-1], `],"total":"50.00","currency":"EUR"}`...)
}()

const benchKeys = 1000
