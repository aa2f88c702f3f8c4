package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// testDSN returns the test server's DSN, skipping the test when it is unset (failing under CI).
func testDSN(tb testing.TB) string {
	tb.Helper()
	return testkit.Need(tb, testkit.PostgresDSN)
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// admin returns a pool on the test database that is shared by all tests (schemas, roles).
func admin(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dsn := testDSN(tb)
	adminOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		adminPool, adminErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	require.NoError(tb, adminErr)
	return adminPool
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// testDB is one test's fresh schema and a pool whose search_path is that schema only (so
// unqualified names fail).
type testDB struct {
	schema string
	pool   *pgxpool.Pool
}

type dbOptions struct {
	dsn      string            // default the test server's (testDSN)
	mode     pgx.QueryExecMode // default QueryExecModeCacheStatement
	maxConns int32             // default 8
	role     string            // SET ROLE on every connection
	// syncCommit runs the connections with synchronous_commit on: the test server runs with it
	// off, and logical decoding reads only flushed WAL, so CDC would otherwise see commits up
	// to a few wal_writer_delay (200 ms) late.
	syncCommit bool
}

func newTestDB(tb testing.TB, o dbOptions) *testDB {
	tb.Helper()
	ctx := context.Background()
	a := admin(tb)
	schema := randomName("okt_")
	_, err := a.Exec(ctx, "CREATE SCHEMA "+quote(schema))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := a.Exec(context.Background(), "DROP SCHEMA "+quote(schema)+" CASCADE")
		if err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return &testDB{schema: schema, pool: newPool(tb, schema, o)}
}

func newPool(tb testing.TB, schema string, o dbOptions) *pgxpool.Pool {
	tb.Helper()
	dsn := o.dsn
	if dsn == "" {
		dsn = testDSN(tb)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(tb, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = quote(schema)
	if o.syncCommit {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	if o.mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = o.mode
	}
	cfg.MaxConns = 8
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	if o.role != "" {
		role := o.role
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			_, err := c.Exec(ctx, "SET ROLE "+quote(role))
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return pool
}

// sqlDB opens a database/sql handle (pgx stdlib driver) on the same pool.
func (d *testDB) sqlDB(tb testing.TB) *sql.DB {
	db := stdlib.OpenDBFromPool(d.pool)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// migratedStore builds and migrates a pgx Store in a fresh schema.
func migratedStore(tb testing.TB, o dbOptions, opts *Options) (*Store[pgx.Tx], *testDB) {
	tb.Helper()
	d := newTestDB(tb, o)
	var oo Options
	if opts != nil {
		oo = *opts
	}
	oo.Schema = d.schema
	s, err := New(d.pool, &oo)
	require.NoError(tb, err)
	require.NoError(tb, s.Migrate(context.Background()))
	return s, d
}
