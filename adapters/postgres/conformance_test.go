package postgres

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/reconcile"
)

const counterTable = `CREATE TABLE counters (key text PRIMARY KEY, n integer NOT NULL)`

// Both stores read inbox records for reconciliation (conformance chain/reconcile checks them).
var (
	_ reconcile.InboxReader = (*Store[pgx.Tx])(nil)
	_ reconcile.InboxReader = (*Store[*sql.Tx])(nil)

	_ core.InboxBatchStore[pgx.Tx]  = (*Store[pgx.Tx])(nil)
	_ core.InboxBatchStore[*sql.Tx] = (*Store[*sql.Tx])(nil)
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
		Source: func(t *testing.T, a conformance.Adapter[pgx.Tx], name string) core.ChangeSource {
			slot := randomName("okt_slot_") + "_" + strings.ToLower(slotUnsafe.ReplaceAllString(name, "_"))
			if len(slot) > 63 {
				slot = slot[:63]
			}
			src, err := a.(*Store[pgx.Tx]).ChangeSource(&ChangeSourceOptions{Slot: slot, StandbyTimeout: 200 * time.Millisecond})
			require.NoError(t, err)
			holdSlot(t, src)
			return src
		},
		LosePosition: func(t *testing.T, _ conformance.Adapter[pgx.Tx], src core.ChangeSource) {
			require.NoError(t, src.(*ChangeSource).DropSlot(context.Background()))
		},
		Serial: true,
	}
}

var slotUnsafe = regexp.MustCompile(`[^A-Za-z0-9_]`)
