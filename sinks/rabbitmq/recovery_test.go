package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// newProxy starts an in-process toxiproxy proxy to the test node and returns it with the
// node's URL through it.
func newProxy(t *testing.T) (*toxiproxy.Proxy, string) {
	t.Helper()
	u, err := url.Parse(brokerURL(t))
	require.NoError(t, err)
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "rabbitmq", "127.0.0.1:0", u.Host)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	u.Host = p.Listen
	return p, u.String()
}

// TestConnectionLoss: the connection under the sink is cut while a call's confirms are on
// their way (a 300ms latency on the broker-to-client direction holds them back): nothing is
// reported acknowledged that the broker did not confirm (every outcome is a retryable error,
// none permanent), and once the broker is reachable again a later Send redials and succeeds.
func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	p, proxied := newProxy(t)
	sink, err := rabbitmq.New(proxied, &rabbitmq.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })

	// A healthy call first: the connection and a channel exist.
	first := []core.Message{message(q, "a", 0)}
	require.Equal(t, []error{nil}, sink.Send(context.Background(), first))

	_, err = p.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":300}}`))
	require.NoError(t, err)
	var msgs []core.Message
	for i := 1; i <= 60; i++ {
		msgs = append(msgs, message(q, []string{"a", "b", "c"}[i%3], i))
	}
	done := make(chan []error, 1)
	go func() { done <- sink.Send(context.Background(), msgs) }()
	time.Sleep(100 * time.Millisecond) // published; the confirms are held back
	p.Stop()                           // the connection is cut
	cut := time.Now()
	var out []error
	select {
	case out = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Send did not return after the connection was cut")
	}
	t.Logf("Send returned %v after the cut: %v", time.Since(cut), out[0])
	require.NoError(t, core.CheckOutcomes(msgs, out))
	for i, err := range out {
		require.Error(t, err, "message %d reported acknowledged though its confirm never reached the sink", i)
		require.False(t, core.IsPermanent(err), "message %d: %v", i, err)
	}
	require.NoError(t, p.Toxics.RemoveToxic(context.Background(), "slow"))

	// While the broker is unreachable, Send fails at once, retryably.
	down := sink.Send(context.Background(), []core.Message{message(q, "d", 0)})
	require.Error(t, down[0])
	require.False(t, core.IsPermanent(down[0]))

	require.NoError(t, p.Start())
	again := []core.Message{message(q, "e", 0)}
	require.Eventually(t, func() bool { return sink.Send(context.Background(), again)[0] == nil },
		15*time.Second, 100*time.Millisecond, "Send after the broker came back")

	// What reached the queue: the first message, any of the cut call's (the broker may have
	// taken them; the relay's resend is a duplicate, never a loss) and the last one.
	n, err := ready(t, q)
	require.NoError(t, err)
	got := getAll(t, channel(t), q, n)
	require.Equal(t, first[0].ID, got[0].MessageId)
	require.Equal(t, again[0].ID, got[len(got)-1].MessageId)
}

// TestConsumerReconnects: the consumer's connection is cut while it holds an unacknowledged
// message in its handler; the message goes back to the queue, the consumer dials again and
// applies it (the first attempt's transaction never committed), and the messages published
// after the cut are applied too.
func TestConsumerReconnects(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	p, proxied := newProxy(t)
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	var mu sync.Mutex
	calls := map[string]int{}
	block := make(chan struct{})
	c, err := rabbitmq.NewConsumer(proxied, q, inbox, "reconnects", func(ctx context.Context, tx *memory.Tx, d *rabbitmq.Delivery) error {
		mu.Lock()
		calls[d.Event.ID]++
		n := calls[d.Event.ID]
		mu.Unlock()
		if d.Event.ID == "held" && n == 1 {
			select { // the first attempt is held until the connection is cut
			case <-block:
			case <-ctx.Done():
			}
			return errors.New("connection cut under the handler")
		}
		return tx.Incr(d.Event.ID)
	}, &rabbitmq.ConsumerOptions{RetryDelay: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	sink := newSink(t, nil)
	held := message(q, "h", 0)
	held.ID = "held"
	require.Equal(t, []error{nil}, sink.Send(context.Background(), []core.Message{held}))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return calls["held"] == 1 }, 20*time.Second, 10*time.Millisecond)
	p.Stop()
	close(block)
	after := message(q, "h", 1)
	require.Equal(t, []error{nil}, sink.Send(context.Background(), []core.Message{after}))
	require.NoError(t, p.Start())

	require.Eventually(t, func() bool { return store.Counter("held") == 1 && store.Counter(after.ID) == 1 },
		30*time.Second, 20*time.Millisecond, "both applied after the reconnect")
	require.GreaterOrEqual(t, c.Stats().Sessions, uint64(2))
	require.Eventually(t, func() bool {
		n, err := pending(context.Background(), t, q)
		return err == nil && n == 0
	}, 30*time.Second, 100*time.Millisecond, "both acknowledged")
}
