package nats_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// connect returns a connection to the test server, closed when the test ends.
func connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(testkit.Need(t, testkit.NATSURL), nats.Name(t.Name()))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

func newJS(t testing.TB, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

var seq atomic.Int64

// unique returns a name unique to this test run, usable as a stream name and a subject token.
func unique(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, time.Now().UnixNano()%1e12, seq.Add(1))
}

// newStream creates a stream of subjects, deleted when the test ends.
func newStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = unique("S")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.CreateStream(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, cfg.Name)
	})
	return s
}

// streamMsgs returns how many messages the stream stores.
func streamMsgs(ctx context.Context, s jetstream.Stream) (int, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs), nil
}

// readStream returns the stored messages of s from sequence 1 on, waiting until it holds at
// least n or ctx ends.
func readStream(ctx context.Context, s jetstream.Stream, n int) ([]*jetstream.RawStreamMsg, error) {
	var out []*jetstream.RawStreamMsg
	next := uint64(1)
	for len(out) < n {
		info, err := s.Info(ctx)
		if err != nil {
			return out, err
		}
		if next > info.State.LastSeq {
			select {
			case <-ctx.Done():
				return out, nil
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		for ; next <= info.State.LastSeq; next++ {
			m, err := s.GetMsg(ctx, next)
			if err != nil {
				return out, err
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// message builds a routed message of key k with sequence number i.
func message(subject, k string, i int) core.Message {
	ev := core.Event{
		ID: fmt.Sprintf("%s-%s-%04d", strings.ReplaceAll(subject, ".", "-"), k, i), AggregateType: "order", AggregateID: k,
		AggregateVersion: int64(i + 1), Type: "order.updated", SchemaID: "order.v1",
		Payload: []byte(fmt.Sprintf(`{"key":%q,"n":%d}`, k, i)), Tenant: "acme",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "origin": "test"},
	}
	return core.Message{
		Record:      driver.Record{Event: ev, CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)},
		Destination: subject, DedupID: ev.ID, GroupID: "order/" + k,
	}
}
