package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// privatePooler is a PgBouncer of the test's own in transaction mode in front of the test
// server (the shared ones of scripts/lib/pgbouncer.sh serve the other tests, which a restart
// would disturb). It runs as the postgres OS user when the test runs as root: PgBouncer refuses
// to run as root.
type privatePooler struct {
	dir, ini, dsn string
	start         func() // starts it (again) on its port
}

func startPrivatePooler(t *testing.T) *privatePooler {
	t.Helper()
	u, err := url.Parse(testkit.Need(t, testkit.PostgresDSN))
	require.NoError(t, err)
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer" // Debian's; scripts/test installs it
	}
	dir, err := os.MkdirTemp("", "outboxkit-pgbouncer-restart-")
	require.NoError(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	p := &privatePooler{dir: dir, ini: filepath.Join(dir, "pgbouncer.ini"),
		dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(p.ini, fmt.Appendf(nil, `[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
max_client_conn = 100
default_pool_size = 10
ignore_startup_parameters = extra_float_digits
pidfile = %s/pgbouncer.pid
logfile = %s/pgbouncer.log
`, u.Hostname(), u.Port(), port, dir, dir, dir), 0o644))
	if os.Geteuid() == 0 {
		require.NoError(t, exec.Command("chown", "-R", "postgres:", dir).Run())
		require.NoError(t, os.Chmod(dir, 0o755))
	}
	start := func() {
		var cmd *exec.Cmd
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", "-u", "postgres", "--", bin, "-d", p.ini)
		} else {
			cmd = exec.Command(bin, "-d", p.ini)
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "pgbouncer: %s", out)
		require.Eventually(t, func() bool {
			c, err := pgx.Connect(context.Background(), p.dsn)
			if err != nil {
				return false
			}
			_ = c.Close(context.Background())
			return true
		}, 10*time.Second, 50*time.Millisecond, "pgbouncer answers on %s", p.dsn)
	}
	p.start = start
	start()
	t.Cleanup(func() {
		p.kill(t)
		_ = os.RemoveAll(dir)
	})
	return p
}

// kill ends the pooler with SIGKILL (every client connection breaks at once) and waits until it
// is gone.
func (p *privatePooler) kill(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "pgbouncer.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	proc, err := os.FindProcess(pid)
	require.NoError(t, err)
	_ = proc.Kill()
	require.Eventually(t, func() bool { return proc.Signal(syscall.Signal(0)) != nil }, 10*time.Second, 20*time.Millisecond, "pgbouncer %d exits", pid)
	_ = os.Remove(filepath.Join(p.dir, "pgbouncer.pid"))
}

// TestPoolerRestartDuringDrain: two polling relays drain a backlog through PgBouncer in
// transaction mode; halfway the pooler is killed (every connection breaks), stays down for a
// moment (a query through it fails) and is started again on the same port. The relays resume
// by themselves (neither Run returns), every event is delivered, per key in write order, and
// every event is settled.
func TestPoolerRestartDuringDrain(t *testing.T) {
	t.Parallel()
	testDSN(t)
	ctx := t.Context()
	pb := startPrivatePooler(t)
	schema := pooledSchema(t)
	cfg, err := pgxpool.ParseConfig(pb.dsn)
	require.NoError(t, err)
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s, err := New(pool, &Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))

	// The backlog, written before the relays start.
	const keys, perKey = 8, 250
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	want := map[string][]string{}
	var all []string
	for i := range perKey {
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for k := range keys {
				evs, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: fmt.Sprint("agg-", k),
					AggregateVersion: int64(i + 1), Type: "order.changed", Payload: []byte(`{}`)})
				if err != nil {
					return err
				}
				want[evs[0].PartitionKey] = append(want[evs[0].PartitionKey], evs[0].ID)
				all = append(all, evs[0].ID)
			}
			return nil
		}))
	}

	rec := conformance.NewSink()
	sink := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		time.Sleep(20 * time.Millisecond) // a broker's round trip: the drain lasts long enough to be cut
		return rec.Send(ctx, msgs)
	})
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	rctx, stop := context.WithCancel(ctx)
	var relays sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		r, err := core.NewRelay(s, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{
			Owner: fmt.Sprintf("relay-%d", i), BatchSize: 50, PollInterval: 20 * time.Millisecond, LeaseTTL: 5 * time.Second, Logger: logger})
		require.NoError(t, err)
		relays.Go(func() { errs <- r.Run(rctx) })
	}
	defer func() {
		stop()
		relays.Wait()
	}()

	require.Eventually(t, func() bool { return rec.Seen() >= len(all)/4 }, 60*time.Second, 5*time.Millisecond, "a quarter sent")
	pb.kill(t)
	cut := rec.Seen()
	_, err = pool.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the pooler is down")
	time.Sleep(500 * time.Millisecond)
	pb.start()
	require.Less(t, cut, len(all), "the pooler went down during the drain")

	requireDeliveredSettled(t, s, rec, all, want)
	select {
	case err := <-errs:
		t.Fatalf("a relay stopped on the pooler's restart: %v\n%s", err, logs.String())
	default:
	}
	stop()
	relays.Wait()
	for range 2 {
		require.NoError(t, <-errs, "relay Run")
	}
	t.Logf("cut after %d of %d sends; %d messages sent for %d events; %d relay_cycle_failed",
		cut, len(all), rec.Seen(), len(all), strings.Count(logs.String(), "relay_cycle_failed"))
}
