package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// ownRedis is a redis-server of this test alone (append-only file under dir, as
// scripts/lib/redis.sh starts the shared one), which the test stops and starts again on the
// same port and directory.
type ownRedis struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	testkit.Need(t, testkit.RedisAddr) // the test server's script installs redis-server
	bin := testkit.NeedCommand(t, "redis-server", "source scripts/lib/redis.sh && redis_start installs it")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &ownRedis{bin: bin, dir: t.TempDir(), port: port}
	s.start(t)
	t.Cleanup(func() { s.stop(t, syscall.SIGKILL) })
	return s
}

func (s *ownRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *ownRedis) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer log.Close()
	s.cmd = exec.Command(s.bin, "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--appendonly", "yes", "--save", "", "--daemonize", "no")
	s.cmd.Stdout, s.cmd.Stderr = log, log
	require.NoError(t, s.cmd.Start())
}

// stop signals the server and waits for it to end.
func (s *ownRedis) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(sig)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// TestBrokerRestartDuringDrain: a relay drains an outbox through the sink into a stream while
// the server is stopped (SIGTERM: it writes its append-only file and exits) and started again
// on the same port and directory. The same relay, never restarted, resumes by itself once the
// server answers; every committed event is in the stream (nothing an XADD acknowledged was
// lost with the restart), and per key the first entries are in version order.
func TestBrokerRestartDuringDrain(t *testing.T) {
	t.Parallel()
	srv := startOwnRedis(t)
	ctx := t.Context()
	cl := goredis.NewClient(&goredis.Options{Addr: srv.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = cl.Close() })
	require.Eventually(t, func() bool { return cl.Ping(ctx).Err() == nil }, 20*time.Second, 50*time.Millisecond)
	stream := newStream(t)
	quiet := slog.New(slog.DiscardHandler)
	sink, err := redissink.New(cl, &redissink.Options{Logger: quiet})
	require.NoError(t, err)
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, store, nil)
	require.NoError(t, err)
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: stream}, &core.RelayOptions{
		PollInterval: 20 * time.Millisecond, BatchSize: 20, Logger: quiet,
		Retry:           core.RetryPolicy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		BreakerMaxDelay: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()

	// A producer commits one event of one of 4 keys every 2 ms.
	const keys, total = 4, 1200
	var mu sync.Mutex
	var ids []string
	versions := map[string]int64{}
	prodDone := make(chan error, 1)
	go func() {
		for i := range total {
			k := fmt.Sprintf("k%d", i%keys)
			var out []core.Event
			err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
				var err error
				out, err = ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: k, AggregateVersion: int64(i/keys + 1),
					Type: "order.changed", PartitionKey: k, Payload: []byte(`{}`)})
				return err
			})
			if err != nil {
				prodDone <- err
				return
			}
			mu.Lock()
			ids = append(ids, out[0].ID)
			versions[out[0].ID] = out[0].AggregateVersion
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
		prodDone <- nil
	}()

	// Mid-drain: once some entries are in, stop the server, keep it down a moment, start it
	// again.
	require.Eventually(t, func() bool { n, err := cl.XLen(ctx, stream).Result(); return err == nil && n >= 100 }, 20*time.Second, 5*time.Millisecond)
	before, err := cl.XLen(ctx, stream).Result()
	require.NoError(t, err)
	srv.stop(t, syscall.SIGTERM)
	time.Sleep(time.Second)
	srv.start(t)
	require.NoError(t, <-prodDone)
	mu.Lock()
	want := append([]string(nil), ids...)
	mu.Unlock()

	// The relay resumes by itself: every event reaches the stream.
	var evs []core.Event
	require.Eventually(t, func() bool {
		if cl.Ping(ctx).Err() != nil {
			return false
		}
		_, evs = readStream(t, cl, stream)
		seen := map[string]bool{}
		for _, ev := range evs {
			seen[ev.ID] = true
		}
		for _, id := range want {
			if !seen[id] {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "not every event in the stream within 60 s of the restart")
	select {
	case err := <-relayDone:
		t.Fatalf("the relay ended: %v", err)
	default:
	}
	stopRelay()
	require.NoError(t, <-relayDone)

	// Nothing lost across the restart: the entries written before the stop are all there,
	// and first entries per key are in version order.
	require.GreaterOrEqual(t, int64(len(evs)), before)
	next := map[string]int64{}
	seen := map[string]bool{}
	dups := 0
	for _, ev := range evs {
		if seen[ev.ID] {
			dups++ // a resend of an XADD whose reply the stop cut off
			continue
		}
		seen[ev.ID] = true
		require.Equal(t, next[ev.AggregateID]+1, ev.AggregateVersion, "first entries of %s in version order", ev.AggregateID)
		next[ev.AggregateID] = ev.AggregateVersion
	}
	require.Len(t, seen, total)
	t.Logf("%d events, %d entries (%d before the stop, %d resends)", total, len(evs), before, dups)
}
