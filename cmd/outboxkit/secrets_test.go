package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// TestSecretsNeverShown plants a secret in every place the configuration can hold one (the
// database password, the webhook signing secret, the Redis, NATS, Kafka SASL and RabbitMQ
// credentials), runs the daemon through failing and working sends, reads /metrics, /healthz
// and /readyz, runs the operator commands with the same --db and with bad addresses, and finds
// none of the secrets in anything written.
func TestSecretsNeverShown(t *testing.T) {
	redisAddr := testkit.Need(t, testkit.RedisAddr)
	b := postgresBackend(t, "polling")
	plant := func(what string) string { return "PLANTED-" + what + "-" + randSuffix() }
	pgPass, whKey := plant("pg"), plant("webhook-key")
	redisPass, natsTok, kafkaPass, amqpPass := plant("redis"), plant("nats"), plant("kafka"), plant("amqp")
	whSecret := "whsec_" + base64.StdEncoding.EncodeToString([]byte(whKey))
	secrets := []string{pgPass, whKey, whSecret, whSecret[len("whsec_"):], redisPass, natsTok, kafkaPass, amqpPass}

	u, err := url.Parse(b.dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), pgPass) // the test cluster trusts loopback
	dsn := u.String()
	for range 20 {
		_, err := b.write(t.Context(), fmt.Sprintf("k%d", time.Now().UnixNano()%7))
		require.NoError(t, err)
	}

	var shown strings.Builder // everything the daemon and the commands wrote
	closed := "127.0.0.1:" + strings.Split(freePort(t), ":")[1]
	config := func(sink string) string {
		path := filepath.Join(t.TempDir(), "relay.yaml")
		require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, `database:
  dsn: %q
  schema: %s
relay:
  poll_interval: 20ms
  lease_ttl: 3s
metrics:
  stats_interval: 100ms
shutdown_timeout: 5s
%s`, dsn, b.schema, sink), 0o644)) // readable by others: the daemon warns
		return path
	}
	run := func(name, sink string, until func(p *daemonProc) bool) string {
		p := startDaemon(t, config(sink), freePort(t))
		require.Eventually(t, func() bool {
			select {
			case <-p.done:
				return true // it ended by itself (a refused start)
			default:
			}
			return until(p)
		}, 20*time.Second, 20*time.Millisecond, "%s; stderr:\n%s", name, p.stderr)
		for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
			if resp, err := http.Get("http://" + p.addr + path); err == nil {
				body := new(strings.Builder)
				_, _ = fmt.Fprintf(body, "%s %d %v\n", path, resp.StatusCode, resp.Header)
				buf := make([]byte, 1<<20)
				n, _ := resp.Body.Read(buf)
				body.Write(buf[:n])
				_ = resp.Body.Close()
				shown.WriteString(body.String())
			}
		}
		if p.running() {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		<-p.exited
		shown.WriteString(p.stderr.String())
		return p.stderr.String()
	}

	// Sends that fail: the webhook endpoint answers 500 five times, the brokers refuse the
	// credentials or cannot be reached. Each daemon runs until it logged a failed send.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 5 {
			http.Error(w, "try later", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	logged := func(msg string) func(p *daemonProc) bool {
		return func(p *daemonProc) bool { return strings.Contains(p.stderr.String(), msg) }
	}
	// A broker that cannot be reached: the client retries within Send, so the daemon runs a
	// while (its logs and metrics are what is checked).
	running := func(d time.Duration) func(p *daemonProc) bool {
		var began time.Time
		return func(*daemonProc) bool {
			if began.IsZero() {
				began = time.Now()
			}
			return time.Since(began) > d
		}
	}
	out := run("webhook", fmt.Sprintf("sink: webhook\nsinks:\n  webhook:\n    secrets: [%q]\nroutes:\n  default: %s/hook\n", whSecret, srv.URL),
		func(p *daemonProc) bool { return metric(p.scrape(), "outboxkit_outbox_pending") == 0 })
	require.Contains(t, out, `"config_file_exposed"`)
	require.Contains(t, out, `"webhook_post_refused"`)
	require.Greater(t, calls.Load(), int64(5))
	for range 5 { // pending again for the failing sinks below
		_, err := b.write(t.Context(), "k-failing")
		require.NoError(t, err)
	}
	// The test server has no password: it accepts the client's AUTH, and the events go out.
	run("redis", fmt.Sprintf("sink: redis\nsinks:\n  redis:\n    addr: %s\n    password: %q\nroutes:\n  default: s\n", redisAddr, redisPass),
		func(p *daemonProc) bool { return metric(p.scrape(), "outboxkit_relay_published_total") > 0 })
	for range 5 {
		_, err := b.write(t.Context(), "k-failing")
		require.NoError(t, err)
	}
	run("kafka", fmt.Sprintf("sink: kafka\nsinks:\n  kafka:\n    brokers: [%q]\n    sasl: {mechanism: plain, username: u, password: %q}\nroutes:\n  default: t\n", closed, kafkaPass),
		running(3*time.Second))
	run("rabbitmq", fmt.Sprintf("sink: rabbitmq\nsinks:\n  rabbitmq:\n    url: \"amqp://u:%s@%s/\"\nroutes:\n  default: q\n", amqpPass, closed),
		running(3*time.Second))
	run("nats", fmt.Sprintf("sink: nats\nsinks:\n  nats:\n    url: nats://%s\n    token: %q\nroutes:\n  default: s\n", closed, natsTok),
		logged(`"daemon_start_failed"`))
	run("nats url", fmt.Sprintf("sink: nats\nsinks:\n  nats:\n    url: \"nats://u:%s@%s\"\nroutes:\n  default: s\n", natsTok, closed),
		logged(`"daemon_start_failed"`))

	// The operator commands, with the same --db and with addresses they refuse or cannot reach.
	for _, args := range [][]string{
		{"status", "--db", dsn, "--schema", b.schema},
		{"status", "--db", dsn, "--schema", b.schema, "--output", "json", "--lanes"},
		{"parked", "--db", dsn, "--schema", b.schema},
		{"audit", "--db", dsn, "--schema", b.schema},
		{"status", "--db", "host=127.0.0.1 password=" + pgPass},
		{"status", "--db", "postgres://u:" + pgPass + "@" + closed + "/db"},
		{"status", "--db", "postgres://u:" + pgPass + "@127.0.0.1:99999/db"},
		{"status", "--db", "u:" + pgPass + "@host/db"},
		{"status", "--db", "mysql://u:" + pgPass + "@" + closed + "/db%zz"},
		{"status", "--db", "mysql://u:" + pgPass + "@" + closed + "/db"},
		{"status", "--driver", "postgres", "--db", "host=127.0.0.1 port=99999 password=" + pgPass},
		{"status", "--driver", "mysql", "--db", "u:" + pgPass + "@tcp(" + closed + ")/db?bad=%zz"},
	} {
		_, stdout, stderr := cli(t, args...)
		shown.WriteString(stdout + stderr)
	}

	text := shown.String()
	for _, s := range secrets {
		if i := strings.Index(text, s); i >= 0 {
			t.Errorf("the planted secret %q was shown: ...%s...", s, text[max(0, i-300):min(len(text), i+len(s)+100)])
		}
	}
}
