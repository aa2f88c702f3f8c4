package logical

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// A CDC relay whose store connects with sslmode=verify-full as testkit.TLSOnlyUser, which the
// test server refuses every connection without TLS, replication connections included: the
// change source derives its replication connection from the store's pool, so it uses TLS too,
// and the relay delivers every event in order.
func TestCDCOverTLS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := admin(t).Exec(ctx, testkit.PostgresTLSOnlyRole)
	require.NoError(t, err)
	dsn := testkit.PostgresTLSDSN(t, "localhost", testkit.Need(t, testkit.PostgresTLSCA))
	s, _ := migratedStore(t, dbOptions{DSN: dsn, SyncCommit: true}, nil)
	src, err := NewChangeSource(s, &Options{Slot: randomName("okt_slot_tls_")})
	require.NoError(t, err)
	holdSlot(t, src)

	rec := &testkit.Recorder{}
	relay, err := core.NewCDCRelay(s, src, rec, core.StaticRouter{Default: "d"}, nil)
	require.NoError(t, err)
	running := core.Start(ctx, relay)
	defer func() { require.NoError(t, running.Stop(context.WithoutCancel(ctx))) }()

	ob, err := core.NewOutbox[pgx.Tx](ctx, s, nil)
	require.NoError(t, err)
	write := testkit.Writer[pgx.Tx](s, ob, 1, []byte(`{}`))
	var w testkit.Written
	const n = 40
	for i := range n {
		require.NoError(t, w.Write(ctx, write, fmt.Sprintf("k%d", i%4)))
	}
	require.True(t, rec.AwaitAll(n, func() bool { return true }, time.Minute), "every event delivered")
	testkit.CheckDeliveries(t, w.ByKey(), rec.Snapshot())

	// The role's replication connection without TLS is refused: the relay above used TLS.
	plain, err := NewChangeSource(s, &Options{Slot: randomName("okt_slot_tls_"), ConnString: dsn + "&sslmode=disable"})
	require.NoError(t, err)
	_, _, err = plain.Start(ctx)
	require.ErrorContains(t, err, "no encryption")
}
