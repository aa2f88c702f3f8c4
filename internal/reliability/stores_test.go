package reliability_test

// The databases the tests run on: a fresh, migrated outbox per test, a producer writing
// straight to it, and relay stores that may reach the database through another address (a
// toxiproxy proxy).

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

var quiet = slog.New(slog.DiscardHandler)

// db is one test's outbox: write commits events in one transaction (straight to the
// database), relayStore returns the store the relays use (one per call; addr "" is the
// database itself, otherwise a host:port that forwards to it, see upstream).
type db struct {
	write      func(ctx context.Context, evs []core.Event) ([]core.Event, error)
	relayStore func(t *testing.T, addr string) driver.RelayStore
	upstream   string // host:port of the server ("" for memory and SQLite)
	route      string // the relays' sink destination ("" for a recorder)
	// child is how a relay process opens the relay store (crashStore); zero for memory.
	child childDB
}

// writer adapts an outbox store to db.write.
func writer[TTx any](t *testing.T, s interface {
	driver.OutboxStore[TTx]
	driver.Transactor[TTx]
}) func(ctx context.Context, evs []core.Event) ([]core.Event, error) {
	ob, err := core.NewOutbox(t.Context(), driver.OutboxStore[TTx](s), nil)
	require.NoError(t, err)
	return func(ctx context.Context, evs []core.Event) ([]core.Event, error) {
		var out []core.Event
		err := s.InTx(ctx, func(ctx context.Context, tx TTx) error {
			var err error
			out, err = ob.Write(ctx, tx, evs...)
			return err
		})
		return out, err
	}
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func memoryDB(t *testing.T, lanes int) db {
	s, err := memory.New(&memory.Options{Lanes: lanes, Logger: quiet})
	require.NoError(t, err)
	return db{write: writer[*memory.Tx](t, s), relayStore: func(*testing.T, string) driver.RelayStore { return s }}
}

func sqliteDB(t *testing.T, lanes int) db {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	h, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	s, err := sqlite.New(h, &sqlite.Options{Lanes: lanes, Logger: quiet})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { _ = s.Close() })
	return db{write: writer[*sql.Tx](t, s), relayStore: func(*testing.T, string) driver.RelayStore { return s },
		child: childDB{Kind: "sqlite", Name: path, Lanes: lanes}}
}

// postgresDB migrates an outbox in a fresh schema of OUTBOXKIT_POSTGRES_DSN's database.
func postgresDB(t *testing.T, lanes int, strategy postgres.ClaimStrategy) db {
	dsn := testkit.Need(t, testkit.PostgresDSN)
	ctx := t.Context()
	schema := randomName("okr_")
	admin := pgPool(t, dsn, "", "", 2)
	_, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	opts := &postgres.Options{Schema: schema, Lanes: lanes, ClaimStrategy: strategy, Logger: quiet}
	s, err := postgres.New(pgPool(t, dsn, schema, "", 4), opts)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	return db{
		write:    writer[pgx.Tx](t, s),
		upstream: u.Host,
		child:    childDB{Kind: "postgres", Name: schema, Lanes: lanes, Strategy: int(strategy)},
		relayStore: func(t *testing.T, addr string) driver.RelayStore {
			rs, err := postgres.New(pgPool(t, dsn, schema, addr, 8), opts)
			require.NoError(t, err)
			return rs
		},
	}
}

// pgbouncerDB migrates an outbox in a fresh schema and reaches it, producer and relays alike,
// through PgBouncer in pool_mode=transaction (OUTBOXKIT_PGBOUNCER_TX_DSN): pgx in exec mode
// (PgBouncer 1.18 keeps no prepared statement), the schema named in the options (PgBouncer
// refuses the search_path startup parameter). The store detects the pooler: no LISTEN, no
// sign of life; the relays run on their leases alone.
func pgbouncerDB(t *testing.T, lanes int) db {
	dsn := testkit.Need(t, testkit.PgBouncerTxDSN)
	direct := testkit.Need(t, testkit.PostgresDSN)
	ctx := t.Context()
	schema := randomName("okr_")
	admin := pgPool(t, direct, "", "", 2)
	_, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	opts := &postgres.Options{Schema: schema, Lanes: lanes, ClaimStrategy: postgres.ClaimSkipLocked, Logger: quiet}
	open := func(maxConns int32) *postgres.Store[pgx.Tx] {
		cfg, err := pooledConfig(dsn)
		require.NoError(t, err)
		cfg.MaxConns = maxConns
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		s, err := postgres.New(p, opts)
		require.NoError(t, err)
		return s
	}
	s := open(4)
	require.NoError(t, s.Migrate(ctx))
	return db{
		write: writer[pgx.Tx](t, s),
		child: childDB{Kind: "pgbouncer", Name: schema, Lanes: lanes, Strategy: int(postgres.ClaimSkipLocked)},
		relayStore: func(t *testing.T, addr string) driver.RelayStore {
			require.Empty(t, addr, "no proxy in front of PgBouncer")
			return open(8)
		},
	}
}

// pooledConfig is the pool configuration of a store behind PgBouncer in transaction mode.
func pooledConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	return cfg, nil
}

// pgPool opens a pool on dsn with search_path schema (unless empty), through addr (unless
// empty).
func pgPool(t *testing.T, dsn, schema, addr string, maxConns int32) *pgxpool.Pool {
	cfg, err := pgConfig(dsn, schema, addr)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// pgConfig is the configuration of pgPool (a relay process opens its pool with it).
func pgConfig(dsn, schema, addr string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	}
	if addr != "" {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Host = host
		n, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		cfg.ConnConfig.Port = uint16(n)
		cfg.ConnConfig.Fallbacks = nil
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	return cfg, nil
}

// mysqlConfig is the configuration of a handle on database name of the server of base,
// through addr (unless empty).
func mysqlConfig(base *mysqldrv.Config, name, addr string) *mysqldrv.Config {
	c := base.Clone()
	c.DBName = name
	c.ParseTime = true
	c.Loc = time.UTC
	c.InterpolateParams = true
	if addr != "" {
		c.Net, c.Addr = "tcp", addr
		c.Timeout = 5 * time.Second
	}
	return c
}

// mysqlDB migrates an outbox in a fresh database of OUTBOXKIT_MYSQL_DSN's server.
func mysqlDB(t *testing.T, lanes int, strategy mysql.ClaimStrategy) db {
	base, err := mysqldrv.ParseDSN(testkit.Need(t, testkit.MySQLDSN))
	require.NoError(t, err)
	ctx := t.Context()
	c := base.Clone()
	c.DBName = ""
	admin, err := sql.Open("mysql", c.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	name := randomName("okr_")
	_, err = admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	open := func(t *testing.T, addr string) *sql.DB {
		h, err := sql.Open("mysql", mysqlConfig(base, name, addr).FormatDSN())
		require.NoError(t, err)
		h.SetMaxOpenConns(20)
		t.Cleanup(func() { _ = h.Close() })
		return h
	}
	opts := &mysql.Options{Lanes: lanes, ClaimStrategy: strategy, Logger: quiet}
	s, err := mysql.New(ctx, open(t, ""), opts)
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { _ = s.Close() })
	return db{
		write:    writer[*sql.Tx](t, s),
		upstream: base.Addr,
		child:    childDB{Kind: "mysql", Name: name, Lanes: lanes, Strategy: int(strategy)},
		relayStore: func(t *testing.T, addr string) driver.RelayStore {
			rs, err := mysql.New(t.Context(), open(t, addr), opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = rs.Close() })
			return rs
		},
	}
}
