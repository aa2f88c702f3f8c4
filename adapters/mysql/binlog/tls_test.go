package binlog_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// A CDC relay on MariaDB whose store and binlog connection use TLS as testkit.TLSOnlyUser
// (REQUIRE SSL: the server refuses that user without TLS), the server's certificate and name
// verified, delivers every event in order; the same binlog connection without TLS is refused.
func TestCDCOverTLS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, name := newDB(t)
	dsn := testkit.MySQLTLSDSN(t, name, testkit.MySQLTLSVerify)
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s := storeOn(t, db, nil)
	src, err := binlog.NewChangeSource(s, &binlog.Options{DSN: dsn, Logger: quietLogger()})
	require.NoError(t, err)

	rec := &testkit.Recorder{}
	relay, err := core.NewCDCRelay(s, src, rec, core.StaticRouter{Default: "d"}, &core.CDCOptions{Logger: quietLogger()})
	require.NoError(t, err)
	running := core.Start(ctx, relay)
	defer func() { require.NoError(t, running.Stop(context.WithoutCancel(ctx))) }()

	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	write := testkit.Writer[*sql.Tx](s, ob, 1, []byte(`{}`))
	var w testkit.Written
	const n = 40
	for i := range n {
		require.NoError(t, w.Write(ctx, write, fmt.Sprintf("k%d", i%4)))
	}
	require.True(t, rec.AwaitAll(n, func() bool { return true }, time.Minute), "every event delivered")
	testkit.CheckDeliveries(t, w.ByKey(), rec.Snapshot())

	plain, err := binlog.NewChangeSource(s, &binlog.Options{DSN: testkit.MySQLTLSDSN(t, name, ""), Logger: quietLogger()})
	require.NoError(t, err)
	_, _, err = plain.Start(ctx)
	require.ErrorContains(t, err, "Access denied", "the binlog connection above used TLS")
}
