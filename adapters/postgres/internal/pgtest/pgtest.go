// Package pgtest holds test fixtures of the PostgreSQL adapter's packages that need no adapter
// code (so that package postgres's own tests may use them as well as package logical's): the
// test server's admin pool, a fresh schema per test, the server's replication state for a
// watchdog's report, and a hold on the WAL. Only tests import it.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// DSN returns the test server's DSN (OUTBOXKIT_POSTGRES_DSN), skipping the test when it is
// unset (failing under CI).
func DSN(tb testing.TB) string {
	tb.Helper()
	return testkit.Need(tb, testkit.PostgresDSN)
}

var (
	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// Admin returns a pool on the test database that is shared by all tests (schemas, roles).
func Admin(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dsn := DSN(tb)
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

// RandomName is prefix and 12 random hex digits.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Quote quotes an identifier (one RandomName or the adapter's rules made safe).
func Quote(s string) string { return pgx.Identifier{s}.Sanitize() }

// DB is one test's fresh schema and a pool whose search_path is that schema only (so
// unqualified names fail).
type DB struct {
	Schema string
	Pool   *pgxpool.Pool
}

// DBOptions configures NewDB's pool.
type DBOptions struct {
	DSN string // the pool's; default the test server's (DSN)
	// Admin creates and drops the schema, in its database (which DSN must name too); default
	// Admin(tb), on the server's default database.
	Admin    *pgxpool.Pool
	Mode     pgx.QueryExecMode // default QueryExecModeCacheStatement
	MaxConns int32             // default 8
	// SyncCommit runs the connections with synchronous_commit on: the test server runs with it
	// off, and logical decoding reads only flushed WAL, so CDC would otherwise see commits up
	// to a few wal_writer_delay (200 ms) late.
	SyncCommit bool
}

// NewDB creates a schema, dropped when the test ends, and a pool on it.
func NewDB(tb testing.TB, o DBOptions) *DB {
	tb.Helper()
	ctx := context.Background()
	a := o.Admin
	if a == nil {
		a = Admin(tb)
	}
	schema := RandomName("okt_")
	_, err := a.Exec(ctx, "CREATE SCHEMA "+Quote(schema))
	require.NoError(tb, err)
	tb.Cleanup(func() {
		if _, err := a.Exec(context.Background(), "DROP SCHEMA "+Quote(schema)+" CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	dsn := o.DSN
	if dsn == "" {
		dsn = DSN(tb)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(tb, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = Quote(schema)
	if o.SyncCommit {
		cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	if o.Mode != 0 {
		cfg.ConnConfig.DefaultQueryExecMode = o.Mode
	}
	cfg.MaxConns = 8
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err)
	tb.Cleanup(pool.Close)
	return &DB{Schema: schema, Pool: pool}
}

// SQLDB opens a database/sql handle (pgx stdlib driver) on the same pool.
func (d *DB) SQLDB(tb testing.TB) *sql.DB {
	db := stdlib.OpenDBFromPool(d.Pool)
	tb.Cleanup(func() { _ = db.Close() })
	return db
}

// HoldWAL returns the current WAL insert position and keeps the WAL from there on until the
// test ends: a physical slot reserved before the position is read holds it (a CDC relay's own
// slot moves on with its checkpoints, and a server checkpoint would otherwise recycle the
// segments a test reads back; CI saw "requested WAL segment has already been removed").
func HoldWAL(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	a := Admin(tb)
	slot := RandomName("okt_walhold_")
	_, err := a.Exec(ctx, `SELECT pg_create_physical_replication_slot($1, true, false)`, slot)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := a.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot)
		require.NoError(tb, err)
	})
	var lsn string
	require.NoError(tb, a.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn))
	return lsn
}

// ServerState is the server's view when a conformance subtest hangs: the WAL position, every
// replication slot and WAL sender, and every other session with its wait event and the age of
// its transaction (a stalled stream is told from a stalled relay by it).
func ServerState(ctx context.Context, a *pgxpool.Pool) string {
	var b strings.Builder
	for _, q := range []string{
		`SELECT 'wal insert=' || pg_current_wal_insert_lsn() || ' flush=' || pg_current_wal_flush_lsn()`,
		`SELECT format('slot %s active_pid=%s restart=%s confirmed=%s wal_status=%s', slot_name, active_pid,
			restart_lsn, confirmed_flush_lsn, wal_status) FROM pg_replication_slots ORDER BY slot_name`,
		`SELECT format('sender pid=%s app=%s state=%s sent=%s write=%s flush=%s reply=%s', pid, application_name,
			state, sent_lsn, write_lsn, flush_lsn, reply_time) FROM pg_stat_replication ORDER BY pid`,
		`SELECT format('session pid=%s type=%s state=%s wait=%s/%s xact_age=%s query_age=%s backend_xmin=%s query=%s',
			pid, backend_type, state, wait_event_type, wait_event, now() - xact_start, now() - query_start,
			backend_xmin, left(regexp_replace(query, '\s+', ' ', 'g'), 120))
			FROM pg_stat_activity WHERE pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST`,
	} {
		rows, err := a.Query(ctx, q)
		if err != nil {
			fmt.Fprintf(&b, "query failed: %v\n", err)
			continue
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err == nil {
				b.WriteString(line + "\n")
			}
		}
		if err := rows.Err(); err != nil {
			fmt.Fprintf(&b, "query failed: %v\n", err)
		}
		rows.Close()
	}
	return b.String()
}
