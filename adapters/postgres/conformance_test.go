package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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

const counterBump = `INSERT INTO counters AS c (key, n) VALUES ($1, 1)
	ON CONFLICT (key) DO UPDATE SET n = c.n + 1`
const counterGet = `SELECT coalesce((SELECT n FROM counters WHERE key = $1), 0)`

func TestConformance(t *testing.T) {
	t.Parallel()
	testDSN(t)
	for _, c := range []struct {
		name     string
		mode     pgx.QueryExecMode
		strategy ClaimStrategy
		async    bool
		part     *Partitioning
		cdc      bool // the "cdc" area runs in one variant only (replication slots are scarce)
	}{
		{"pgx/cache_statement/skip_locked", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, false, nil, true},
		{"pgx/cache_statement/advisory_lock", pgx.QueryExecModeCacheStatement, ClaimAdvisoryLock, false, nil, false},
		{"pgx/simple_protocol/skip_locked", pgx.QueryExecModeSimpleProtocol, ClaimSkipLocked, false, nil, false},
		{"pgx/simple_protocol/advisory_lock", pgx.QueryExecModeSimpleProtocol, ClaimAdvisoryLock, false, nil, false},
		{"pgx/cache_statement/skip_locked/async_settle", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, true, nil, false},
		{"pgx/cache_statement/skip_locked/partitioned", pgx.QueryExecModeCacheStatement, ClaimSkipLocked, false, &Partitioning{}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var cdc *conformance.CDCHarness[pgx.Tx]
			if c.cdc {
				cdc = cdcHarness()
			}
			conformance.Run(t, conformance.Harness[pgx.Tx]{
				CDC: cdc,
				New: func(t *testing.T, lanes int) conformance.Adapter[pgx.Tx] {
					s, d := migratedStore(t, dbOptions{mode: c.mode, syncCommit: c.cdc}, &Options{Lanes: lanes, ClaimStrategy: c.strategy, AsyncSettle: c.async, Partitioning: c.part})
					_, err := d.pool.Exec(context.Background(), counterTable)
					require.NoError(t, err)
					return s
				},
				Effect: func(ctx context.Context, tx pgx.Tx, key string) error {
					_, err := tx.Exec(ctx, counterBump, key)
					return err
				},
				EffectCount: func(ctx context.Context, a conformance.Adapter[pgx.Tx], key string) (int, error) {
					var n int
					err := queryRow(ctx, a.(*Store[pgx.Tx]).db, counterGet, []any{key}, &n)
					return n, err
				},
				Diagnose: func(ctx context.Context) string { return serverState(ctx, admin(t)) },
			})
		})
	}
	t.Run("database_sql/skip_locked", func(t *testing.T) {
		t.Parallel()
		conformance.Run(t, conformance.Harness[*sql.Tx]{
			New: func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] {
				d := newTestDB(t, dbOptions{})
				s, err := NewSQL(d.sqlDB(t), &Options{Schema: d.schema, Lanes: lanes})
				require.NoError(t, err)
				require.NoError(t, s.Migrate(context.Background()))
				_, err = d.pool.Exec(context.Background(), counterTable)
				require.NoError(t, err)
				return s
			},
			Effect: func(ctx context.Context, tx *sql.Tx, key string) error {
				_, err := tx.ExecContext(ctx, counterBump, key)
				return err
			},
			EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) {
				var n int
				err := queryRow(ctx, a.(*Store[*sql.Tx]).db, counterGet, []any{key}, &n)
				return n, err
			},
		})
	})
}

// cdcHarness gives the conformance suite a logical replication source per name, on its own slot
// (dropped at cleanup). The area runs serially: every case holds one or two replication slots
// and WAL senders, which the test server has few of (max_replication_slots = 10, shared with
// the package's other tests).
func cdcHarness() *conformance.CDCHarness[pgx.Tx] {
	return &conformance.CDCHarness[pgx.Tx]{
		Source: func(t *testing.T, a conformance.Adapter[pgx.Tx], name string) driver.ChangeSource {
			slot := randomName("okt_slot_") + "_" + strings.ToLower(slotUnsafe.ReplaceAllString(name, "_"))
			if len(slot) > 63 {
				slot = slot[:63]
			}
			// StallTimeout well above a loaded server's keepalive answer (the default would be
			// 600 ms here): cdc/commit-order asserts that each event is delivered once, and a
			// replaced stream resends from the checkpoint.
			src, err := a.(*Store[pgx.Tx]).ChangeSource(&ChangeSourceOptions{Slot: slot, StandbyTimeout: 200 * time.Millisecond, StallTimeout: 10 * time.Second})
			require.NoError(t, err)
			holdSlot(t, src)
			return src
		},
		LosePosition: func(t *testing.T, _ conformance.Adapter[pgx.Tx], src driver.ChangeSource) {
			require.NoError(t, src.(*ChangeSource).DropSlot(context.Background()))
		},
		Serial: true,
	}
}

var slotUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]`)

// serverState is the server's view when a conformance subtest hangs: the WAL position, every
// replication slot and WAL sender, and every other session with its wait event and the age of
// its transaction (a stalled stream is told from a stalled relay by it).
func serverState(ctx context.Context, a *pgxpool.Pool) string {
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

// The conformance watchdog's diagnosis reads the server's state: the WAL position, the slots,
// the WAL senders and the sessions.
func TestServerState(t *testing.T) {
	t.Parallel()
	_ = walLSN(t) // holds a physical slot until the test ends
	out := serverState(t.Context(), admin(t))
	require.Contains(t, out, "wal insert=")
	require.Contains(t, out, "slot okt_walhold_")
	require.Contains(t, out, "session pid=")
	require.NotContains(t, out, "query failed")
}
