package testkit

// The addresses of the servers that scripts/test starts.

import (
	"os"
	"os/exec"
	"testing"
)

// The environment variables scripts/test exports, and how to start each server by hand.
const (
	PostgresDSN = "OUTBOXKIT_POSTGRES_DSN" // source scripts/lib/postgres.sh && pg_start
	MySQLDSN    = "OUTBOXKIT_MYSQL_DSN"    // source scripts/lib/mariadb.sh && mariadb_start
	AWSEndpoint = "OUTBOXKIT_AWS_ENDPOINT" // source scripts/lib/awsemu.sh && awsemu_start
	// KafkaBrokers is a comma-separated list of broker addresses.
	KafkaBrokers = "OUTBOXKIT_KAFKA_BROKERS" // source scripts/lib/kafka.sh && kafka_start
	Promtool     = "OUTBOXKIT_PROMTOOL"      // source scripts/lib/prometheus.sh && prometheus_start
	NATSURL      = "OUTBOXKIT_NATS_URL"      // source scripts/lib/nats.sh && nats_start
	RedisAddr    = "OUTBOXKIT_REDIS_ADDR"    // host:port; source scripts/lib/redis.sh && redis_start
	Chromium     = "OUTBOXKIT_CHROMIUM"      // the browser's path; source scripts/lib/chromium.sh && chromium_start
	// PrometheusURL and PrometheusDir address a running Prometheus (prometheus_start).
	PrometheusURL = "OUTBOXKIT_PROMETHEUS_URL"
	PrometheusDir = "OUTBOXKIT_PROMETHEUS_DIR"
	// RabbitMQURL addresses a node, RabbitMQCtl is a rabbitmqctl of it (rabbitmq_start).
	RabbitMQURL = "OUTBOXKIT_RABBITMQ_URL"
	RabbitMQCtl = "OUTBOXKIT_RABBITMQ_CTL"
	// PgBouncerTxDSN and PgBouncerSessionDSN go through PgBouncer (pool_mode transaction, session).
	PgBouncerTxDSN, PgBouncerSessionDSN = "OUTBOXKIT_PGBOUNCER_TX_DSN", "OUTBOXKIT_PGBOUNCER_SESSION_DSN" // pgbouncer_start
	// PostgresTLSCA and MySQLTLSCA are the CA files of the test servers' TLS certificates,
	// issued for "localhost" only (pg_start, mariadb_start).
	PostgresTLSCA = "OUTBOXKIT_PG_TLS_CA"
	MySQLTLSCA    = "OUTBOXKIT_MYSQL_TLS_CA"
)

var howTo = map[string]string{
	PostgresDSN:   "source scripts/lib/postgres.sh && pg_start",
	MySQLDSN:      "source scripts/lib/mariadb.sh && mariadb_start",
	AWSEndpoint:   "source scripts/lib/awsemu.sh && awsemu_start",
	KafkaBrokers:  "source scripts/lib/kafka.sh && kafka_start",
	Promtool:      "source scripts/lib/prometheus.sh && prometheus_start",
	NATSURL:       "source scripts/lib/nats.sh && nats_start",
	RedisAddr:     "source scripts/lib/redis.sh && redis_start",
	Chromium:      "source scripts/lib/chromium.sh && chromium_start",
	PrometheusURL: "source scripts/lib/prometheus.sh && prometheus_start",
	PrometheusDir: "source scripts/lib/prometheus.sh && prometheus_start",
	RabbitMQURL:   "source scripts/lib/rabbitmq.sh && rabbitmq_start",
	RabbitMQCtl:   "source scripts/lib/rabbitmq.sh && rabbitmq_start",

	PgBouncerTxDSN: "source scripts/lib/pgbouncer.sh && pgbouncer_start", PgBouncerSessionDSN: "source scripts/lib/pgbouncer.sh && pgbouncer_start",
	PostgresTLSCA: "source scripts/lib/postgres.sh && pg_start",
	MySQLTLSCA:    "source scripts/lib/mariadb.sh && mariadb_start",
}

// Need returns the value of the environment variable name, which addresses a test server.
// When it is unset the test is skipped, or fails when CI is set: CI must never silently skip a
// test whose server is missing.
func Need(tb testing.TB, name string) string {
	tb.Helper()
	v := os.Getenv(name)
	if v != "" {
		return v
	}
	how := howTo[name]
	if how == "" {
		how = "see scripts/test"
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s is not set: CI requires this server (scripts/test starts it; by hand: %s)", name, how)
	}
	tb.Skipf("%s is not set: start the server with `%s`, or run ./scripts/test", name, how)
	return ""
}

// NeedCommand returns the path of the program name, which a test runs as an independent
// client (installed by the scripts/lib script that starts its server: how). When it is
// missing the test is skipped, or fails when CI is set.
func NeedCommand(tb testing.TB, name, how string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv("CI") != "" {
		tb.Fatalf("%s is not installed: CI requires it (%s)", name, how)
	}
	tb.Skipf("%s is not installed: %s, or run ./scripts/test", name, how)
	return ""
}
