package logical

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
)

const (
	counterTable = `CREATE TABLE counters (key text PRIMARY KEY, n integer NOT NULL)`
	counterBump  = `INSERT INTO counters AS c (key, n) VALUES ($1, 1) ON CONFLICT (key) DO UPDATE SET n = c.n + 1`
	counterGet   = `SELECT coalesce((SELECT n FROM counters WHERE key = $1), 0)`
)

// TestConformance runs the conformance suite with its "cdc" area (a CDC relay on a
// ChangeSource) on a pgx store with ClaimSkipLocked. Package postgres's TestConformance runs
// the other areas on every variant; the cdc area runs here, beside this package's other tests
// that hold replication slots (slotSem: the test server has few).
func TestConformance(t *testing.T) {
	t.Parallel()
	pgtest.DSN(t)
	conformance.Run(t, conformance.Harness[pgx.Tx]{
		CDC: cdcHarness(),
		New: func(t *testing.T, lanes int) conformance.Adapter[pgx.Tx] {
			s, d := migratedStore(t, dbOptions{SyncCommit: true}, &postgres.Options{Lanes: lanes, ClaimStrategy: postgres.ClaimSkipLocked})
			_, err := d.Pool.Exec(context.Background(), counterTable)
			require.NoError(t, err)
			return s
		},
		Effect: func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, counterBump, key)
			return err
		},
		EffectCount: func(ctx context.Context, a conformance.Adapter[pgx.Tx], key string) (int, error) {
			var n int
			err := bridge.Of(a).QueryRow(ctx, counterGet, []any{key}, &n)
			return n, err
		},
		Diagnose: func(ctx context.Context) string { return pgtest.ServerState(ctx, pgtest.Admin(t)) },
		// The store's capabilities, and the slot release of the change source.
		Capabilities: conformance.Notifier | conformance.Waker | conformance.Flusher |
			conformance.OperatorStore | conformance.LaneResizer | conformance.LaneInserter |
			conformance.InboxBatchStore | conformance.PartitionPruner | conformance.CheckpointStore |
			conformance.Liveness | conformance.CheckpointReleaser | conformance.AuditWriter |
			conformance.InboxReader | conformance.LogReleaser | conformance.PartitionedInbox |
			conformance.IngressCounter,
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
			src, err := NewChangeSource(a.(*postgres.Store[pgx.Tx]), &Options{Slot: slot, StandbyTimeout: 200 * time.Millisecond, StallTimeout: 10 * time.Second})
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
