package nats_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// The atomic-batch tests run against a nats-server of this module's version (atomic batches
// need 2.12 or later; the Debian server of scripts/lib/nats.sh is 2.9), in the test binary,
// started at the first test that needs it and shut down by TestMain.
var embedded struct {
	once sync.Once
	srv  *server.Server
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if embedded.srv != nil {
		embedded.srv.Shutdown()
		embedded.srv.WaitForShutdown()
		_ = os.RemoveAll(embedded.dir)
	}
	os.Exit(code)
}

// atomicURL starts the in-binary server once and returns its client URL.
func atomicURL(t testing.TB) string {
	t.Helper()
	embedded.once.Do(func() {
		if embedded.dir, embedded.err = os.MkdirTemp("", "outboxkit-nats-embedded-"); embedded.err != nil {
			return
		}
		embedded.srv, embedded.err = server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: embedded.dir, NoSigs: true, MaxPayload: 1 << 20})
		if embedded.err != nil {
			return
		}
		go embedded.srv.Start()
		if !embedded.srv.ReadyForConnections(10 * time.Second) {
			embedded.err = fmt.Errorf("the in-binary nats-server %s was not ready in 10s", server.VERSION)
		}
	})
	require.NoError(t, embedded.err)
	return embedded.srv.ClientURL()
}

// connectAtomic returns a connection to the in-binary server, closed when the test ends.
func connectAtomic(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(atomicURL(t), nats.Name(t.Name()))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// keyedMessages returns n messages of subject over keys keys, in key order per key.
func keyedMessages(subject string, n, keys int) []core.Message {
	msgs := make([]core.Message, n)
	for i := range msgs {
		msgs[i] = message(subject, fmt.Sprintf("k%d", i%keys), i)
	}
	return msgs
}

// requireStored asserts that the stream holds exactly want, each key's messages in want's
// order (across keys there is no order), and reports how many of them carry a Nats-Batch-Id
// header (stored by an atomic batch).
func requireStored(t *testing.T, s jetstream.Stream, want []core.Message) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := readStream(ctx, s, len(want))
	require.NoError(t, err)
	n, err := streamMsgs(ctx, s)
	require.NoError(t, err)
	require.Equal(t, len(want), n, "messages stored")
	wantKeys, gotKeys := map[string][]string{}, map[string][]string{}
	for _, m := range want {
		wantKeys[m.GroupID] = append(wantKeys[m.GroupID], m.ID)
	}
	batched := 0
	for _, m := range raw {
		ev, _, err := natssink.DecodeMsg(m.Subject, m.Header, m.Data)
		require.NoError(t, err)
		require.Equal(t, ev.ID, m.Header.Get(natssink.HeaderMsgID))
		g := "order/" + ev.AggregateID
		gotKeys[g] = append(gotKeys[g], ev.ID)
		if m.Header.Get("Nats-Batch-Id") != "" {
			batched++
		}
	}
	require.Equal(t, wantKeys, gotKeys, "each key's messages, in order")
	return batched
}

func requireNoErrors(t *testing.T, res []error) {
	t.Helper()
	for i, err := range res {
		require.NoError(t, err, "message %d", i)
	}
}

// TestAtomicBatchStoresWholeBatchesAndResends: a Send of 2,500 messages over 16 keys is
// stored in order by atomic batches (every message carries the server's batch headers); the
// same Send again, as after a lost acknowledgement, is refused by the server as a batch (its
// messages are stored already) and published one per key: every outcome nil, nothing stored
// twice.
func TestAtomicBatchStoresWholeBatchesAndResends(t *testing.T) {
	t.Parallel()
	nc := connectAtomic(t)
	js := newJS(t, nc)
	subject := unique("a") + ".events"
	s := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, AllowAtomicPublish: true})
	var logs bytes.Buffer
	sink, err := natssink.New(nc, &natssink.Options{AtomicBatch: true,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	msgs := keyedMessages(subject, 2500, 16)
	ctx := context.Background()
	requireNoErrors(t, sink.Send(ctx, msgs))
	require.Equal(t, len(msgs), requireStored(t, s, msgs), "messages stored by atomic batches")
	require.NotContains(t, logs.String(), "nats_atomic_refused")

	requireNoErrors(t, sink.Send(ctx, msgs))
	require.Equal(t, len(msgs), requireStored(t, s, msgs))
	require.Contains(t, logs.String(), "nats_atomic_refused")
}

// TestAtomicBatchRefusedMessage: one message of key k1 is larger than the stream's
// max_msg_size (not the server's max_payload, which the sink checks itself), so the server
// refuses its whole batch. The sink then publishes the batch one per key: that message is
// parked (ErrMessageTooLarge, permanent), the later messages of k1 are not published
// (ErrNotAcknowledged), and every other key is stored in order. Published as one atomic
// batch's outcome, every message would have failed, or (pipelined without atomicity) k1's
// later messages would have been stored ahead of the refused one.
func TestAtomicBatchRefusedMessage(t *testing.T) {
	t.Parallel()
	nc := connectAtomic(t)
	js := newJS(t, nc)
	subject := unique("r") + ".events"
	s := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, AllowAtomicPublish: true, MaxMsgSize: 4096})
	sink, err := natssink.New(nc, &natssink.Options{AtomicBatch: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	msgs := keyedMessages(subject, 40, 4)
	const big = 9 // key k1, its third message
	msgs[big].Payload = bytes.Repeat([]byte("x"), 8000)
	res := sink.Send(context.Background(), msgs)
	var want []core.Message
	for i, m := range msgs {
		switch {
		case i == big:
			require.ErrorIs(t, res[i], natssink.ErrMessageTooLarge)
			require.True(t, core.IsPermanent(res[i]))
		case m.GroupID == msgs[big].GroupID && i > big:
			require.ErrorIs(t, res[i], core.ErrNotAcknowledged, "message %d behind the refused one", i)
		default:
			require.NoError(t, res[i], "message %d", i)
			want = append(want, m)
		}
	}
	require.Equal(t, 0, requireStored(t, s, want), "no message of the refused batch stored by it")
}

// TestAtomicBatchUnavailable: with AtomicBatch on a stream created without
// AllowAtomicPublish, the sink logs nats_atomic_unavailable once and publishes one per key.
func TestAtomicBatchUnavailable(t *testing.T) {
	t.Parallel()
	nc := connectAtomic(t)
	js := newJS(t, nc)
	subject := unique("u") + ".events"
	s := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}})
	var logs bytes.Buffer
	sink, err := natssink.New(nc, &natssink.Options{AtomicBatch: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	msgs := keyedMessages(subject, 300, 8)
	requireNoErrors(t, sink.Send(context.Background(), msgs[:150]))
	requireNoErrors(t, sink.Send(context.Background(), msgs[150:]))
	require.Equal(t, 0, requireStored(t, s, msgs))
	require.Equal(t, 1, strings.Count(logs.String(), "nats_atomic_unavailable"), logs.String())
	require.Contains(t, logs.String(), "AllowAtomicPublish")
}
