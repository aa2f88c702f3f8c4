package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// The daemon with sink nats against the test server's JetStream: graceful restarts under
// traffic resend nothing, every event is stored once.
func TestDaemonNATS(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), natsE2ESink(t), 3, 0)
}

// Daemons killed with SIGKILL mid-traffic lose nothing: the last one delivers every event (the
// test stream's 100 ms duplicate window lets the resends through, so they are counted).
func TestDaemonNATSKill(t *testing.T) {
	t.Parallel()
	runDaemonKillE2E(t, sqliteBackend(t), natsE2ESink(t), 2)
}

// natsE2ESink is a fresh stream of the test server covering one subject, the daemon's route.
// Its duplicate window is 100ms, so that a resend by the relay (after more than that) is
// stored again and counted, not hidden by the stream's deduplication.
func natsE2ESink(t *testing.T) e2eSink {
	url := testkit.Need(t, testkit.NATSURL)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	suffix := randSuffix()
	subject, name := "daemon"+suffix+".events", "DAEMON"+suffix
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Duplicates: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return e2eSink{
		config: fmt.Sprintf("sink: nats\nsinks:\n  nats:\n    url: %s\n    ack_timeout: 5s\nroutes:\n  default: %s\n", url, subject),
		receive: func(t *testing.T, want int) map[string]int {
			got := map[string]int{}
			next := uint64(1)
			deadline := time.Now().Add(60 * time.Second)
			quiet := time.Time{}
			for time.Now().Before(deadline) {
				info, err := stream.Info(t.Context())
				require.NoError(t, err)
				for ; next <= info.State.LastSeq; next++ {
					m, err := stream.GetMsg(t.Context(), next)
					require.NoError(t, err)
					require.Equal(t, m.Header.Get("ce-id"), m.Header.Get("Nats-Msg-Id"))
					got[m.Header.Get("ce-id")]++
					quiet = time.Time{}
				}
				// Once every event arrived, a quiet second shows there is no late duplicate.
				if len(got) >= want {
					if quiet.IsZero() {
						quiet = time.Now()
					} else if time.Since(quiet) > time.Second {
						break
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("nats: %d messages, %d event ids", next-1, len(got))
			return got
		},
	}
}
