package deploy

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"gopkg.in/yaml.v3"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

func TestAlertRules(t *testing.T) {
	t.Parallel()
	promtool := testkit.Need(t, testkit.Promtool)
	for _, args := range [][]string{{"check", "rules", "prometheus/alerts.yml"}, {"test", "rules", "prometheus/alerts_test.yml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

func TestDashboardIsValidJSON(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("grafana/outboxkit.json")
	require.NoError(t, err)
	var d struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	require.NotEmpty(t, d.Panels)
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.Contains(t, tg.Expr, "outboxkit", p.Title)
		}
	}
}

// proxy forwards TCP to target; while down it refuses (closes) every connection.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { _ = ln.Close(); p.setDown(true) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) serve(c net.Conn) {
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = c.Close()
		return
	}
	p.conns[c] = true
	p.mu.Unlock()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[u] = true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); _ = u.Close() }()
	_, _ = io.Copy(c, u)
	_ = c.Close()
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			_ = c.Close()
		}
		clear(p.conns)
	}
}

func randID() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// testRule returns the OutboxOldestEventAge rule of alerts.yml with its threshold and duration
// scaled down (300 s → 3 s, for 5m → 2s) so that a test can see it fire; expression and labels
// are the file's.
func testRule(t *testing.T, group string) []byte {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Rules []map[string]any `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if r["alert"] != "OutboxOldestEventAge" {
				continue
			}
			expr := r["expr"].(string)
			require.Contains(t, expr, "> 300")
			r["expr"] = strings.Replace(expr, "> 300", "> 3", 1)
			r["for"] = "2s"
			out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": group, "rules": []any{r}}}})
			require.NoError(t, err)
			return out
		}
	}
	t.Fatal("alerts.yml has no OutboxOldestEventAge rule")
	return nil
}

func reload(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url+"/-/reload", "", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// alertState returns the state of alertname in Prometheus ("" when not pending or firing).
func alertState(url, alertname string) string {
	resp, err := http.Get(url + "/api/v1/alerts")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var out struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if json.NewDecoder(resp.Body).Decode(&out) != nil {
		return ""
	}
	for _, a := range out.Data.Alerts {
		if a.Labels["alertname"] == alertname && a.Labels["db_system_name"] == "sqlite" {
			return a.State
		}
	}
	return ""
}

func buildDaemon(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxkit")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/outboxkit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// Prometheus scrapes a running daemon; the oldest-age alert fires while the sink is down and
// clears once it recovers and the backlog is published.
func TestOldestAgeAlertFiresWhileSinkDown(t *testing.T) {
	t.Parallel()
	promURL := testkit.Need(t, testkit.PrometheusURL)
	promDir := testkit.Need(t, testkit.PrometheusDir)
	endpoint := testkit.Need(t, testkit.AWSEndpoint)
	ctx := t.Context()

	client := awssqs.NewFromConfig(aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")},
		func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
	q, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("alert-" + randID())})
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)

	px := startProxy(t, strings.TrimPrefix(endpoint, "http://"))
	px.setDown(true)
	listen := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		return ln.Addr().String()
	}()
	config := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(config, fmt.Appendf(nil, `database: {driver: sqlite, dsn: %q}
relay: {poll_interval: 50ms, retry: {initial: 200ms, max: 1s}}
aws: {endpoint: "http://%s", region: us-east-1}
routes: {default: %q}
http: {listen: %q}
shutdown_timeout: 10s
`, path, px.ln.Addr(), aws.ToString(q.QueueUrl), listen), 0o600))
	cmd := exec.Command(buildDaemon(t), "relay", "--config", config)
	cmd.Env = append(daemonEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_EC2_METADATA_DISABLED=true")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()

	id := randID()
	targets := filepath.Join(promDir, "targets", id+".json")
	rules := filepath.Join(promDir, "rules", id+".yml")
	require.NoError(t, os.WriteFile(targets, fmt.Appendf(nil, `[{"targets":[%q],"labels":{"test":%q}}]`, listen, id), 0o644))
	require.NoError(t, os.WriteFile(rules, testRule(t, "test-"+id), 0o644))
	defer func() {
		_ = os.Remove(targets)
		_ = os.Remove(rules)
		reload(t, promURL)
	}()
	reload(t, promURL)

	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "1", Type: "order.created"})
		return err
	}))
	require.Eventually(t, func() bool { return alertState(promURL, "OutboxOldestEventAge") == "firing" },
		90*time.Second, 200*time.Millisecond, "the alert fires while the sink is down; daemon stderr:\n%s", &stderr)

	px.setDown(false)
	require.Eventually(t, func() bool {
		st, err := store.Stats(ctx)
		return err == nil && st.Pending == 0 && alertState(promURL, "OutboxOldestEventAge") == ""
	}, 90*time.Second, 200*time.Millisecond, "the alert clears once the sink recovered")
}

// daemonEnv is the test's environment without OUTBOXKIT_ variables: the test servers' addresses
// (OUTBOXKIT_AWS_ENDPOINT, ...) would override the daemon's configuration.
func daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOXKIT_") {
			env = append(env, kv)
		}
	}
	return env
}

// ruleExprs returns the expressions of alerts.yml (alerts and recording rules) and the names of
// its recording rules.
func ruleExprs(t *testing.T) (exprs map[string]string, recorded map[string]bool) {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var doc struct {
		Groups []struct {
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	exprs, recorded = map[string]string{}, map[string]bool{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			exprs["alerts.yml "+r.Alert+r.Record] = r.Expr
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	return exprs, recorded
}

var recordedRE = regexp.MustCompile(`outboxkit:[a-zA-Z0-9_:]+`)

// Every metric and label the alert rules and the dashboard use is one docs/metrics.md
// lists, which the daemon's end-to-end tests compare with what /metrics serves: a renamed
// metric breaks this test rather than an alert in production.
func TestDeployUsesExportedMetrics(t *testing.T) {
	t.Parallel()
	catalog, err := ReadMetrics("../docs/metrics.md")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, m := range catalog {
		known[m.Name] = true
		if m.Type == "histogram" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				known[m.Name+s] = true
			}
		}
		for _, l := range m.Labels {
			known[l] = true
		}
	}
	exprs, recorded := ruleExprs(t)
	b, err := os.ReadFile("grafana/outboxkit.json")
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			exprs[fmt.Sprintf("dashboard %q target %d", p.Title, i)] = tg.Expr
		}
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, n := range Names(expr) {
			require.True(t, known[n], "%s uses %s, which docs/metrics.md does not list (expr %q)", where, n, expr)
			used[n] = true
		}
		for _, n := range recordedRE.FindAllString(expr, -1) {
			require.True(t, recorded[n], "%s uses %s, which no recording rule of alerts.yml defines", where, n)
		}
	}
	// The dashboard shows every metric the daemon exports.
	for _, m := range catalog {
		if m.Exported == "inbox" || m.Exported == "sqs consumer" {
			continue
		}
		shown := used[m.Name] || used[m.Name+"_bucket"] || used[m.Name+"_count"] || used[m.Name+"_sum"]
		require.True(t, shown, "no rule or dashboard panel shows %s", m.Name)
	}
}

// The inbox's instruments appear in Prometheus exactly as docs/metrics.md lists them
// (the daemon's end-to-end tests check the daemon's rows the same way).
func TestInboxMetricsAsDocumented(t *testing.T) {
	t.Parallel()
	catalog, err := ReadMetrics("../docs/metrics.md")
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	require.NoError(t, err)
	store, err := memory.New(nil)
	require.NoError(t, err)
	in, err := core.NewInbox[*memory.Tx](t.Context(), store, &core.InboxOptions{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))})
	require.NoError(t, err)
	ctx := t.Context()
	apply := func(ctx context.Context, tx *memory.Tx, _ core.InboxMessage) error { return tx.Incr("n") }
	_, err = in.Process(ctx, "billing", core.InboxMessage{EventID: "ev-1", Payload: []byte("a"), OccurredAt: time.Now().Add(-2 * time.Hour)}, apply)
	require.NoError(t, err)
	_, err = in.Prune(ctx, "billing", time.Now().Add(-time.Hour), 0)
	require.NoError(t, err)

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	fams := Families(rec.Body.String())
	n := 0
	for _, m := range catalog {
		if m.Exported != "inbox" {
			continue
		}
		n++
		f := fams[m.Name]
		require.NotNil(t, f, "%s is not exported; got %v", m.Name, slices.Collect(maps.Keys(fams)))
		require.Equal(t, m.Type, f.Type, m.Name)
		require.Equal(t, m.Labels, f.Labels, m.Name)
	}
	require.Equal(t, 4, n)
	for name := range fams {
		if strings.HasPrefix(name, "outboxkit_") {
			require.True(t, slices.ContainsFunc(catalog, func(m Metric) bool { return m.Name == name }), "%s is not in docs/metrics.md", name)
		}
	}
}
