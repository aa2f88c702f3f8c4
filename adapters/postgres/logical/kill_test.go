package logical

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// killChildEnv makes the test binary a CDC relay process for TestCDCRelaySurvivesSIGKILL:
// "<schema>|<slot>|<output file>".
const killChildEnv = "OUTBOXKIT_CDC_KILL_CHILD"

func TestMain(m *testing.M) { testkit.KillMain(m, killChildEnv, runKillChild) }

// runKillChild runs a CDC relay publishing to a testkit.FileSink until it is killed.
func runKillChild(spec string) error {
	parts := strings.SplitN(spec, "|", 4)
	dsn, schema, slot, out := parts[0], parts[1], parts[2], parts[3]
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = quote(schema)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	store, err := postgres.New(pool, &postgres.Options{Schema: schema})
	if err != nil {
		return err
	}
	src, err := NewChangeSource(store, &Options{Slot: slot})
	if err != nil {
		return err
	}
	return testkit.KillRelay(ctx, store, src, out)
}

// A CDC relay process killed with SIGKILL while it delivers, six times, and restarted, loses
// nothing and keeps per-key order; only what was in flight at each kill is delivered again.
func TestCDCRelaySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	s, d := migratedStore(t, dbOptions{SyncCommit: true}, nil)
	slot := randomName("okt_kill_")
	src, err := NewChangeSource(s, &Options{Slot: slot})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.DropSlot(context.Background()) })
	ob, err := core.NewOutbox(t.Context(), s, nil)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "delivered.txt")
	testkit.RunKill(t, testkit.KillOptions{
		ChildEnv: killChildEnv, ChildSpec: testDSN(t) + "|" + d.Schema + "|" + slot + "|" + out, Out: out,
		Write: testkit.Writer(s, ob, 2, nil),
		// What a kill can resend: the batches sent and not yet checkpointed, 20 records each:
		// the one being sent, 8 queued for the settler and up to 9 merged in the settle that
		// runs.
		MaxResent: 18 * 20,
	})
}
