package nats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// ownServer is a nats-server of this test alone (JetStream, file store under dir), which the
// test can stop and start again on the same port.
type ownServer struct {
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

func startOwnServer(t *testing.T) *ownServer {
	t.Helper()
	testkit.Need(t, testkit.NATSURL) // the test server's script installs nats-server
	bin := testkit.NeedCommand(t, "nats-server", "source scripts/lib/nats.sh && nats_start installs it")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s := &ownServer{bin: bin, dir: t.TempDir(), port: port}
	s.start(t)
	t.Cleanup(func() { s.stop(t) })
	return s
}

func (s *ownServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

func (s *ownServer) start(t *testing.T) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	defer log.Close()
	s.cmd = exec.Command(s.bin, "-a", "127.0.0.1", "-p", fmt.Sprint(s.port), "-js", "-sd", filepath.Join(s.dir, "js"))
	s.cmd.Stdout, s.cmd.Stderr = log, log
	require.NoError(t, s.cmd.Start())
}

func (s *ownServer) stop(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// TestServerRestart: while the server is down, Send fails retryably (never ErrNoStream: the
// relay must not park events for an outage); as soon as the restarted server answers, with
// its stream recovered from disk, Send succeeds, and every event is stored once.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	srv := startOwnServer(t)
	var nc *nats.Conn
	require.Eventually(t, func() bool {
		var err error
		nc, err = nats.Connect(srv.url(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	t.Cleanup(nc.Close)
	js := newJS(t, nc)
	subject := "restart.events"
	stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, Storage: jetstream.FileStorage})
	sink, err := natssink.New(nc, &natssink.Options{AckTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	var sent []core.Message
	send := func(i int) []error {
		m := message(subject, "a", i)
		sent = append(sent, m)
		return sink.Send(ctx, []core.Message{m})
	}
	require.NoError(t, send(0)[0])

	srv.stop(t)
	for i := 1; i <= 3; i++ {
		err := send(i)[0]
		require.Error(t, err)
		require.False(t, core.IsPermanent(err), "down: %v", err)
	}
	srv.start(t)
	// Send as fast as possible while the server starts and recovers its stream: every outcome
	// is retryable until one is acknowledged.
	deadline := time.Now().Add(30 * time.Second)
	seen := map[string]int{}
	for i := 4; ; i++ {
		require.True(t, time.Now().Before(deadline), "no acknowledgement within 30s of the restart")
		err := send(i)[0]
		if err == nil {
			break
		}
		require.False(t, core.IsPermanent(err), "restarting: %v", err)
		seen[errors.Unwrap(err).Error()]++
	}
	t.Logf("retryable outcomes while restarting: %v", seen)
	// The relay resends what was not acknowledged: each stored once.
	for _, err := range sink.Send(ctx, sent) {
		require.NoError(t, err)
	}
	n, err := streamMsgs(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, len(sent), n)
}
