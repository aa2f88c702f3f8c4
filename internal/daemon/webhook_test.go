package daemon

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sink: webhook takes its settings from sinks.webhook; the secrets may come from the
// environment, comma-separated, and the sink is built with them.
func TestLoadWebhook(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOXKIT_SINKS_WEBHOOK_SECRETS": "whsec_MTIzNDU2Nzg5MDEyMzQ1Ng==,whsec_YWJjZGVm"}
	cfg, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: webhook
sinks:
  webhook:
    source: /shop
    content_type: application/json
    timeout: 3s
    concurrency: 4
    max_body_bytes: 65536
routes:
  default: https://hooks.internal/events
  by_type: {order.placed: "http://127.0.0.1:8080/orders"}
`), func(k string) string { return env[k] }, nil)
	require.NoError(t, err)
	w := cfg.Sinks.Webhook
	require.Equal(t, []string{"whsec_MTIzNDU2Nzg5MDEyMzQ1Ng==", "whsec_YWJjZGVm"}, w.Secrets)
	o := w.options(nil)
	require.Equal(t, 3*time.Second, o.Timeout)
	require.Equal(t, 4, o.Concurrency)
	require.Equal(t, 65536, o.MaxBodyBytes)
	require.Equal(t, "/shop", o.Source)
	require.Equal(t, "application/json", o.ContentType)
	s, closeSink, err := newWebhookSink(w, nil)
	require.NoError(t, err)
	require.NotNil(t, s)
	closeSink()
}

func TestLoadWebhookReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: webhook
sinks:
  webhook:
    secrets: [whsec_MTIz, "whsec_not base64", whsec_]
    timeout: -1s
    concurrency: -1
    max_body_bytes: -5
    batch_size: -2
    batch_max_bytes: -1
    tls: {ca_file: /nonexistent/ca.pem}
routes:
  default: orders
  by_type: {order.placed: "ftp://h/x", order.paid: "https://ok.internal/paid"}
  by_destination: {billing: "http://bad host/x"}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`routes.by_destination.billing: must be an absolute http or https URL with a host, got "http://bad host/x" (sink webhook: routes name endpoint URLs)`,
		`routes.by_type.order.placed: must be an absolute http or https URL with a host, got "ftp://h/x" (sink webhook: routes name endpoint URLs)`,
		`routes.default: must be an absolute http or https URL with a host, got "orders" (sink webhook: routes name endpoint URLs)`,
		`sinks.webhook.batch_max_bytes: must not be negative`,
		`sinks.webhook.batch_size: must not be negative (0 or 1: one request per event)`,
		`sinks.webhook.concurrency: must not be negative`,
		`sinks.webhook.max_body_bytes: must not be negative`,
		`sinks.webhook.secrets[1]: want whsec_ followed by the standard base64 of a non-empty key`,
		`sinks.webhook.secrets[2]: want whsec_ followed by the standard base64 of a non-empty key`,
		`sinks.webhook.timeout: must not be negative`,
		`sinks.webhook.tls.ca_file: open /nonexistent/ca.pem: no such file or directory`,
	}, err.(*ConfigError).Problems)
	require.NotContains(t, err.Error(), "not base64", "a secret was quoted in an error")

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: webhook
routes: {default: "https://hooks.internal/events"}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.webhook.secrets: required with sink webhook (whsec_ followed by the base64 of the key; e.g. $OUTBOXKIT_SINKS_WEBHOOK_SECRETS)`,
	}, err.(*ConfigError).Problems)
}
