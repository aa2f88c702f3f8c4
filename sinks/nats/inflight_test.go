package nats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// fakeStream answers publishes on subject as a JetStream stream would (a PubAck), each after
// delay, and records per partition key the most messages that were unanswered at once.
type fakeStream struct {
	mu      sync.Mutex
	open    map[string]int
	maxOpen map[string]int
	order   map[string][]string
}

func newFakeStream(t *testing.T, nc *nats.Conn, subject string, delay time.Duration, dup func(id string) bool) *fakeStream {
	f := &fakeStream{open: map[string]int{}, maxOpen: map[string]int{}, order: map[string][]string{}}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		key, id := m.Header.Get("ce-partitionkey"), m.Header.Get(natssink.HeaderMsgID)
		f.mu.Lock()
		f.open[key]++
		f.maxOpen[key] = max(f.maxOpen[key], f.open[key])
		f.order[key] = append(f.order[key], id)
		f.mu.Unlock()
		go func() {
			time.Sleep(delay)
			f.mu.Lock()
			f.open[key]--
			f.mu.Unlock()
			_ = m.Respond(fmt.Appendf(nil, `{"stream":"FAKE","seq":1,"duplicate":%t}`, dup(id)))
		}()
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, nc.Flush())
	return f
}

// TestOneMessagePerKeyInFlight: the sink never has two messages of one key unanswered at
// once (so a failed message is never overtaken by the next one of its key), while messages
// of other keys are in flight together; a PubAck marked duplicate is an acknowledgement.
func TestOneMessagePerKeyInFlight(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	subject := unique("f") + ".events"
	dup := func(id string) bool { return len(id)%2 == 0 }
	f := newFakeStream(t, connect(t), subject, 20*time.Millisecond, dup)
	sink, err := natssink.New(nc, nil)
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 6; i++ {
		for _, k := range []string{"a", "b", "c", "d"} {
			msgs = append(msgs, message(subject, k, i))
		}
	}
	start := time.Now()
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range []string{"a", "b", "c", "d"} {
		require.Equal(t, 1, f.maxOpen["order/"+k], "key %s had messages in flight together", k)
		require.Len(t, f.order["order/"+k], 6)
		for i, id := range f.order["order/"+k] {
			require.Equal(t, message(subject, k, i).ID, id)
		}
	}
	// Keys in flight together: 6 rounds of 20ms, not 24 messages one by one.
	require.Less(t, time.Since(start), 24*20*time.Millisecond)
}
