package daemon

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/sinks/kafka"
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
sinks:
  sqs:
    unordered_standard: true
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
	require.True(t, cfg.Sinks.SQS.UnorderedStandard)
	require.False(t, cfg.Sinks.SNS.UnorderedStandard, "default kept")
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

// sink: kafka takes the franz-go client's settings from sinks.kafka; the password may come from
// the environment, and the client is built with them.
func TestLoadKafka(t *testing.T) {
	t.Parallel()
	env := map[string]string{"OUTBOXKIT_SINKS_KAFKA_SASL_PASSWORD": "s3cret"}
	cfg, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: kafka
sinks:
  kafka:
    brokers: [127.0.0.1:9092, "[::1]:9093"]
    client_id: billing-relay
    compression: zstd
    tls: {enabled: true, server_name: kafka.internal}
    sasl: {mechanism: scram-sha-512, username: relay}
routes: {default: events}
`), func(k string) string { return env[k] }, nil)
	require.NoError(t, err)
	k := cfg.Sinks.Kafka
	require.Equal(t, []string{"127.0.0.1:9092", "[::1]:9093"}, k.Brokers)
	require.Equal(t, "s3cret", k.SASL.Password)

	opts, err := k.clientOptions()
	require.NoError(t, err)
	client, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	defer client.Close()
	require.Equal(t, []string{"127.0.0.1:9092", "[::1]:9093"}, client.OptValue(kgo.SeedBrokers))
	require.Equal(t, "billing-relay", client.OptValue(kgo.ClientID))
	require.Equal(t, []kgo.CompressionCodec{kgo.ZstdCompression()}, client.OptValue(kgo.ProducerBatchCompression))
	tlsCfg, _ := client.OptValue(kgo.DialTLSConfig).(*tls.Config)
	require.NotNil(t, tlsCfg)
	require.Equal(t, "kafka.internal", tlsCfg.ServerName)
	require.Len(t, client.OptValue(kgo.SASL), 1)
	_, err = kafka.New(client, nil)
	require.NoError(t, err, "the client keeps the idempotent producer the sink requires")
}

func TestLoadKafkaReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: kafka
sinks:
  kafka:
    brokers: [localhost]
    compression: xz
    concurrency: -1
    tls: {ca_file: /nonexistent/ca.pem}
    sasl: {username: relay}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.kafka.brokers: "localhost" is not host:port`,
		`sinks.kafka.compression: "xz" is not one of none, gzip, snappy, lz4, zstd`,
		`sinks.kafka.concurrency: must not be negative`,
		`sinks.kafka.sasl.mechanism: required with sasl.username or sasl.password`,
		`sinks.kafka.tls.ca_file: needs sinks.kafka.tls.enabled`,
	}, err.(*ConfigError).Problems)

	_, err = Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: kafka
sinks:
  kafka:
    tls: {enabled: true, ca_file: /nonexistent/ca.pem, key_file: /nonexistent/key.pem}
    sasl: {mechanism: gssapi}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.kafka.brokers: required with sink kafka`,
		`sinks.kafka.sasl.mechanism: "gssapi" is not one of plain, scram-sha-256, scram-sha-512`,
		`sinks.kafka.tls.ca_file: open /nonexistent/ca.pem: no such file or directory`,
		`sinks.kafka.tls.cert_file: required with tls.key_file`,
	}, err.(*ConfigError).Problems)
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

	// A bad value stays an error where a good flag or environment value of the same key would
	// win (README: "wherever they come from").
	delete(env, "OUTBOXKIT_RELAY_WORKERS")
	env["OUTBOXKIT_RELAY_LEASE_TTL"] = "1m"
	_, err = Load(writeConfig(t, strings.NewReplacer("batch_size: 200", "batch_size: lots", "lease_ttl: 10s", "lease_ttl: soon").Replace(goodConfig)), func(k string) string { return env[k] }, fs)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{`relay.batch_size: not an integer: "lots" (line 9)`, `relay.lease_ttl: not a duration: "soon" (line 10)`},
		err.(*ConfigError).Problems)
}

// README's "Run the relay" table documents every configuration key: its first cells, with
// "`a.b.c`, `.d`" meaning a.b.c and a.b.d, name exactly the keys of Config.
func TestREADMEListsEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Run the relay\n")
	require.True(t, ok, "README has no Run the relay section")
	section, _, _ = strings.Cut(section, "\n#")
	documented := map[string]bool{}
	for l := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
		prev := ""
		for cell := range strings.SplitSeq(first, ", ") {
			key := strings.Trim(cell, "`")
			if strings.HasPrefix(key, ".") {
				key = prev[:strings.LastIndex(prev, ".")] + key
			}
			documented[key] = true
			prev = key
		}
	}
	want := map[string]bool{"routes.by_type": true, "routes.by_destination": true}
	for _, l := range leaves(reflect.TypeFor[Config](), "") {
		want[l.path] = true
	}
	for k := range want {
		require.True(t, documented[k], "README's relay configuration table does not document %s", k)
	}
	for k := range documented {
		require.True(t, want[k], "README documents %s, which is not a configuration key", k)
	}
}

// relay.in_flight reaches RelayOptions.InFlight's bounds: refused below 0 and above
// core.MaxInFlight, with its path.
func TestLoadInFlight(t *testing.T) {
	t.Parallel()
	base := "database: {driver: sqlite, dsn: /tmp/x.db}\nsink: sqs\nroutes: {default: https://x}\nrelay:\n  in_flight: "
	cfg, err := Load(writeConfig(t, base+"8\n"), noEnv, nil)
	require.NoError(t, err)
	require.Equal(t, 8, cfg.Relay.InFlight)
	for _, bad := range []string{"-1", "4097"} {
		_, err := Load(writeConfig(t, base+bad+"\n"), noEnv, nil)
		require.True(t, IsConfigError(err), "%s: %v", bad, err)
		require.Equal(t, []string{"relay.in_flight: must be between 0 (default) and 4096"}, err.(*ConfigError).Problems)
	}
}

// OpenCDCRelay (outboxkit backfill) refuses a polling configuration before it opens anything:
// the configuration's database does not exist.
func TestOpenCDCRelayRefusesPolling(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, goodConfig), noEnv, nil)
	require.NoError(t, err)
	r, err := OpenCDCRelay(t.Context(), cfg, NewLogger(cfg.Log, io.Discard))
	require.ErrorIs(t, err, ErrNotCDC)
	require.ErrorContains(t, err, "mode is polling")
	require.Nil(t, r)
}

func TestIdleConnsPerHostCoversEveryRequestInFlight(t *testing.T) {
	c := Defaults() // one relay, InFlight 4, the sinks' default concurrency 64
	require.Equal(t, 4*64, idleConnsPerHost(c))
	c.Relay.Workers, c.Relay.InFlight, c.Sinks.SQS.Concurrency = 2, 8, 10
	require.Equal(t, 2*8*10, idleConnsPerHost(c))
	c.Sink, c.Sinks.SNS.Concurrency = "sns", 3
	require.Equal(t, 2*8*3, idleConnsPerHost(c))
}

// http.listen is checked with the other keys, so a bad address exits 2 before anything starts
// (not at listen time, after the migration); a good one passes.
func TestLoadHTTPListen(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, goodConfig)
	for _, tc := range []struct{ addr, problem string }{
		{"127.0.0.1:9464", ""},
		{":0", ""},
		{"localhost:http", ""},
		{"[::1]:9464", ""},
		{"1", `http.listen: not a host:port address: "1"`},
		{"127.0.0.1", `http.listen: not a host:port address: "127.0.0.1"`},
		{"127.0.0.1:99999", `http.listen: bad port "99999" in "127.0.0.1:99999"`},
		{"127.0.0.1:-1", `http.listen: bad port "-1" in "127.0.0.1:-1"`},
		{"127.0.0.1:nosuchservice", `http.listen: bad port "nosuchservice" in "127.0.0.1:nosuchservice"`},
	} {
		env := func(k string) string {
			if k == "OUTBOXKIT_HTTP_LISTEN" {
				return tc.addr
			}
			return ""
		}
		cfg, err := Load(path, env, nil)
		if tc.problem == "" {
			require.NoError(t, err, tc.addr)
			require.Equal(t, tc.addr, cfg.HTTP.Listen)
			continue
		}
		require.True(t, IsConfigError(err), "%s: %v", tc.addr, err)
		require.Equal(t, []string{tc.problem}, err.(*ConfigError).Problems, tc.addr)
	}
}
