package postgres

import (
	"context"
	"database/sql"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/reconcile"
)

const counterTable = `CREATE TABLE counters (key text PRIMARY KEY, n integer NOT NULL)`

// Both stores read inbox records for reconciliation (conformance chain/reconcile checks them).
var (
	_ reconcile.InboxReader = (*Store[pgx.Tx])(nil)
	_ reconcile.InboxReader = (*Store[*sql.Tx])(nil)

	_ driver.InboxBatchStore[pgx.Tx]  = (*Store[pgx.Tx])(nil)
	_ driver.InboxBatchStore[*sql.Tx] = (*Store[*sql.Tx])(nil)
)

// capabilities are the optional capabilities of both stores, which the conformance suite checks.
const capabilities = conformance.Notifier | conformance.Waker | conformance.Flusher |
	conformance.OperatorStore | conformance.LaneResizer | conformance.LaneInserter |
	conformance.InboxBatchStore | conformance.PartitionPruner | conformance.CheckpointStore |
	conformance.Liveness | conformance.CheckpointReleaser | conformance.AuditWriter |
	conformance.InboxReader | conformance.PartitionedInbox | conformance.IngressCounter

// pools maps each store a harness's New returned to its pool or *sql.DB (Harness.Reopen).
var pools sync.Map

// killLiveSession ends the server process holding the sign of life of lane's lease
// (Harness.KillSession), as the kernel does when the relay process is killed.
func killLiveSession[TTx any](ctx context.Context, t *testing.T, a conformance.Adapter[TTx], lane int) error {
	s := a.(*Store[TTx])
	var pid int32
	if err := queryRow(ctx, s.db, `SELECT live_pid FROM `+quote(s.o.Schema)+`.outbox_lanes WHERE lane = $1`, []any{lane}, &pid); err != nil {
		return err
	}
	_, err := admin(t).Exec(ctx, `SELECT pg_terminate_backend($1)`, pid)
	return err
}

const counterBump = `INSERT INTO counters AS c (key, n) VALUES ($1, 1)
	ON CONFLICT (key) DO UPDATE SET n = c.n + 1`
const counterGet = `SELECT coalesce((SELECT n FROM counters WHERE key = $1), 0)`

func TestConformance(t *testing.T) {
	t.Parallel()
	testDSN(t)
	tls := tlsOnlyDSN(t)
	for _, c := range []struct {
		name     string
		mode     pgx.QueryExecMode
		strategy ClaimStrategy
		async    bool
		part     *Partitioning
		inbox    *Partitioning // Options.InboxPartitioning
		dsn      string        // default testDSN
	}{
		{"pgx/cache_statement/skip_locked", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, false, nil, nil, ""},
		{"pgx/cache_statement/advisory_lock", pgx.QueryExecModeCacheStatement, ClaimAdvisoryLock, false, nil, nil, ""},
		{"pgx/simple_protocol/skip_locked", pgx.QueryExecModeSimpleProtocol, ClaimSkipLocked, false, nil, nil, ""},
		{"pgx/simple_protocol/advisory_lock", pgx.QueryExecModeSimpleProtocol, ClaimAdvisoryLock, false, nil, nil, ""},
		{"pgx/cache_statement/skip_locked/async_settle", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, true, nil, nil, ""},
		{"pgx/cache_statement/skip_locked/partitioned", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, false, &Partitioning{}, &Partitioning{}, ""},
		// Every connection with TLS, the server's certificate and name verified (TestTLS).
		{"pgx/cache_statement/skip_locked/tls_verify_full", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, false, nil, nil, tls},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The "cdc" area runs in package logical's TestConformance.
			conformance.Run(t, conformance.Harness[pgx.Tx]{
				New: func(t *testing.T, lanes int) conformance.Adapter[pgx.Tx] {
					s, d := migratedStore(t, dbOptions{mode: c.mode, dsn: c.dsn}, &Options{Lanes: lanes, ClaimStrategy: c.strategy, AsyncSettle: c.async, Partitioning: c.part, InboxPartitioning: c.inbox})
					_, err := d.pool.Exec(context.Background(), counterTable)
					require.NoError(t, err)
					pools.Store(s, d.pool)
					return s
				},
				NewUnmigrated: func(t *testing.T) conformance.Adapter[pgx.Tx] {
					d := newTestDB(t, dbOptions{mode: c.mode, dsn: c.dsn})
					s, err := New(d.pool, &Options{Schema: d.schema, ClaimStrategy: c.strategy, AsyncSettle: c.async, Partitioning: c.part, InboxPartitioning: c.inbox})
					require.NoError(t, err)
					return s
				},
				Reopen: func(t *testing.T, a conformance.Adapter[pgx.Tx]) conformance.Adapter[pgx.Tx] {
					s := a.(*Store[pgx.Tx])
					pool, _ := pools.Load(s)
					o := s.o
					other, err := New(pool.(*pgxpool.Pool), &o)
					require.NoError(t, err)
					return other
				},
				KillSession: killLiveSession[pgx.Tx],
				Effect: func(ctx context.Context, tx pgx.Tx, key string) error {
					_, err := tx.Exec(ctx, counterBump, key)
					return err
				},
				EffectCount: func(ctx context.Context, a conformance.Adapter[pgx.Tx], key string) (int, error) {
					var n int
					err := queryRow(ctx, a.(*Store[pgx.Tx]).db, counterGet, []any{key}, &n)
					return n, err
				},
				Diagnose:     func(ctx context.Context) string { return pgtest.ServerState(ctx, admin(t)) },
				Capabilities: capabilities,
			})
		})
	}
	t.Run("database_sql/skip_locked", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, conformance.Harness[*sql.Tx]{
			New: func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] {
				d := newTestDB(t, dbOptions{})
				db := d.sqlDB(t)
				s, err := NewSQL(db, &Options{Schema: d.schema, Lanes: lanes})
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				_, err = d.pool.Exec(context.Background(), counterTable)
				require.NoError(t, err)
				pools.Store(s, db)
				return s
			},
			NewUnmigrated: func(t *testing.T) conformance.Adapter[*sql.Tx] {
				d := newTestDB(t, dbOptions{})
				s, err := NewSQL(d.sqlDB(t), &Options{Schema: d.schema})
				require.NoError(t, err)
				return s
			},
			Reopen: func(t *testing.T, a conformance.Adapter[*sql.Tx]) conformance.Adapter[*sql.Tx] {
				s := a.(*Store[*sql.Tx])
				db, _ := pools.Load(s)
				o := s.o
				other, err := NewSQL(db.(*sql.DB), &o)
				require.NoError(t, err)
				return other
			},
			KillSession: killLiveSession[*sql.Tx],
			Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, counterBump, key)
				return err
			},
			EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) {
				var n int
				err := queryRow(ctx, a.(*Store[*sql.Tx]).db, counterGet, []any{key}, &n)
				return n, err
			},
			Capabilities: capabilities,
		})
	})
}
