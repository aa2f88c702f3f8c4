package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// sink: nats takes the connection's settings from sinks.nats; the token may come from the
// environment.
func TestLoadNATS(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, selfSignedPEM(t), 0o600))
	env := map[string]string{"OUTBOXKIT_SINKS_NATS_TOKEN": "s3cret"}
	cfg, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: nats
sinks:
  nats:
    url: nats://127.0.0.1:4222, tls://nats.internal:4443
    concurrency: 2
    ack_timeout: 3s
    tls: {ca_file: `+ca+`}
routes: {default: orders.events}
`), func(k string) string { return env[k] }, nil)
	require.NoError(t, err)
	n := cfg.Sinks.NATS
	require.Equal(t, "nats://127.0.0.1:4222, tls://nats.internal:4443", n.URL)
	require.Equal(t, "s3cret", n.Token)
	require.Equal(t, 2, n.Concurrency)
	require.Equal(t, 3*time.Second, n.AckTimeout.D())
	require.Equal(t, ca, n.TLS.CAFile)
	o := nats.GetDefaultOptions()
	for _, opt := range n.options(nil) {
		require.NoError(t, opt(&o))
	}
	require.Equal(t, "s3cret", o.Token)
	require.Equal(t, "outboxkit-relay", o.Name)
	require.Equal(t, -1, o.MaxReconnect)
	require.True(t, o.Secure, "tls.ca_file implies TLS")
}

func TestLoadNATSReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("no certificate here"), 0o600))
	_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: nats
sinks:
  nats:
    url: "http://h:4222, nats://bad host:4222, nats://h:0, nats://ok:4222"
    token: t
    creds_file: /nonexistent/relay.creds
    concurrency: -1
    ack_timeout: -1s
    tls: {ca_file: `+notPEM+`}
routes: {default: orders.events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.nats.ack_timeout: must not be negative (0: default 5s)`,
		`sinks.nats.concurrency: must not be negative (0: default 4)`,
		`sinks.nats.creds_file: stat /nonexistent/relay.creds: no such file or directory`,
		`sinks.nats.tls.ca_file: nats: failed to parse root certificate from "` + notPEM + `"`,
		`sinks.nats.token: not with sinks.nats.creds_file: choose one way to authenticate`,
		`sinks.nats.url: want nats://host:port or tls://host:port, got "http://h:4222"; want nats://host:port or tls://host:port, got "nats://bad host:4222"; bad port "0" in "nats://h:0": want 1 to 65535`,
	}, err.(*ConfigError).Problems)

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: nats
routes: {default: orders.events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{`sinks.nats.url: required with sink nats (nats://host:port)`}, err.(*ConfigError).Problems)
}
