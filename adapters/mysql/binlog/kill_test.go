package binlog_test

import (
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// killChildEnv makes the test binary a CDC relay process for TestCDCRelaySurvivesSIGKILL:
// "<dsn>\n<output file>".
const killChildEnv = "OUTBOXKIT_CDC_KILL_CHILD"

func TestMain(m *testing.M) { testkit.KillMain(m, killChildEnv, runKillChild) }

// runKillChild runs a CDC relay publishing to a testkit.FileSink until it is killed.
func runKillChild(spec string) error {
	dsn, out, _ := strings.Cut(spec, "\n")
	ctx := context.Background()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	store, err := mysql.New(ctx, db, &mysql.Options{DSN: dsn, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	src, err := binlog.NewChangeSource(store, nil)
	if err != nil {
		return err
	}
	return testkit.KillRelay(ctx, store, src, out)
}

// A CDC relay process reading the binary log, killed with SIGKILL while it delivers, six
// times, and restarted, loses nothing and keeps per-key order.
func TestCDCRelaySurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	db, name := newDB(t)
	s := storeOn(t, db, nil)
	cfg := testConfig(t).Clone()
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	ob, err := core.NewOutbox(t.Context(), driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "delivered.txt")
	testkit.RunKill(t, testkit.KillOptions{
		ChildEnv: killChildEnv, ChildSpec: cfg.FormatDSN() + "\n" + out, Out: out,
		Write: testkit.Writer(driver.Transactor[*sql.Tx](s), ob, 2, nil),
		// What a kill can resend: the batches sent and not yet checkpointed, 20 records each:
		// the one being sent, 8 queued for the settler and up to 9 merged in the settle that
		// runs.
		MaxResent: 18 * 20,
	})
}
