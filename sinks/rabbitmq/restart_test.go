package rabbitmq_test

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

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// ownNode is a RabbitMQ node of this test alone, started as scripts/lib/rabbitmq.sh starts the
// shared one (its own epmd, its mnesia directory under dir), which the test stops and starts
// again on the same ports and directory.
type ownNode struct {
	dir              string
	port, dist, epmd int
	epmdCmd, cmd     *exec.Cmd
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startOwnNode(t *testing.T) *ownNode {
	t.Helper()
	testkit.Need(t, testkit.RabbitMQURL) // the test server's script installs rabbitmq-server
	testkit.NeedCommand(t, "epmd", "source scripts/lib/rabbitmq.sh && rabbitmq_start installs it")
	if _, err := os.Stat("/usr/lib/rabbitmq/bin/rabbitmq-server"); err != nil {
		t.Fatalf("no /usr/lib/rabbitmq/bin/rabbitmq-server: source scripts/lib/rabbitmq.sh && rabbitmq_start installs it")
	}
	dir, err := os.MkdirTemp("", "outboxkit-rabbit-restart-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	for _, d := range []string{"home", "mnesia", "log"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), nil, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plugins"), []byte("[].\n"), 0o644))
	n := &ownNode{dir: dir, port: freePort(t), dist: freePort(t), epmd: freePort(t)}
	n.epmdCmd = exec.Command("epmd", "-port", fmt.Sprint(n.epmd), "-address", "127.0.0.1")
	require.NoError(t, n.epmdCmd.Start())
	t.Cleanup(func() {
		n.stop(t, syscall.SIGTERM) // the node before its epmd (else it starts an epmd -daemon)
		_ = n.epmdCmd.Process.Kill()
		_ = n.epmdCmd.Wait()
	})
	n.start(t)
	return n
}

func (n *ownNode) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port) }

// start starts the node and waits for its AMQP port.
func (n *ownNode) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(n.dir, "stdout"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer log.Close()
	n.cmd = exec.Command("/usr/lib/rabbitmq/bin/rabbitmq-server")
	n.cmd.Env = append(os.Environ(), "HOME="+filepath.Join(n.dir, "home"), fmt.Sprintf("RABBITMQ_NODENAME=rabbit%d@localhost", n.port),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1", fmt.Sprintf("RABBITMQ_NODE_PORT=%d", n.port), fmt.Sprintf("RABBITMQ_DIST_PORT=%d", n.dist),
		fmt.Sprintf("ERL_EPMD_PORT=%d", n.epmd), "RABBITMQ_MNESIA_BASE="+filepath.Join(n.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(n.dir, "log"), "RABBITMQ_PID_FILE="+filepath.Join(n.dir, "node.pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(n.dir, "plugins"), "RABBITMQ_CONFIG_FILE="+filepath.Join(n.dir, "rabbitmq"))
	n.cmd.Stdout, n.cmd.Stderr = log, log
	// Its own process group: the script runs the Erlang VM as a child, which a signal to the
	// script alone would leave running.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, n.cmd.Start())
	require.Eventually(t, func() bool {
		c, err := amqp.Dial(n.url())
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 60*time.Second, 250*time.Millisecond, "the node did not answer within 60 s")
}

// stop signals the node's process group and waits for the node to end; after 30 s it kills
// the group.
func (n *ownNode) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if n.cmd == nil {
		return
	}
	pgid := n.cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	// The VM may outlive the script by a moment: wait until the group is empty.
	for i := 0; i < 100 && syscall.Kill(-pgid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	n.cmd = nil
}

// TestBrokerRestartDuringDrain: a relay drains an outbox through the sink into a durable
// queue while the node is stopped (SIGTERM) and started again on the same ports and data
// directory. The same sink and relay, never restarted, resume by themselves (the sink redials
// after its backoff); every committed event is in the queue (the persistent messages the
// broker confirmed survived the restart), and per key the first messages are in version
// order.
func TestBrokerRestartDuringDrain(t *testing.T) {
	t.Parallel()
	node := startOwnNode(t)
	ctx := t.Context()
	conn, err := amqp.Dial(node.url())
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := queueName(t)
	_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	_ = conn.Close()
	quiet := slog.New(slog.DiscardHandler)
	sink, err := rabbitmq.New(node.url(), &rabbitmq.Options{ConfirmTimeout: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, store, nil)
	require.NoError(t, err)
	var sent sync.Map
	var sentN int64
	var sentMu sync.Mutex
	counting := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		out := sink.Send(ctx, msgs)
		sentMu.Lock()
		defer sentMu.Unlock()
		for i, m := range msgs {
			if out[i] == nil {
				if _, dup := sent.LoadOrStore(m.ID, true); !dup {
					sentN++
				}
			}
		}
		return out
	})
	relay, err := core.NewRelay(store, counting, core.StaticRouter{Default: queue}, &core.RelayOptions{
		PollInterval: 20 * time.Millisecond, BatchSize: 20, Logger: quiet,
		Retry:           core.RetryPolicy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		BreakerMaxDelay: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	rctx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()

	// A producer commits one event of one of 4 keys every 2 ms.
	const keys, total = 4, 1500
	var mu sync.Mutex
	var ids []string
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
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
		prodDone <- nil
	}()

	// Mid-drain: once some messages are confirmed, stop the node, start it again.
	require.Eventually(t, func() bool { sentMu.Lock(); defer sentMu.Unlock(); return sentN >= 100 }, 20*time.Second, 5*time.Millisecond)
	sentMu.Lock()
	before := sentN
	sentMu.Unlock()
	node.stop(t, syscall.SIGTERM)
	node.start(t)
	require.NoError(t, <-prodDone)
	mu.Lock()
	want := append([]string(nil), ids...)
	mu.Unlock()

	// The relay resumes by itself: every event confirmed, then read back from the queue.
	require.Eventually(t, func() bool {
		sentMu.Lock()
		defer sentMu.Unlock()
		return sentN == int64(len(want))
	}, 60*time.Second, 100*time.Millisecond, "not every event confirmed within 60 s of the restart")
	select {
	case err := <-relayDone:
		t.Fatalf("the relay ended: %v", err)
	default:
	}
	stopRelay()
	require.NoError(t, <-relayDone)

	conn, err = amqp.Dial(node.url())
	require.NoError(t, err)
	defer conn.Close()
	ch, err = conn.Channel()
	require.NoError(t, err)
	next := map[string]int64{}
	seen := map[string]bool{}
	got := 0
	for len(seen) < len(want) {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			break
		}
		got++
		ev, _, err := rabbitmq.DecodeDelivery(&d)
		require.NoError(t, err)
		if seen[ev.ID] {
			continue // a resend of a publish whose confirm the stop cut off
		}
		seen[ev.ID] = true
		require.Equal(t, next[ev.AggregateID]+1, ev.AggregateVersion, "first messages of %s in version order", ev.AggregateID)
		next[ev.AggregateID] = ev.AggregateVersion
	}
	for _, id := range want {
		require.True(t, seen[id], "event %s confirmed but not in the queue after the restart", id)
	}
	t.Logf("%d events, %d messages read (%d confirmed before the stop)", total, got, before)
}
