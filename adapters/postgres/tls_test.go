package postgres

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// The test server (scripts/lib/postgres.sh) has a TLS certificate for "localhost" only and
// refuses testkit.TLSOnlyUser every connection without TLS. TestConformance runs the whole
// suite (producer, relays, inbox, operator commands) as that user with sslmode=verify-full;
// package logical's TestCDCOverTLS runs the replication connection so, and cmd/outboxkit's
// TestOpsOverTLS the operator commands.

// tlsOnlyDSN creates testkit.TLSOnlyUser when missing and returns a verify-full DSN for it.
func tlsOnlyDSN(tb testing.TB) string {
	tb.Helper()
	_, err := admin(tb).Exec(context.Background(), testkit.PostgresTLSOnlyRole)
	require.NoError(tb, err)
	return testkit.PostgresTLSDSN(tb, "localhost", testkit.Need(tb, testkit.PostgresTLSCA))
}

// Without TLS, with a CA that did not sign the server's certificate, or through a name the
// certificate does not carry, nothing connects: Migrate fails with the verification error and
// creates nothing.
func TestTLSFailsClosed(t *testing.T) {
	t.Parallel()
	good := tlsOnlyDSN(t)
	ca := testkit.Need(t, testkit.PostgresTLSCA)
	for _, c := range []struct {
		name, dsn string
		check     func(t *testing.T, err error)
	}{
		{"verify_full", good, func(t *testing.T, err error) { require.NoError(t, err) }},
		{"no_tls", testkit.PostgresTLSDSN(t, "localhost", ca) + "&sslmode=disable", func(t *testing.T, err error) {
			require.ErrorContains(t, err, "no encryption", "the role is refused without TLS")
		}},
		{"untrusted_ca", testkit.PostgresTLSDSN(t, "localhost", testkit.UntrustedCA(t)), func(t *testing.T, err error) {
			var ve *tls.CertificateVerificationError
			require.ErrorAs(t, err, &ve)
			var ua x509.UnknownAuthorityError
			require.ErrorAs(t, err, &ua)
		}},
		{"wrong_host_name", testkit.PostgresTLSDSN(t, "127.0.0.1", ca), func(t *testing.T, err error) {
			var he x509.HostnameError
			require.ErrorAs(t, err, &he)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.name == "no_tls" {
				// sslmode appears twice: pgx takes the last one.
				cfg, err := pgxpool.ParseConfig(c.dsn)
				require.NoError(t, err)
				require.Nil(t, cfg.ConnConfig.TLSConfig)
			}
			d := newTestDB(t, dbOptions{dsn: c.dsn})
			s, err := New(d.pool, &Options{Schema: d.schema})
			require.NoError(t, err) // New connects to nothing
			err = s.Migrate(context.Background())
			c.check(t, err)
			if err != nil {
				var n int
				require.NoError(t, admin(t).QueryRow(context.Background(),
					"SELECT count(*) FROM pg_tables WHERE schemaname = $1", d.schema).Scan(&n))
				require.Zero(t, n, "nothing created")
				require.False(t, errors.Is(err, context.DeadlineExceeded))
			}
		})
	}
}
