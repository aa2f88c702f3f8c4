package daemon

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sink: rabbitmq takes the URL (its password from the environment), concurrency, confirm
// timeout, size limit and TLS files from sinks.rabbitmq, and builds the sink with them.
func TestLoadRabbitMQ(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOXKIT_SINKS_RABBITMQ_URL": "amqps://relay:s3cret@mq.internal:5671/billing"}
	cfg, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: rabbitmq
sinks:
  rabbitmq:
    url: amqp://relay@localhost/
    concurrency: 4
    confirm_timeout: 5s
    max_message_bytes: 1048576
    tls: {server_name: mq.example}
routes: {default: events/order}
`), func(k string) string { return env[k] }, nil)
	require.NoError(t, err)
	r := cfg.Sinks.RabbitMQ
	require.Equal(t, "amqps://relay:s3cret@mq.internal:5671/billing", r.URL, "the environment wins over the file")
	o, err := r.options(slog.Default())
	require.NoError(t, err)
	require.Equal(t, 4, o.Concurrency)
	require.Equal(t, 5*time.Second, o.ConfirmTimeout)
	require.Equal(t, 1<<20, o.MaxMessageBytes)
	require.NotNil(t, o.Config.TLSClientConfig)
	require.Equal(t, "mq.example", o.Config.TLSClientConfig.ServerName)
	sink, closeSink, err := newRabbitMQSink(r, slog.Default())
	require.NoError(t, err)
	require.NotNil(t, sink)
	closeSink()
}

func TestLoadRabbitMQReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: rabbitmq
sinks:
  rabbitmq:
    url: "http://relay:s3cret@mq.internal/"
    concurrency: -1
    confirm_timeout: -1s
    max_message_bytes: -5
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	problems := err.(*ConfigError).Problems
	require.Equal(t, []string{
		`sinks.rabbitmq.concurrency: must not be negative`,
		`sinks.rabbitmq.confirm_timeout: must not be negative`,
		`sinks.rabbitmq.max_message_bytes: must not be negative`,
		`sinks.rabbitmq.url: not an amqp:// or amqps:// URL (scheme, host, port from 1 to 65535, vhost)`,
	}, problems)
	require.NotContains(t, strings.Join(problems, "\n"), "s3cret", "a problem never quotes the URL's password")

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: rabbitmq
sinks:
  rabbitmq:
    url: amqp://relay:s3cret@mq.internal/
    tls: {ca_file: /nonexistent/ca.pem}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{`sinks.rabbitmq.tls.ca_file: needs an amqps:// url`}, err.(*ConfigError).Problems)

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: rabbitmq
sinks:
  rabbitmq:
    tls: {ca_file: /nonexistent/ca.pem}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{`sinks.rabbitmq.url: required with sink rabbitmq (amqp://user:password@host:5672/vhost; the password may come from $OUTBOXKIT_SINKS_RABBITMQ_URL)`}, err.(*ConfigError).Problems)

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: rabbitmq
sinks:
  rabbitmq:
    url: amqps://relay:s3cret@mq.internal/
    tls: {ca_file: /nonexistent/ca.pem, key_file: /nonexistent/key.pem}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.rabbitmq.tls.ca_file: open /nonexistent/ca.pem: no such file or directory`,
		`sinks.rabbitmq.tls.cert_file: required with tls.key_file`,
	}, err.(*ConfigError).Problems)
}
