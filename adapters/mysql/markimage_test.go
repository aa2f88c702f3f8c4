package mysql_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// binlogEnd returns the server's current binary log file and offset.
func binlogEnd(t *testing.T) (string, int64) {
	var file string
	var pos int64
	var a, b sql.NullString
	require.NoError(t, admin(t).QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &a, &b))
	return file, pos
}

// writeAndFetch writes n events of ~1 KiB, claims every lane for owner and fetches the first
// k: the leases and their seqs, for a Settle.
func writeAndFetch(t *testing.T, s *mysql.Store, owner string, n, k int) ([]driver.Lease, []int64) {
	t.Helper()
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	evs := make([]core.Event, n)
	for i := range evs {
		evs[i] = core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i), Type: "t", Payload: benchPayload}
	}
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error { _, err := ob.Write(ctx, tx, evs...); return err }))
	leases, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: owner, Max: core.DefaultLanes, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: k})
	require.NoError(t, err)
	require.Len(t, recs, k)
	seqs := make([]int64, k)
	for i, r := range recs {
		seqs[i] = r.Seq
	}
	return leases, seqs
}

// markBinlogBytes writes n events of ~1 KiB, marks them published with one Settle, and returns
// how many bytes of binary log the Settle wrote.
func markBinlogBytes(t *testing.T, s *mysql.Store, n int) int64 {
	ctx := context.Background()
	leases, seqs := writeAndFetch(t, s, "mark", n, n)
	file, before := binlogEnd(t)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: leases, Published: seqs}))
	file2, after := binlogEnd(t)
	require.Equal(t, file, file2, "the binary log rotated during the measurement")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(n), st.Published)
	return after - before
}

// A mark logs narrow rows only (the pending layout, migration 010: a settle log row inserted and
// a pending row deleted per record), never the ~1 KiB outbox row, with the full row image as
// well; on MariaDB the pending rows' deletes are logged with a minimal row image (their key).
// Not parallel: it measures the server's binary log, which parallel tests would write to
// meanwhile (sequential tests run while every parallel one waits).
func TestMarksLogAMinimalRowImage(t *testing.T) {
	minimal := newStore(t, nil)
	if !minimal.Version().MariaDB {
		require.False(t, minimal.MinimalMarks(), "SET STATEMENT is MariaDB's")
		return
	}
	require.True(t, minimal.MinimalMarks(), "the test user may set binlog_row_image")
	full := newStore(t, &mysql.Options{FullMarkImage: true})
	require.False(t, full.MinimalMarks())

	const n = 200
	small, large := markBinlogBytes(t, minimal, n), markBinlogBytes(t, full, n)
	t.Logf("binary log of marking %d rows: %d bytes minimal, %d bytes full", n, small, large)
	require.Less(t, small, int64(n*60), "minimal marks should log well under 60 bytes per row")
	require.Less(t, large, int64(n*len(benchPayload)/4), "a mark never logs the outbox row")
	require.Less(t, small, large, "the pending rows' deletes are logged by key")
}
