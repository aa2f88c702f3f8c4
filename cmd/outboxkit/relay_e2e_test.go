package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/deploy"
	"github.com/outboxkit/outbox/internal/testkit"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// daemonBinary builds ./cmd/outboxkit once per test binary, statically (CGO_ENABLED=0).
func daemonBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outboxkit-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "outboxkit")
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as deploy/Dockerfile builds it
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func randSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// e2eBackend is one database under the daemon.
type e2eBackend struct {
	driver, dsn, schema, mode string
	write                     func(ctx context.Context, key string) ([]string, error)
}

func postgresBackend(t *testing.T, mode string) e2eBackend {
	dsn := testkit.Need(t, testkit.PostgresDSN)
	ctx := t.Context()
	schema := "daemon_" + randSuffix()
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		bg := context.Background()
		_, _ = admin.Exec(bg, "DROP SCHEMA "+schema+" CASCADE")
		if mode == "cdc" {
			// The daemon's slot (cdc.slot's default): it would keep WAL. It turns inactive
			// shortly after the last daemon's connection closed.
			for range 50 {
				var left int
				if admin.QueryRow(bg, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, "outboxkit_"+schema+"_outbox").Scan(&left) != nil || left == 0 {
					break
				}
				_, _ = admin.Exec(bg, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, "outboxkit_"+schema+"_outbox")
				time.Sleep(100 * time.Millisecond)
			}
		}
		_ = admin.Close(bg)
	})
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := postgres.New(pool, &postgres.Options{Schema: schema, Lanes: 8})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	return e2eBackend{driver: "postgres", dsn: dsn, schema: schema, mode: mode, write: testkit.Writer(store, ob, 2, []byte(`{"n":1}`))}
}

func mysqlBackend(t *testing.T, mode string) e2eBackend {
	dsn := testkit.Need(t, testkit.MySQLDSN)
	ctx := t.Context()
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	admin, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	name := "daemon_" + randSuffix()
	_, err = admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		_ = admin.Close()
	})
	c := cfg.Clone()
	c.DBName, c.ParseTime, c.Loc = name, true, time.UTC
	db, err := sql.Open("mysql", c.FormatDSN())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := mysql.New(ctx, db, &mysql.Options{Lanes: 8})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	return e2eBackend{driver: "mysql", dsn: c.FormatDSN(), mode: mode, write: testkit.Writer(store, ob, 2, []byte(`{"n":1}`))}
}

func sqliteBackend(t *testing.T) e2eBackend {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlite.New(db, &sqlite.Options{Lanes: 8})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	return e2eBackend{driver: "sqlite", dsn: path, mode: "polling", write: testkit.Writer(store, ob, 2, []byte(`{"n":1}`))}
}

const (
	e2eRegion = "us-east-1"
	// The daemon's graceful stop must end well within this.
	e2eShutdownTimeout = 10 * time.Second
)

// daemonProc is one running `outboxkit relay`.
type daemonProc struct {
	cmd    *exec.Cmd
	addr   string
	stderr *lockedBuffer
	done   chan error    // receives Wait's result once
	exited chan struct{} // closed once the process ended (read it, not cmd.ProcessState, which Wait writes)
}

// running reports whether the daemon's process has not ended yet.
func (p *daemonProc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func startDaemon(t *testing.T, config, addr string, extra ...string) *daemonProc {
	t.Helper()
	args := append([]string{"relay", "--config", config, "--http-listen", addr}, extra...)
	cmd := exec.Command(daemonBinary(t), args...)
	cmd.Env = append(daemonEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_REGION="+e2eRegion,
		"AWS_EC2_METADATA_DISABLED=true")
	p := &daemonProc{cmd: cmd, addr: addr, stderr: &lockedBuffer{}, done: make(chan error, 1), exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	require.NoError(t, cmd.Start())
	go func() {
		err := cmd.Wait()
		close(p.exited)
		p.done <- err
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = cmd.Process.Kill()
		}
		<-p.exited
	})
	return p
}

// lockedBuffer is a daemon's stderr: written by its process, read by the test meanwhile.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// scrape returns the /metrics text, or "" while the daemon is not serving.
func (p *daemonProc) scrape() string {
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// metric sums the samples of name in a Prometheus text exposition; -1 when absent.
func metric(text, name string) float64 {
	total, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, name+"{") && !strings.HasPrefix(l, name+" ") {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
			found = true
		}
	}
	if !found {
		return -1
	}
	return total
}

// kill sends SIGKILL and waits for the process to end.
func (p *daemonProc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
}

// stop sends SIGTERM and returns how many events the daemon said it published; the daemon must
// exit 0 within the shutdown timeout.
func (p *daemonProc) stop(t *testing.T) int {
	t.Helper()
	began := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-p.done:
		require.NoError(t, err, "exit status after SIGTERM; stderr:\n%s", p.stderr)
	case <-time.After(e2eShutdownTimeout + 5*time.Second):
		t.Fatalf("no exit within %v of SIGTERM; stderr:\n%s", e2eShutdownTimeout+5*time.Second, p.stderr)
	}
	t.Logf("daemon stopped in %v", time.Since(began).Round(time.Millisecond))
	for l := range strings.SplitSeq(p.stderr.String(), "\n") {
		var rec struct {
			Msg       string `json:"msg"`
			Published int    `json:"published"`
			Graceful  bool   `json:"graceful"`
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Msg == "daemon_stopped" {
			require.True(t, rec.Graceful, "stderr:\n%s", p.stderr)
			return rec.Published
		}
	}
	t.Fatalf("no daemon_stopped log line; stderr:\n%s", p.stderr)
	return 0
}

func sqsClient(endpoint string) *awssqs.Client {
	return awssqs.NewFromConfig(aws.Config{
		Region: e2eRegion, Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// receiveAll drains the queue and returns how many times each event id arrived.
func receiveAll(t *testing.T, client *awssqs.Client, url string, want int) map[string]int {
	t.Helper()
	ctx := t.Context()
	got := map[string]int{}
	empty := 0
	deadline := time.Now().Add(60 * time.Second)
	for empty < 3 && time.Now().Before(deadline) {
		out, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 0,
		})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			if len(got) >= want {
				empty++
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		empty = 0
		var del []sqstypes.DeleteMessageBatchRequestEntry
		for i, m := range out.Messages {
			got[aws.ToString(m.MessageAttributes["outbox.id"].StringValue)]++
			del = append(del, sqstypes.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		_, err = client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del})
		require.NoError(t, err)
	}
	return got
}

// allowedLabels are the only metric attributes the daemon may export (bounded cardinality).
var allowedLabels = map[string]bool{
	"db_system_name": true, "db_collection_name": true, "outboxkit_mode": true,
	"outboxkit_relay_kind": true, "outboxkit_outcome": true, "error_type": true, "outboxkit_cause": true,
	"otel_scope_name": true, "otel_scope_version": true, "otel_scope_schema_url": true,
	"job": true, "instance": true, "le": true, "service_name": true, "telemetry_sdk_language": true,
	"telemetry_sdk_name": true, "telemetry_sdk_version": true,
}

var labelRE = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="([^"]*)"`)

// checkCardinality fails when a metric carries a label outside allowedLabels or an event id.
func checkCardinality(t *testing.T, text string, ids map[string]bool) {
	t.Helper()
	for _, m := range labelRE.FindAllStringSubmatch(text, -1) {
		require.True(t, allowedLabels[m[1]], "unexpected metric label %s=%q (unbounded attributes are not allowed)", m[1], m[2])
		require.False(t, ids[m[2]], "an event id is a metric label value: %s", m[0])
	}
}

// checkCatalog compares what p's /metrics serves with docs/metrics.md: every outboxkit_
// family is a row with its type and labels, and every row the daemon exports in b's driver and
// mode is served (waiting for the first cleanup to finish).
func checkCatalog(t *testing.T, p *daemonProc, b e2eBackend) {
	t.Helper()
	catalog, err := deploy.ReadMetrics("../../docs/metrics.md")
	require.NoError(t, err)
	var want []string
	for _, m := range catalog {
		switch {
		case m.Exported == "always", m.Exported == "cleanup.enabled",
			m.Exported == "mode cdc" && b.mode == "cdc",
			m.Exported == "mode polling" && b.mode == "polling",
			m.Exported == "mode cdc, mysql" && b.mode == "cdc" && b.driver == "mysql":
			want = append(want, m.Name)
		}
	}
	var fams map[string]*deploy.Family
	var missing []string
	require.Eventually(t, func() bool {
		fams = deploy.Families(p.scrape())
		missing = missing[:0]
		for _, n := range want {
			if fams[n] == nil {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0
	}, 15*time.Second, 100*time.Millisecond, "metrics docs/metrics.md lists for %s/%s are not served: %v", b.driver, b.mode, &missing)
	for name, f := range fams {
		if !strings.HasPrefix(name, "outboxkit_") {
			continue
		}
		i := slices.IndexFunc(catalog, func(m deploy.Metric) bool { return m.Name == name })
		require.GreaterOrEqual(t, i, 0, "%s is served but not in docs/metrics.md", name)
		require.Equal(t, catalog[i].Type, f.Type, "type of %s", name)
		require.Equal(t, catalog[i].Labels, f.Labels, "labels of %s", name)
	}
}

// e2eSink is where the daemon publishes: its configuration keys (sink, sinks, aws, routes) and
// how the test reads back what arrived (times each event id arrived).
type e2eSink struct {
	config  string
	receive func(t *testing.T, want int) map[string]int
}

// sqsE2ESink is a fresh queue of the SQS emulator.
func sqsE2ESink(t *testing.T) e2eSink {
	endpoint := testkit.Need(t, testkit.AWSEndpoint)
	client := sqsClient(endpoint)
	q, err := client.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String("daemon-" + randSuffix())})
	require.NoError(t, err)
	url := aws.ToString(q.QueueUrl)
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return e2eSink{
		config:  fmt.Sprintf("sink: sqs\naws:\n  endpoint: %s\nroutes:\n  default: %s\n", endpoint, url),
		receive: func(t *testing.T, want int) map[string]int { return receiveAll(t, client, url, want) },
	}
}

// runDaemonE2E runs `outboxkit relay` against b and sink s while a producer writes: restarts
// graceful stops SIGTERM the daemon mid-traffic (each must exit 0 within the timeout), then the
// last daemon drains; /metrics must reach backlog 0 and count every event, and the sink must
// hold every event exactly maxDups-or-fewer extra times.
func runDaemonE2E(t *testing.T, b e2eBackend, s e2eSink, restarts, maxDups int) {
	daemonE2E(t, b, s, restarts, maxDups, false)
}

// runDaemonKillE2E is runDaemonE2E with SIGKILL instead of SIGTERM: kills daemons die mid-traffic
// without a word, and the last one delivers every written event (at least once: a killed
// daemon's send in flight is sent again once its lease expires).
func runDaemonKillE2E(t *testing.T, b e2eBackend, s e2eSink, kills int) {
	daemonE2E(t, b, s, kills, -1, true)
}

func daemonE2E(t *testing.T, b e2eBackend, s e2eSink, restarts, maxDups int, kill bool) {
	ctx := t.Context()
	schema := ""
	if b.schema != "" {
		schema = "  schema: " + b.schema + "\n"
	}
	config := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`database:
  driver: %s
  dsn: %q
  lanes: 8
%smode: %s
relay:
  workers: %d
  batch_size: 50
  lease_ttl: 3s
  poll_interval: 20ms
%scleanup:
  enabled: true
  interval: 1s
  retention: 1h
metrics:
  stats_interval: 200ms
shutdown_timeout: %s
`, b.driver, b.dsn, schema, b.mode, map[bool]int{true: 1, false: 2}[b.mode == "cdc"], s.config, e2eShutdownTimeout)), 0o600))

	// A CDC relay's first start backfills: rows committed between the log head it opened and
	// its backfill scan may be sent twice (the documented start-up window, docs/cdc.md "Change data
	// capture"). Start the first CDC daemon before the producer and let it finish its backfill,
	// so that every duplicate counted below would come from a graceful restart.
	var first *daemonProc
	if b.mode == "cdc" {
		first = startDaemon(t, config, freePort(t), "--migrate")
		require.Eventually(t, func() bool { return strings.Contains(first.stderr.String(), `"cdc_relay_backfill_done"`) },
			30*time.Second, 20*time.Millisecond, "the first CDC daemon finishes its backfill; stderr:\n%s", first.stderr)
	}

	// The producer: transactions of 2 events over 20 keys, ~4 ms apart: at least 600, and on
	// until every restart is done, so that each SIGTERM lands mid-traffic.
	var mu sync.Mutex
	ids := map[string]bool{}
	produced := make(chan struct{})
	restarted := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; ; i++ {
			if i >= 600 {
				select {
				case <-restarted:
					return
				default:
				}
			}
			got, err := b.write(ctx, fmt.Sprintf("k%d", i%20))
			if err != nil {
				t.Errorf("producer: %v", err)
				return
			}
			mu.Lock()
			for _, id := range got {
				ids[id] = true
			}
			mu.Unlock()
			time.Sleep(4 * time.Millisecond)
		}
	}()

	published := 0
	for range restarts {
		p := first
		if p == nil {
			p = startDaemon(t, config, freePort(t), "--migrate")
		}
		first = nil
		require.Eventually(t, func() bool { return metric(p.scrape(), "outboxkit_relay_published_total") > 0 },
			30*time.Second, 20*time.Millisecond, "the daemon publishes; stderr:\n%s", p.stderr)
		if kill {
			p.kill(t)
			continue
		}
		published += p.stop(t)
	}
	close(restarted)
	p := startDaemon(t, config, freePort(t))
	<-produced
	require.False(t, t.Failed())
	mu.Lock()
	written := len(ids)
	mu.Unlock()
	var text string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		text = p.scrape()
		if metric(text, "outboxkit_outbox_pending") == 0 && (kill || published+int(metric(text, "outboxkit_relay_published_total")) == written) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog 0 and every event counted (written %d, earlier daemons %d); last scrape:\n%s\nstderr:\n%s",
				written, published, text, p.stderr)
		}
	}
	require.Zero(t, metric(text, "outboxkit_outbox_oldest_pending_age_seconds"))
	require.Equal(t, 1.0, metric(text, "outboxkit_relay_ready"))
	checkCardinality(t, text, ids)
	require.Contains(t, text, `target_info{service_name="outboxkit-relay",`, "the resource names the service")
	checkCatalog(t, p, b)
	require.Positive(t, metric(text, "outboxkit_relay_publish_latency_seconds_count"), "commit-to-publish latency histogram")
	if b.mode == "cdc" {
		require.Positive(t, metric(text, "outboxkit_cdc_lag_seconds"))
		require.GreaterOrEqual(t, metric(text, "outboxkit_cdc_checkpoint_age_seconds"), 0.0)
	}

	resp, err := http.Get("http://" + p.addr + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, err = http.Get("http://" + p.addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	published += p.stop(t)

	got := s.receive(t, written)
	dups := 0
	for id, n := range got {
		require.True(t, ids[id], "delivered but never written: %q", id)
		dups += n - 1
	}
	require.Len(t, got, written, "every written event delivered")
	if kill {
		t.Logf("%s/%s: %d events, %d daemons killed, %d duplicates", b.driver, b.mode, written, restarts, dups)
		return
	}
	t.Logf("%s/%s: %d events, %d graceful restarts, %d duplicates, %d published by the daemons", b.driver, b.mode, written, restarts, dups, published)
	// First whether a relay sent an event twice (its published counts add up to more than was
	// written), then whether the broker holds duplicates anyway (a client's retry below the sink).
	if maxDups == 0 {
		require.Equal(t, written, published, "the daemons' published counts add up to the events written")
	}
	require.LessOrEqual(t, dups, maxDups, "duplicates after graceful restarts")
}

// 20 graceful restarts under steady traffic resend nothing.
func TestDaemonPostgres(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, postgresBackend(t, "polling"), sqsE2ESink(t), 20, 0)
}

// The PostgreSQL CDC relay (logical replication): CDCRelay.Shutdown marks and checkpoints its
// send in flight, so graceful restarts under traffic resend nothing.
func TestDaemonPostgresCDC(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, postgresBackend(t, "cdc"), sqsE2ESink(t), 3, 0)
}

func TestDaemonMariaDBPolling(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, mysqlBackend(t, "polling"), sqsE2ESink(t), 3, 0)
}

// A CDC relay's graceful stop (CDCRelay.Shutdown) marks and checkpoints its send in flight:
// its restarts resend nothing either.
func TestDaemonMariaDBCDC(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, mysqlBackend(t, "cdc"), sqsE2ESink(t), 3, 0)
}

func TestDaemonSQLite(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), sqsE2ESink(t), 3, 0)
}

// The daemon with sink kafka (franz-go, zstd) against the Kafka-protocol test cluster: graceful
// restarts resend nothing either.
func TestDaemonKafka(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), kafkaE2ESink(t), 3, 0)
}

// kafkaE2ESink is a fresh topic of the test cluster.
func kafkaE2ESink(t *testing.T) e2eSink {
	brokers := strings.Split(testkit.Need(t, testkit.KafkaBrokers), ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	require.NoError(t, err)
	defer admin.Close()
	topic := "daemon-" + randSuffix()
	res, err := kadm.NewClient(admin).CreateTopic(t.Context(), 4, 1, nil, topic)
	require.NoError(t, err)
	require.NoError(t, res.Err)
	return e2eSink{
		config: fmt.Sprintf("sink: kafka\nsinks:\n  kafka:\n    brokers: [%s]\n    client_id: daemon-e2e\n    compression: zstd\nroutes:\n  default: %s\n",
			strings.Join(brokers, ", "), topic),
		receive: func(t *testing.T, want int) map[string]int {
			cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			require.NoError(t, err)
			defer cl.Close()
			got := map[string]int{}
			n := 0
			// The topic's records, each counted once: a reader that is handed the same offset
			// again has not found a duplicate in the topic.
			type at struct {
				partition int32
				offset    int64
			}
			seen := map[at]bool{}
			deadline := time.Now().Add(60 * time.Second)
			for time.Now().Before(deadline) {
				// Once every event arrived, a quiet second shows there is no late duplicate.
				wait := 5 * time.Second
				if len(got) >= want {
					wait = time.Second
				}
				ctx, cancel := context.WithTimeout(t.Context(), wait)
				fs := cl.PollFetches(ctx)
				cancel()
				recs := fs.Records()
				if len(recs) == 0 && len(got) >= want {
					break
				}
				for _, r := range recs {
					if seen[at{r.Partition, r.Offset}] {
						t.Logf("offset %d of partition %d read again", r.Offset, r.Partition)
						continue
					}
					seen[at{r.Partition, r.Offset}] = true
					for _, h := range r.Headers {
						if h.Key == "ce_id" {
							got[string(h.Value)]++
							n++
						}
					}
				}
			}
			t.Logf("kafka: %d records, %d event ids", n, len(got))
			return got
		},
	}
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
