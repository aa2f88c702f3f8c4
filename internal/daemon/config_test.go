package daemon

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/awssink"
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

// Every bad key is reported on its own line with its path, unknown keys included, and a key
// of an earlier version with what to do instead.
func TestLoadReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	_, err := Load(writeConfig(t, `
database:
  driver: oracle
  dns: typo
relay:
  batch_size: lots
  lease_ttl: 5 minutes
  adaptive_rate: true
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
		`relay.adaptive_rate: removed (line 8): the adaptive drain is now the default; delete the key (relay.fixed_rate: true turns it off)`,
		`relay.batch_size: not an integer: "lots" (line 6)`,
		`relay.lease_ttl: not a duration: "5 minutes" (line 7)`,
		`sinks.sqs.queue: unknown key (line 11)`,
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
    brokers: [localhost, "h:0", "h:99999", "h:kafka", ":9092", "bad host:9092", "999.1.1.1:9092", good:9092, "[::1]:9092"]
    compression: xz
    concurrency: -1
    tls: {ca_file: /nonexistent/ca.pem}
    sasl: {username: relay}
routes: {default: events}
`), noEnv, nil)
	require.Error(t, err)
	require.Equal(t, []string{
		`sinks.kafka.brokers: want host:port with a port from 1 to 65535, got "localhost", "h:0", "h:99999", "h:kafka", ":9092", "bad host:9092", "999.1.1.1:9092"`,
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
	// win (docs/daemon.md: "wherever they come from").
	delete(env, "OUTBOXKIT_RELAY_WORKERS")
	env["OUTBOXKIT_RELAY_LEASE_TTL"] = "1m"
	_, err = Load(writeConfig(t, strings.NewReplacer("batch_size: 200", "batch_size: lots", "lease_ttl: 10s", "lease_ttl: soon").Replace(goodConfig)), func(k string) string { return env[k] }, fs)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{`relay.batch_size: not an integer: "lots" (line 9)`, `relay.lease_ttl: not a duration: "soon" (line 10)`},
		err.(*ConfigError).Problems)
}

// docs/daemon.md's reference table documents every configuration key, one row each, with its
// type and, for a key whose default --help prints (the library's constants, Defaults), that
// default; and it documents no key that does not exist.
func TestDaemonDocsListEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/daemon.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n## Reference\n")
	require.True(t, ok, "docs/daemon.md has no Reference section")
	section, _, _ = strings.Cut(section, "\n#")
	type row struct{ typ, def string }
	documented := map[string]row{}
	for l := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(l, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		require.Len(t, cells, 4, "a row is key | type | default | meaning: %s", l)
		key := strings.Trim(cells[0], "`")
		_, dup := documented[key]
		require.False(t, dup, "%s documented twice", key)
		documented[key] = row{typ: cells[1], def: strings.Trim(cells[2], "`")}
	}
	typeName := func(t reflect.Type) string {
		switch {
		case t == durationType:
			return "duration"
		case t.Kind() == reflect.Slice:
			return "list of strings"
		case t.Kind() == reflect.Map:
			return "map of strings"
		case t.Kind() == reflect.Bool:
			return "boolean"
		case t.Kind() == reflect.Float64:
			return "number"
		case t.Kind() == reflect.String:
			return "string"
		}
		return "integer"
	}
	want := map[string]string{"routes.by_type": "map of strings", "routes.by_destination": "map of strings"}
	for _, l := range leaves(reflect.TypeFor[Config](), "") {
		want[l.path] = typeName(l.typ)
	}
	for k, typ := range want {
		r, ok := documented[k]
		require.True(t, ok, "docs/daemon.md does not document %s", k)
		require.Equal(t, typ, r.typ, "type of %s", k)
		def := defaultText(k)
		if def == "" {
			continue
		}
		if typ == "duration" {
			d, err := time.ParseDuration(r.def)
			require.NoError(t, err, "default of %s: %q", k, r.def)
			require.Equal(t, def, d.String(), "default of %s", k)
			continue
		}
		require.Equal(t, def, r.def, "default of %s", k)
	}
	for k := range documented {
		_, ok := want[k]
		require.True(t, ok, "docs/daemon.md documents %s, which is not a configuration key", k)
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

// relay.max_rate reaches RelayOptions.MaxRate (what the daemon's relays get), and a negative
// rate is refused with its path, from the file and from the environment.
func TestLoadMaxRate(t *testing.T) {
	t.Parallel()
	base := "database: {driver: sqlite, dsn: /tmp/x.db}\nsink: sqs\nroutes: {default: https://x}\nrelay:\n  max_rate: "
	cfg, err := Load(writeConfig(t, base+"6500\n"), noEnv, nil)
	require.NoError(t, err)
	require.Equal(t, 6500, relayOptions(cfg, nil, nil).MaxRate)
	_, err = Load(writeConfig(t, base+"-1\n"), noEnv, nil)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{"relay.max_rate: must not be negative (0: no limit)"}, err.(*ConfigError).Problems)
	env := func(k string) string {
		if k == "OUTBOXKIT_RELAY_MAX_RATE" {
			return "-5"
		}
		return ""
	}
	_, err = Load(writeConfig(t, "database: {driver: sqlite, dsn: /tmp/x.db}\nsink: sqs\nroutes: {default: https://x}\n"), env, nil)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{"relay.max_rate: must not be negative (0: no limit)"}, err.(*ConfigError).Problems)
}

// OpenCDCRelay (outboxkit backfill) refuses a polling configuration before it opens anything:
// the configuration's database does not exist.
func TestOpenCDCRelayRefusesPolling(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, goodConfig), noEnv, nil)
	require.NoError(t, err)
	r, err := OpenCDCRelay(t.Context(), cfg, NewLogger(cfg.Log, io.Discard), io.Discard)
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

// base is a valid configuration that starts nothing: the tests below add one key at a time.
const base = "sink: sqs\nroutes: {default: https://x}\n"

// baseDB is the database of base, unless the text of a test sets one.
const baseDB = "database: {driver: sqlite, dsn: /nonexistent/x.db}\n"

// loadProblems loads base plus text, with env as the environment and args as flags, and
// returns the problems (nil when it loads).
func loadProblems(t *testing.T, text string, env map[string]string, args ...string) []string {
	t.Helper()
	fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	Flags(fs)
	require.NoError(t, fs.Parse(args))
	if !strings.Contains(text, "database:") {
		text = baseDB + text
	}
	_, err := Load(writeConfig(t, base+text), func(k string) string { return env[k] }, fs)
	if err == nil {
		return nil
	}
	require.True(t, IsConfigError(err), "%v", err)
	return err.(*ConfigError).Problems
}

// Values that core's relay constructors or the adapters refuse at start are refused by Load,
// with their key, before the database is opened: each rule asked where it lives.
func TestLoadRefusesWhatStartRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ text, problem string }{
		{"relay: {batch_size: 100001}", "relay.batch_size: must be between 0 (default) and 100000"},
		{"relay: {batch_size: -3}", "relay.batch_size: must be between 0 (default) and 100000"},
		{"relay: {lease_ttl: 1ns}", "relay.lease_ttl: too short: the relay renews its leases every lease_ttl/3, and RenewInterval must be positive and shorter than LeaseTTL"},
		{"relay: {lease_ttl: -1s}", "relay.lease_ttl: must be positive"},
		{"relay: {poll_interval: -1s}", "relay.poll_interval: must be positive"},
		{"cdc: {max_retained_bytes: -1}", "cdc.max_retained_bytes: must not be negative"},
		{"database: {driver: sqlite, dsn: /nonexistent/x.db, lanes: 4097}", "database.lanes: must be between 1 and 4096"},
		{"database: {driver: sqlite, dsn: /nonexistent/x.db, lanes: -1}", "database.lanes: must be between 1 and 4096"},
		{"database: {driver: sqlite, dsn: /nonexistent/x.db, table: bad-name}", `database.table: identifier "bad-name" must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$`},
		{"database: {driver: postgres, dsn: postgres://h/db, schema: a-b}", "database.schema: must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$"},
		{"database: {driver: postgres, dsn: 'postgres://u:p@127.0.0.1:notaport/db'}", "database.dsn: cannot parse `postgres://u:xxxxx@127.0.0.1:notaport/db`: invalid port"},
		{"database: {driver: postgres, dsn: 'host=127.0.0.1 port=x'}", "database.dsn: cannot parse `host=127.0.0.1 port=x`: invalid port"},
		{"database: {driver: mysql, dsn: 'garbage@@'}", "database.dsn: invalid DSN: missing the slash separating the database name"},
		{"database: {driver: mysql, dsn: 'u@tcp(127.0.0.1:3306)/app'}", "database.dsn: the mysql adapter needs parseTime=true and loc=UTC (the default)"},
	} {
		require.Equal(t, []string{c.problem}, loadProblems(t, c.text, nil), c.text)
	}
	// Two bad keys of core's options: both named.
	require.Equal(t, []string{"relay.batch_size: must be between 0 (default) and 100000", "relay.in_flight: must be between 0 (default) and 4096"},
		loadProblems(t, "relay: {batch_size: 100001, in_flight: 5000}", nil))
	require.Nil(t, loadProblems(t, "relay: {batch_size: 100000, lease_ttl: 3ns}\ndatabase: {driver: postgres, dsn: 'host=h port=5432', schema: app, table: events, lanes: 4096}", nil))
}

// The help states the library's defaults from its constants, so that it cannot drift from them.
func TestHelpPrintsLibraryDefaults(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	Flags(fs)
	for flag, want := range map[string]string{
		"relay-lease-ttl":        core.DefaultLeaseTTL.String(),
		"relay-batch-size":       strconv.Itoa(core.DefaultBatchSize),
		"relay-retry-multiplier": "2",
		"relay-retry-max":        core.DefaultRetryMax.String(),
		"sinks-sqs-concurrency":  strconv.Itoa(awssink.DefaultConcurrency),
		"cleanup-retention":      core.DefaultCleanupRetention.String(),
		"relay-workers":          "1",
	} {
		require.Contains(t, fs.Lookup(flag).Usage, "(default "+want+")", flag)
	}
	require.NotContains(t, fs.Lookup("relay-max-rate").Usage, "(default 0)")
}

// relay.retry: what core.RetryPolicy would adjust without a word is refused; its documented
// meanings (0: the default; a negative jitter: none) are kept.
func TestLoadRetry(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		text    string
		env     map[string]string
		problem string
	}{
		{"relay: {retry: {jitter: 1.5}}", nil, "relay.retry.jitter: must be at most 1 (0: the default 0.2; negative: none), got 1.5"},
		{"relay: {retry: {jitter: .nan}}", nil, "relay.retry.jitter: must be a number, got NaN"},
		{"", map[string]string{"OUTBOXKIT_RELAY_RETRY_JITTER": "NaN"}, "relay.retry.jitter: must be a number, got NaN"},
		{"relay: {retry: {multiplier: 0.5}}", nil, "relay.retry.multiplier: must be at least 1 (0: the default 2), got 0.5"},
		{"relay: {retry: {multiplier: -2}}", nil, "relay.retry.multiplier: must be at least 1 (0: the default 2), got -2"},
		{"relay: {retry: {multiplier: .inf}}", nil, "relay.retry.multiplier: must be a number, got +Inf"},
		{"", map[string]string{"OUTBOXKIT_RELAY_RETRY_MULTIPLIER": "NaN"}, "relay.retry.multiplier: must be a number, got NaN"},
		{"relay: {retry: {initial: 10s, max: 5s}}", nil, "relay.retry.initial: must not exceed relay.retry.max (5s), got 10s"},
		{"relay: {retry: {initial: -1s}}", nil, "relay.retry.initial: must not be negative (0: the default 1s), got -1s"},
		{"relay: {retry: {deadline: -1h}}", nil, "relay.retry.deadline: must not be negative (0: the default 24h0m0s), got -1h0m0s"},
	} {
		require.Equal(t, []string{c.problem}, loadProblems(t, c.text, c.env), c.text)
	}
	for _, good := range []string{"relay: {retry: {jitter: 0, multiplier: 0}}", "relay: {retry: {jitter: 1, multiplier: 1}}",
		"relay: {retry: {jitter: -1}}", "relay: {retry: {initial: 5s, max: 5s}}", "relay: {retry: {initial: 10m}}"} {
		require.Nil(t, loadProblems(t, good, nil), good)
	}
}

// http.listen's host is an IP address or a DNS name; an empty value from any source keeps the
// default, as its help says.
func TestLoadHTTPListenHost(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"999.999.999.999:9464", "0x7f.0.0.1:9464", "my host:9464", "-bad:9464", "a..b:9464", "[::g]:9464", "127.0.0.1 :9464"} {
		p := loadProblems(t, "", map[string]string{"OUTBOXKIT_HTTP_LISTEN": addr})
		require.Len(t, p, 1, addr)
		require.True(t, strings.HasPrefix(p[0], "http.listen: bad host "), "%s: %s", addr, p[0])
		require.Contains(t, p[0], "not an IP address or a DNS name", addr)
	}
	for _, addr := range []string{"localhost:9464", "relay-1.internal.:9464", "[fe80::1%eth0]:9464", "0.0.0.0:9464", ":9464"} {
		require.Nil(t, loadProblems(t, "", map[string]string{"OUTBOXKIT_HTTP_LISTEN": addr}), addr)
	}

	for _, c := range []struct {
		text string
		args []string
		want string
	}{
		{"", []string{"--http-listen", ""}, "127.0.0.1:9464"},
		{"http: {listen: ''}\n", nil, "127.0.0.1:9464"},
		{"http: {listen: ''}\n", []string{"--http-listen="}, "127.0.0.1:9464"},
		{"http: {listen: '0.0.0.0:1'}\n", []string{"--http-listen", ""}, "0.0.0.0:1"}, // as an empty env value: not set
	} {
		fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
		Flags(fs)
		require.NoError(t, fs.Parse(c.args))
		cfg, err := Load(writeConfig(t, base+baseDB+c.text), noEnv, fs)
		require.NoError(t, err, "%q %q", c.text, c.args)
		require.Equal(t, c.want, cfg.HTTP.Listen, "%q %q", c.text, c.args)
	}
}

// aws.endpoint and otlp.endpoint are absolute http(s) URLs with a host and a port, if any, from 1
// to 65535.
func TestLoadEndpoints(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"aws.endpoint", "otlp.endpoint"} {
		for _, bad := range []string{"localhost:4566", "ftp://h", "http://", "http:///path", "/v1/metrics", "http://:4318", "http://h:0",
			"http://h:65536", "http://h:99999/v1", "http://999.1.1.1:4566", "mailto:x@y"} {
			p := loadProblems(t, "", map[string]string{EnvName(key): bad})
			require.Len(t, p, 1, "%s=%s", key, bad)
			require.True(t, strings.HasPrefix(p[0], key+": "), "%s=%s: %s", key, bad, p[0])
		}
		for _, good := range []string{"http://localhost:4566", "https://sqs.eu-west-1.amazonaws.com", "http://[::1]:4318/v1/metrics", "http://h:65535"} {
			require.Nil(t, loadProblems(t, "", map[string]string{EnvName(key): good}), "%s=%s", key, good)
		}
	}
}

// A repeated --sinks-kafka-brokers adds to the list; the environment's is comma-separated.
func TestLoadKafkaBrokersFlagRepeated(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("relay", pflag.ContinueOnError)
	Flags(fs)
	require.NoError(t, fs.Parse([]string{"--sink", "kafka", "--sinks-kafka-brokers", "a:9092", "--sinks-kafka-brokers", "b:9092,c:9092"}))
	cfg, err := Load(writeConfig(t, base+baseDB), noEnv, fs)
	require.NoError(t, err)
	require.Equal(t, []string{"a:9092", "b:9092", "c:9092"}, cfg.Sinks.Kafka.Brokers)
	require.Contains(t, fs.Lookup("sinks-kafka-brokers").Usage, "repeat the flag")
}

// A YAML null (~, null, nothing) leaves a key unset, scalar or mapping: the default stays.
func TestLoadNullIsUnset(t *testing.T) {
	t.Parallel()
	cfg, err := Load(writeConfig(t, base+baseDB+`
relay: {batch_size: ~, lease_ttl: null, retry: {jitter: }}
log: {level: ~, format: null}
http: {listen: ~}
cleanup: ~
migrate: null
`), noEnv, nil)
	require.NoError(t, err)
	d := Defaults()
	require.Equal(t, d.Log, cfg.Log)
	require.Equal(t, d.HTTP, cfg.HTTP)
	require.Equal(t, d.Cleanup, cfg.Cleanup)
	require.Equal(t, d.Relay.Retry, cfg.Relay.Retry)
	require.Zero(t, cfg.Relay.BatchSize)

	cfg, err = Load(writeConfig(t, "database: {driver: sqlite, dsn: /nonexistent/x.db, table: null}\nsink: sqs\nroutes: {default: https://x}\n"), noEnv, nil)
	require.NoError(t, err)
	require.Empty(t, cfg.Database.Table, "not a table named null")
	cfg, err = Load(writeConfig(t, "database: {driver: sqlite, dsn: /nonexistent/x.db, table: 'null'}\nsink: sqs\nroutes: {default: https://x}\n"), noEnv, nil)
	require.NoError(t, err)
	require.Equal(t, "null", cfg.Database.Table, "a quoted null is the string")
}

// A key bad in the file, the environment and a flag at once is one line; a file whose root is not
// a mapping is named config.
func TestLoadOneLinePerKey(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{`relay.batch_size: not an integer: "a" (line 4); not an integer: "b" (from $OUTBOXKIT_RELAY_BATCH_SIZE); not an integer: "c" (from --relay-batch-size)`},
		loadProblems(t, "relay: {batch_size: a}\n", map[string]string{"OUTBOXKIT_RELAY_BATCH_SIZE": "b"}, "--relay-batch-size", "c"))

	for _, text := range []string{"- a\n- b\n", "just text\n"} {
		_, err := Load(writeConfig(t, text), noEnv, nil)
		require.True(t, IsConfigError(err), "%v", err)
		require.Contains(t, err.(*ConfigError).Problems, "config: must be a mapping (line 1)", text)
	}
}

// A key given twice in the file, at any depth, and a second YAML document are errors, not
// silently last-wins or ignored.
func TestLoadDuplicateKeysAndDocuments(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"relay.batch_size: duplicate key (line 6; first at line 5)"},
		loadProblems(t, "relay:\n  batch_size: 10\n  batch_size: 20\n", nil))
	require.Equal(t, []string{"sink: duplicate key (line 4; first at line 1)"}, loadProblems(t, "sink: sns\n", nil))
	_, err := Load(writeConfig(t, baseDB+"routes:\n  default: q\n  by_type:\n    a: q1\n    a: q2\n"), noEnv, nil)
	require.True(t, IsConfigError(err), "%v", err)
	require.Equal(t, []string{"routes.by_type.a: duplicate key (line 6; first at line 5)"}, err.(*ConfigError).Problems)
	require.Equal(t, []string{"config: a second YAML document (line 6): the file holds one configuration"},
		loadProblems(t, "relay: {batch_size: 10}\n---\nrelay: {batch_size: 20}\n", nil))
	_, err = Load(writeConfig(t, "---\n"+base+baseDB+"...\n"), noEnv, nil)
	require.NoError(t, err, "one document, with its markers")
}

// database.dsn goes through opendb.ParseDSN, the operator commands' parser: a URL names its
// driver (database.driver may be left out), a driver's own DSN needs database.driver, and a
// bare word, host:port/db or a URL of another driver than the one named is refused at load.
func TestLoadDatabaseAddress(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{
		"database: {dsn: 'postgres://h/db', schema: app}",
		"database: {dsn: 'mysql://u:p@h:3306/app'}",
		"database: {dsn: 'sqlite:/nonexistent/x.db'}",
		"database: {driver: sqlite, dsn: /nonexistent/x.db}",
		"database: {driver: postgres, dsn: 'host=h dbname=d'}",
	} {
		require.Nil(t, loadProblems(t, ok, nil), ok)
	}
	for _, c := range []struct{ text, prefix string }{
		{"database: {dsn: app}", `database.dsn: "app" names no driver (want a URL: postgres://`},
		{"database: {dsn: '127.0.0.1:5432/app'}", `database.dsn: "127.0.0.1:5432/app" names no driver`},
		{"database: {dsn: 'host=h dbname=d'}", `database.dsn: "host=h dbname=d" names no driver`},
		{"database: {driver: postgres, dsn: '127.0.0.1:5432/app'}", `database.dsn: "127.0.0.1:5432/app" is not a postgres keyword/value DSN`},
		{"database: {driver: mysql, dsn: 'postgres://h/db'}", `database.dsn: the URL is a postgres address but the driver named is mysql`},
		{"database: {dsn: 'sqlite:x.db', schema: app}", `database.schema: only for driver postgres`},
		{"database: {dsn: 'sqlite:x.db'}\nmode: cdc", `mode: cdc needs driver postgres or mysql`},
	} {
		p := loadProblems(t, c.text, nil)
		require.Len(t, p, 1, c.text)
		require.True(t, strings.HasPrefix(p[0], c.prefix), "%s: %s", c.text, p[0])
	}
	cfg := Database{DSN: "mysql://u@h/app"}
	require.Equal(t, "mysql", cfg.DriverName())
}
