package pgtest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
)

// The conformance watchdog's diagnosis reads the server's state: the WAL position, the slots,
// the WAL senders and the sessions.
func TestServerState(t *testing.T) {
	t.Parallel()
	_ = pgtest.HoldWAL(t) // holds a physical slot until the test ends
	out := pgtest.ServerState(t.Context(), pgtest.Admin(t))
	require.Contains(t, out, "wal insert=")
	require.Contains(t, out, "slot okt_walhold_")
	require.Contains(t, out, "session pid=")
	require.NotContains(t, out, "query failed")
}
