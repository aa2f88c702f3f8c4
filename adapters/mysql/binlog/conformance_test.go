package binlog_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
)

// TestConformance runs the conformance suite with its "cdc" area (a CDC relay on a ChangeSource)
// on a ClaimSkipLocked store. Package mysql's TestConformance runs the other areas for both
// claim strategies; the cdc area runs here, in the package of every test that reads the binary
// log, because its LosePosition purges the server's binary logs (holding binlogMu).
func TestConformance(t *testing.T) {
	t.Parallel()
	testConfig(t)
	conformance.Run(t, conformance.Harness[*sql.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] {
			return newStore(t, &mysql.Options{Lanes: lanes, ClaimStrategy: mysql.ClaimSkipLocked})
		},
		Effect: effect,
		EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) {
			return effectCount(ctx, a.(*mysql.Store).DB(), key)
		},
		CDC: cdcHarness(),
		// The store's capabilities (binlog sources hold nothing to release: no LogReleaser).
		Capabilities: conformance.Notifier | conformance.Waker | conformance.OperatorStore |
			conformance.LaneResizer | conformance.LaneInserter | conformance.CheckpointStore |
			conformance.Liveness | conformance.CheckpointReleaser | conformance.AuditWriter |
			conformance.InboxReader | conformance.IngressCounter,
	})
}

// cdcHarness gives the conformance suite's "cdc" area the binary log of the store's database
// (GTID positions on MariaDB). LosePosition purges the binary logs of the whole server (holding
// binlogMu, so no other binlog test of this package runs meanwhile), hence Serial.
func cdcHarness() *conformance.CDCHarness[*sql.Tx] {
	return &conformance.CDCHarness[*sql.Tx]{
		Source: func(t *testing.T, a conformance.Adapter[*sql.Tx], name string) driver.ChangeSource {
			s := a.(*mysql.Store)
			var db string
			require.NoError(t, s.DB().QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&db))
			src, err := binlog.NewChangeSource(s, &binlog.Options{DSN: dsnOf(t, db), Logger: quietLogger()})
			require.NoError(t, err)
			return src
		},
		LosePosition: func(t *testing.T, a conformance.Adapter[*sql.Tx], _ driver.ChangeSource) {
			db := a.(*mysql.Store).DB()
			binlogMu.Lock()
			defer binlogMu.Unlock()
			// A transaction after the checkpoint: otherwise the newest log could still serve a
			// GTID position that is its start state.
			_, err := db.Exec("CREATE TABLE IF NOT EXISTS cdc_scratch (id INT AUTO_INCREMENT PRIMARY KEY) ENGINE=InnoDB")
			require.NoError(t, err)
			_, err = db.Exec("INSERT INTO cdc_scratch () VALUES ()")
			require.NoError(t, err)
			purgeBinaryLogs(t)
		},
		Serial: true,
	}
}

// purgeBinaryLogs rotates the binary log and purges every older one; it returns the newest
// (now the only) log. The caller holds binlogMu.
func purgeBinaryLogs(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	adm := admin(t)
	_, err := adm.ExecContext(ctx, "FLUSH BINARY LOGS")
	require.NoError(t, err)
	var newest string
	var a, b, c sql.NullString
	require.NoError(t, adm.QueryRowContext(ctx, "SHOW MASTER STATUS").Scan(&newest, &a, &b, &c))
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := adm.ExecContext(ctx, "PURGE BINARY LOGS TO '"+newest+"'")
		require.NoError(t, err)
		var oldest string
		var size int64
		rows, err := adm.QueryContext(ctx, "SHOW BINARY LOGS")
		require.NoError(t, err)
		require.True(t, rows.Next())
		require.NoError(t, rows.Scan(&oldest, &size))
		require.NoError(t, rows.Close())
		if oldest == newest {
			return newest
		}
		require.True(t, time.Now().Before(deadline), "binary logs before %s were not purged", newest)
		time.Sleep(100 * time.Millisecond) // the server frees a log once its readers are gone
	}
}
