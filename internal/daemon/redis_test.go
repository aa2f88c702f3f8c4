package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// sink: redis takes the go-redis client's settings from sinks.redis; the password comes from
// the environment, and the options are built with them.
func TestLoadRedis(t *testing.T) {
	t.Parallel()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, selfSignedPEM(t), 0o600))
	env := map[string]string{"OUTBOXKIT_SINKS_REDIS_PASSWORD": "s3cret"}
	cfg, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: redis
sinks:
  redis:
    addr: redis.internal:6380
    username: relay
    db: 2
    max_len: 100000
    tls: {enabled: true, ca_file: `+ca+`}
routes: {default: events}
`), func(k string) string { return env[k] }, nil)
	require.NoError(t, err)
	r := cfg.Sinks.Redis
	require.Equal(t, "s3cret", r.Password)
	o, err := r.clientOptions()
	require.NoError(t, err)
	require.Equal(t, "redis.internal:6380", o.Addr)
	require.Equal(t, "relay", o.Username)
	require.Equal(t, "s3cret", o.Password)
	require.Equal(t, 2, o.DB)
	require.NotNil(t, o.TLSConfig)
	require.NotNil(t, o.TLSConfig.RootCAs)
	sink, closeSink, err := newRedisSink(r, nil)
	require.NoError(t, err)
	require.NotNil(t, sink)
	closeSink()
}

func TestLoadRedisReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	for text, want := range map[string][]string{
		`{username: relay, db: -1, max_len: -5, concurrency: -1, tls: {ca_file: /nonexistent/ca.pem}}`: {
			`sinks.redis.addr: required with sink redis`,
			`sinks.redis.concurrency: must not be negative`,
			`sinks.redis.db: must not be negative`,
			`sinks.redis.max_len: must not be negative (0: no trimming)`,
			`sinks.redis.password: required with sinks.redis.username (set $OUTBOXKIT_SINKS_REDIS_PASSWORD)`,
			`sinks.redis.tls.ca_file: needs sinks.redis.tls.enabled`,
		},
		`{addr: "redis:0", tls: {enabled: true, ca_file: /nonexistent/ca.pem}}`: {
			`sinks.redis.addr: want host:port with a port from 1 to 65535, got "redis:0"`,
			`sinks.redis.tls.ca_file: open /nonexistent/ca.pem: no such file or directory`,
		},
		`{addr: localhost}`: {`sinks.redis.addr: want host:port with a port from 1 to 65535, got "localhost"`},
	} {
		_, err := Load(writeConfig(t, `
database: {driver: sqlite, dsn: /tmp/x.db}
sink: redis
sinks:
  redis: `+text+`
routes: {default: events}
`), noEnv, nil)
		require.Error(t, err, text)
		require.Equal(t, want, err.(*ConfigError).Problems, text)
	}
}
