package daemon

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

const goodConfig = `
database:
  driver: postgres
  dsn: postgres://localhost/app
  schema: app
mode: polling
relay:
  workers: 3
  batch_size: 200
  lease_ttl: 10s
  retry:
    initial: 2s
sink: sqs
aws:
  region: eu-west-1
routes:
  default: https://queue/default
  by_type:
    order.created: https://queue/orders
cleanup:
  enabled: true
  retention: 48h
`

func noEnv(string) string { return "" }

func TestLoadGoodConfig(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, goodConfig), noEnv, nil)
	require.NoError(t, err)
	require.Equal(t, "app", cfg.Database.Schema)
	require.Equal(t, 3, cfg.Relay.Workers)
	require.Equal(t, 10*time.Second, cfg.Relay.LeaseTTL.D())
	require.Equal(t, 2*time.Second, cfg.Relay.Retry.Initial.D())
	require.Equal(t, "https://queue/orders", cfg.Routes.ByType["order.created"])
	require.Equal(t, 48*time.Hour, cfg.Cleanup.Retention.D())
	require.Equal(t, time.Hour, cfg.Cleanup.Interval.D(), "default kept")
	require.Equal(t, 30*time.Second, cfg.ShutdownTimeout.D(), "default kept")
	require.Equal(t, "json", cfg.Log.Format)
	require.False(t, cfg.Migrate, "--migrate is off by default")
}

// Every bad key is reported on its own line with its path, unknown keys included.
func TestLoadReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database:
  driver: oracle
  dns: typo
relay:
  batch_size: lots
  lease_ttl: 5 minutes
sinks:
  sqs:
    queue: https://x
sink: sqs
routes:
  default: https://x
log:
  format: xml
`), noEnv, nil)
	require.Error(t, err)
	require.True(t, IsConfigError(err))
	require.Equal(t, []string{
		`database.dns: unknown key (line 4)`,
		`database.driver: "oracle" is not one of postgres, mysql, sqlite`,
		`database.dsn: required`,
		`log.format: "xml" is not one of json, text`,
		`relay.batch_size: not an integer: "lots" (line 6)`,
		`relay.lease_ttl: not a duration: "5 minutes" (line 7)`,
		`sinks.sqs.queue: unknown key (line 10)`,
	}, err.(*ConfigError).Problems)
}

func TestLoadKafkaIsAdmittedButNotBuilt(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: kafka
sinks:
  kafka:
    brokers: [127.0.0.1:9092]
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{"sink: kafka is not available in this build"}, err.(*ConfigError).Problems)
}

// A flag wins over the environment, which wins over the file.
func TestLoadPrecedence(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	Flags(fs)
	require.NoError(t, fs.Parse([]string{"--relay-batch-size=7", "--migrate", "--log-format", "text"}))
	env := map[string]string{
		"OUTBOXKIT_RELAY_BATCH_SIZE":    "5",
		"OUTBOXKIT_RELAY_WORKERS":       "4",
		"OUTBOXKIT_RELAY_POLL_INTERVAL": "250ms",
	}
	cfg, err := Load(writeConfig(t, goodConfig), func(k string) string { return env[k] }, fs)
	require.NoError(t, err)
	require.Equal(t, 7, cfg.Relay.BatchSize, "flag over env")
	require.Equal(t, 4, cfg.Relay.Workers, "env over file")
	require.Equal(t, 250*time.Millisecond, cfg.Relay.PollInterval.D())
	require.True(t, cfg.Migrate)
	require.Equal(t, "text", cfg.Log.Format)

	env["OUTBOXKIT_RELAY_WORKERS"] = "many"
	_, err = Load(writeConfig(t, goodConfig), func(k string) string { return env[k] }, fs)
	require.EqualError(t, err, `relay.workers: not an integer: "many" (from $OUTBOXKIT_RELAY_WORKERS)`)
}
