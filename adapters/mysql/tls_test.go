package mysql_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"fmt"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The polling relay, the producer and the inbox on MariaDB over TLS, as testkit.TLSOnlyUser
// (REQUIRE SSL: the server refuses it without TLS), the server's certificate and name verified;
// with no TLS, an untrusted CA or another name, nothing connects.
func TestTLS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, name := newDB(t)
	db, err := sql.Open("mysql", testkit.MySQLTLSDSN(t, name, testkit.MySQLTLSVerify))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	var variable, cipher string
	require.NoError(t, db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&variable, &cipher))
	require.NotEmpty(t, cipher, "the connection uses TLS")

	s := storeOn(t, db, nil)
	ob, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	write := testkit.Writer[*sql.Tx](s, ob, 1, []byte(`{}`))
	var w testkit.Written
	const n = 40
	for i := range n {
		require.NoError(t, w.Write(ctx, write, fmt.Sprintf("k%d", i%4)))
	}
	rec := &testkit.Recorder{}
	relay, err := core.NewRelay(s, rec, core.StaticRouter{Default: "d"}, &core.RelayOptions{PollInterval: 20 * time.Millisecond, Logger: quietLogger()})
	require.NoError(t, err)
	stop := testkit.StartRelay(t, ctx, relay)
	require.True(t, rec.AwaitAll(n, func() bool { return true }, time.Minute), "every event delivered")
	stop()
	testkit.CheckDeliveries(t, w.ByKey(), rec.Snapshot())

	inbox, err := core.NewInbox[*sql.Tx](ctx, s, nil)
	require.NoError(t, err)
	msg := core.InboxMessage{EventID: "e1", Payload: []byte(`{}`)}
	res, err := inbox.Process(ctx, "c", msg, func(ctx context.Context, tx *sql.Tx, _ core.InboxMessage) error { return effect(ctx, tx, "e1") })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)

	for _, c := range []struct {
		tlsName string
		check   func(t *testing.T, err error)
	}{
		{"", func(t *testing.T, err error) {
			var me *mysqldrv.MySQLError
			require.ErrorAs(t, err, &me)
			require.Equal(t, uint16(1045), me.Number, "access denied without TLS: %v", err)
		}},
		{testkit.MySQLTLSUntrusted, func(t *testing.T, err error) {
			var ua x509.UnknownAuthorityError
			require.ErrorAs(t, err, &ua)
		}},
		{testkit.MySQLTLSWrongHost, func(t *testing.T, err error) {
			var ve *tls.CertificateVerificationError
			require.ErrorAs(t, err, &ve)
			var he x509.HostnameError
			require.ErrorAs(t, err, &he)
		}},
	} {
		other, err := sql.Open("mysql", testkit.MySQLTLSDSN(t, name, c.tlsName))
		require.NoError(t, err)
		err = other.PingContext(ctx)
		require.Error(t, err, "tls=%q", c.tlsName)
		c.check(t, err)
		require.NoError(t, other.Close())
	}
}
