package kafka_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// silentBrokers reaches every broker of the test cluster through its own testkit.BlackHole
// (kgo.Dialer: the addresses the cluster advertises are dialled through the proxies too).
type silentBrokers struct {
	proxies map[string]*testkit.BlackHole
	stray   atomic.Int64 // dials to an address without a proxy
}

func newSilentBrokers(t *testing.T) *silentBrokers {
	s := &silentBrokers{proxies: map[string]*testkit.BlackHole{}}
	for _, b := range brokers(t) {
		s.proxies[b] = testkit.NewBlackHole(t, b)
	}
	return s
}

func (s *silentBrokers) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if p := s.proxies[host]; p != nil {
		host = p.Addr()
	} else {
		s.stray.Add(1)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, host)
}

func (s *silentBrokers) swallow() {
	for _, p := range s.proxies {
		p.Swallow()
	}
}

func (s *silentBrokers) restore() {
	for _, p := range s.proxies {
		p.Restore()
	}
}

// A consumer whose brokers go silent with their sockets left open recovers by itself once they
// answer again: franz-go deadlines every request (kgo.RequestTimeoutOverhead, 1s here, on top of
// the request's own timeout: FetchMaxWait for a fetch), kills the connection and dials again.
// Without that bound the fetch in flight would wait on its dead connection for ever.
func TestConsumerRecoversFromSilentBrokers(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	produce(t, topic, 1, 0, 1)
	sb := newSilentBrokers(t)
	e := newConsumerEnv(t)
	c, _ := e.start(t, topic+"-g", topic, &kafka.ConsumerOptions{ClientOptions: []kgo.Opt{
		kgo.Dialer(sb.dial), kgo.RequestTimeoutOverhead(time.Second),
	}}, nil)
	eventually(t, "the first record applied and committed", func() bool { st := c.Stats(); return st.Applied == 1 && st.Commits >= 1 })

	sb.swallow()
	time.Sleep(3 * time.Second) // fetches, heartbeats and their reconnections are swallowed
	sb.restore()
	restored := time.Now()
	produce(t, topic, 1, 1, 2)
	// Bound: the swallowed fetch ends within RequestTimeoutOverhead + FetchMaxWait (1.2s), then
	// a dial, a fetch and the inbox; the group survives (the session timeout, 45s, did not
	// pass). 10s is ample.
	require.Eventually(t, func() bool { return c.Stats().Applied == 2 }, 10*time.Second, 20*time.Millisecond,
		"the record produced after the brokers answer again is consumed")
	t.Logf("consumed %v after the brokers answered again", time.Since(restored).Round(time.Millisecond))
	e.applied.requireInOrder(t, 1, 2)
	require.Zero(t, sb.stray.Load(), "every connection went through a proxy")
}

// The sink's Send to silent brokers does not end at its context's deadline: the idempotent
// producer (which New requires) cannot give up a record in flight without risking a duplicate,
// so Send waits until the brokers answer again. franz-go deadlines the produce request
// (ProduceRequestTimeout + RequestTimeoutOverhead, 1s + 1s here), kills the connection and
// produces again, so Send returns, acknowledged, soon after the brokers answer.
func TestSinkSendRecoversFromSilentBrokers(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	sb := newSilentBrokers(t)
	sink, err := kafka.New(newClient(t, kgo.Dialer(sb.dial), kgo.RequestTimeoutOverhead(time.Second),
		kgo.ProduceRequestTimeout(time.Second)), nil)
	require.NoError(t, err)
	for _, err := range sink.Send(context.Background(), []core.Message{message(topic, "k", 0)}) {
		require.NoError(t, err, "through the proxies")
	}

	sb.swallow()
	done := make(chan []error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		done <- sink.Send(ctx, []core.Message{message(topic, "k", 1)})
	}()
	select {
	case out := <-done:
		t.Fatalf("Send returned while the brokers were silent: %v", out)
	case <-time.After(3 * time.Second):
	}
	sb.restore()
	restored := time.Now()
	select {
	case out := <-done:
		t.Logf("Send returned %v after the brokers answered again: %v", time.Since(restored).Round(time.Millisecond), out)
		require.NoError(t, out[0], "acknowledged once the brokers answer")
	case <-time.After(10 * time.Second):
		t.Fatal("Send still waiting 10s after the brokers answered again")
	}
	recs := consume(t, topic, 2)
	require.Len(t, recs, 2)
	require.Zero(t, sb.stray.Load(), "every connection went through a proxy")
}
