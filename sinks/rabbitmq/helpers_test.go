package rabbitmq_test

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

func brokerURL(t testing.TB) string {
	t.Helper()
	return testkit.Need(t, testkit.RabbitMQURL)
}

// dial opens a connection of the test's own, closed when the test ends.
func dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// channel opens a channel on a connection of the test's own.
func channel(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := dial(t).Channel()
	require.NoError(t, err)
	return ch
}

var queueSeq atomic.Int64

// queueName is a name unique to this test run.
func queueName(t testing.TB) string {
	n := fmt.Sprintf("q%d-%d-%s", time.Now().UnixNano(), queueSeq.Add(1), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	if len(n) > 200 {
		n = n[:200]
	}
	return n
}

// newQueue declares a fresh durable queue with its dead-letter path (DeclareQueue) and
// deletes them when the test ends.
func newQueue(t testing.TB, args amqp.Table) string {
	t.Helper()
	q := queueName(t)
	require.NoError(t, rabbitmq.DeclareQueue(channel(t), q, args))
	t.Cleanup(func() {
		ch, err := amqp.Dial(brokerURL(t))
		if err != nil {
			return
		}
		defer ch.Close()
		c, err := ch.Channel()
		if err != nil {
			return
		}
		_, _ = c.QueueDelete(q, false, false, false)
		_, _ = c.QueueDelete(q+".dlq", false, false, false)
		_ = c.ExchangeDelete(q+".dlx", false, false)
	})
	return q
}

// newSink returns a sink of the test node, closed when the test ends.
func newSink(t testing.TB, o *rabbitmq.Options) *rabbitmq.Sink {
	t.Helper()
	s, err := rabbitmq.New(brokerURL(t), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// getAll takes up to n messages of queue with basic.get (auto-ack), waiting up to 20s.
func getAll(t testing.TB, ch *amqp.Channel, queue string, n int) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	deadline := time.Now().Add(20 * time.Second)
	for len(out) < n && time.Now().Before(deadline) {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		out = append(out, d)
	}
	require.Len(t, out, n, "messages of %s", queue)
	return out
}

// pending returns the queue's messages, ready and unacknowledged, with the node's rabbitmqctl
// (list_queues asks the queue itself; AMQP's queue.declare-ok counts only the ready
// messages, and the management API's statistics lag). One call takes about 2s.
func pending(ctx context.Context, t testing.TB, queue string) (int, error) {
	ctl := testkit.Need(t, testkit.RabbitMQCtl)
	out, err := exec.CommandContext(ctx, ctl, "list_queues", "-q", "--no-table-headers", "name", "messages").Output()
	if err != nil {
		return 0, fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if name, n, ok := strings.Cut(line, "\t"); ok && name == queue {
			return strconv.Atoi(strings.TrimSpace(n))
		}
	}
	return 0, fmt.Errorf("rabbitmqctl list_queues: no queue %s in %q", queue, out)
}

// ready returns the ready messages of queue (queue.declare-ok's count: exact for a queue
// without consumers).
func ready(t testing.TB, queue string) (int, error) {
	ch, err := dial(t).Channel()
	if err != nil {
		return 0, err
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return q.Messages, err
}

// message builds a routed message of key k with sequence number i.
func message(dest, k string, i int) core.Message {
	ev := core.Event{
		ID: fmt.Sprintf("%s-%s-%04d", dest[:8], k, i), AggregateType: "order", AggregateID: k,
		AggregateVersion: int64(i + 1), Type: "order.updated", SchemaID: "order.v1",
		Payload: []byte(fmt.Sprintf(`{"key":%q,"n":%d}`, k, i)), Tenant: "acme",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "origin": "test"},
	}
	return core.Message{
		Record:      driver.Record{Event: ev, CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)},
		Destination: dest, DedupID: ev.ID, GroupID: "order/" + k,
	}
}
