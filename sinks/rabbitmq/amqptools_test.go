package rabbitmq_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// amqpToolsURL is the test node's URL as rabbitmq-c's tools read it: without the trailing "/"
// (which they take as the empty vhost).
func amqpToolsURL(t testing.TB) string {
	return strings.TrimSuffix(brokerURL(t), "/")
}

// TestAmqpGetReadsWhatTheSinkPublished: Debian's amqp-get (rabbitmq-c, a client we did not
// write) takes the messages the sink routed through amq.direct with a routing key, one per
// call, in the order the sink published each key's messages, each body byte for byte: text,
// every byte value, empty, 100 KiB of random bytes.
func TestAmqpGetReadsWhatTheSinkPublished(t *testing.T) {
	t.Parallel()
	get := testkit.NeedCommand(t, "amqp-get", "source scripts/lib/rabbitmq.sh && rabbitmq_start installs amqp-tools")
	q := newQueue(t, nil)
	ch := channel(t)
	require.NoError(t, ch.QueueBind(q, "rk-"+q, "amq.direct", false, nil))
	t.Cleanup(func() { _ = channel(t).QueueUnbind(q, "rk-"+q, "amq.direct", nil) })
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	big := make([]byte, 100<<10)
	_, _ = crand.Read(big)
	payloads := [][]byte{all, nil, big, []byte("plain text\n"), {0}}
	var msgs []core.Message
	for i := 0; i < 4; i++ {
		for _, k := range []string{"x", "y", "z"} {
			m := message("amq.direct/rk-"+q, k, i)
			m.ID = fmt.Sprintf("%s-%s-%d", q[:12], k, i)
			m.Payload = payloads[(i*3+len(k)+int(k[0]))%len(payloads)]
			msgs = append(msgs, m)
		}
	}
	for i, err := range newSink(t, nil).Send(context.Background(), msgs) {
		require.NoError(t, err, "message %d", i)
	}
	for i, m := range msgs {
		out, err := exec.Command(get, "-u", amqpToolsURL(t), "-q", q).Output()
		require.NoError(t, err, "amqp-get of message %d", i)
		require.True(t, bytes.Equal(m.Payload, out), "message %d (%s): amqp-get read %d bytes, want %d", i, m.ID, len(out), len(m.Payload))
	}
	n, err := ready(t, q)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more in the queue")
}

// TestAmqpConsumeReadsWhatTheSinkPublished: amqp-consume (rabbitmq-c) consumes, with
// acknowledgements, what the sink published to the default exchange (Destination = the
// queue's name), each body byte for byte and in order.
func TestAmqpConsumeReadsWhatTheSinkPublished(t *testing.T) {
	t.Parallel()
	consume := testkit.NeedCommand(t, "amqp-consume", "source scripts/lib/rabbitmq.sh && rabbitmq_start installs amqp-tools")
	q := newQueue(t, nil)
	var msgs []core.Message
	var want bytes.Buffer
	for i := 0; i < 20; i++ {
		m := message(q, "k", i)
		m.Payload = []byte(fmt.Sprintf("<%d:%s>", i, strings.Repeat("\x00\xff", i)))
		want.Write(m.Payload)
		msgs = append(msgs, m)
	}
	for i, err := range newSink(t, nil).Send(context.Background(), msgs) {
		require.NoError(t, err, "message %d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, consume, "-u", amqpToolsURL(t), "-q", q, "-c", "20", "-p", "1", "--", "cat").Output()
	require.NoError(t, err)
	require.True(t, bytes.Equal(want.Bytes(), out), "amqp-consume read %q\nwant %q", out, want.Bytes())
	require.Eventually(t, func() bool {
		n, err := ready(t, q)
		return err == nil && n == 0
	}, 10*time.Second, 50*time.Millisecond)
}

// TestMessageProperties: the AMQP properties and headers of a published message, read with
// basic.get: message-id = event ID, persistent delivery mode, the content type as the
// content-type property (never a header), the outbox CreatedAt as the timestamp, the
// CloudEvents attributes as "cloudEvents:" headers and other event headers under
// HeaderPrefix.
func TestMessageProperties(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	m := message(q, "a", 2)
	m.Headers["content-type"] = "application/json"
	m.CorrelationID = "corr-1"
	out := newSink(t, &rabbitmq.Options{Source: "/orders", ContentType: "text/plain"}).Send(context.Background(), []core.Message{m})
	require.Equal(t, []error{nil}, out)
	d := getAll(t, channel(t), q, 1)[0]
	require.Equal(t, m.ID, d.MessageId)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "application/json", d.ContentType)
	require.True(t, m.CreatedAt.Truncate(time.Second).Equal(d.Timestamp), "timestamp %v", d.Timestamp)
	require.Equal(t, m.Payload, d.Body)
	want := amqp.Table{
		rabbitmq.HeaderSpecVersion: "1.0", rabbitmq.HeaderID: m.ID, rabbitmq.HeaderSource: "/orders",
		rabbitmq.HeaderType: "order.updated", rabbitmq.HeaderTime: "2026-12-01T06:00:00.123456Z",
		rabbitmq.HeaderSubject: "order/a", rabbitmq.HeaderAggregateType: "order", rabbitmq.HeaderAggregateID: "a",
		rabbitmq.HeaderAggregateVersion: "3", rabbitmq.HeaderPartitionKey: "order/a", rabbitmq.HeaderSchemaID: "order.v1",
		rabbitmq.HeaderTenant: "acme", rabbitmq.HeaderCorrelationID: "corr-1",
		rabbitmq.HeaderTraceparent:       "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		rabbitmq.HeaderPrefix + "origin": "test",
	}
	require.Equal(t, want, d.Headers)
	ev, created, err := rabbitmq.DecodeDelivery(&d)
	require.NoError(t, err)
	require.Equal(t, m.CreatedAt, created)
	require.Equal(t, "application/json", ev.Headers["content-type"])
	require.Equal(t, m.Headers, ev.Headers)
	require.Equal(t, m.GroupID, ev.PartitionKey)
}

// TestDestinations: "exchange/routing-key", "/routing-key" (the default exchange) and a bare
// queue name reach the same queue; an exchange that does not exist is a permanent
// core.ErrUnknownDestination, an empty destination too, and a routing key without a binding is
// a permanent ErrUnroutable; the other keys of the call are delivered.
func TestDestinations(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	require.NoError(t, channel(t).QueueBind(q, "bound-"+q, "amq.topic", false, nil))
	t.Cleanup(func() { _ = channel(t).QueueUnbind(q, "bound-"+q, "amq.topic", nil) })
	msgs := []core.Message{message(q, "a", 0), message("/"+q, "b", 0), message("amq.topic/bound-"+q, "c", 0),
		message("missing-exchange-"+q+"/x", "d", 0), message("amq.topic/unbound-"+q, "e", 0), message(q, "f", 0)}
	msgs[5].Destination = ""
	out := newSink(t, nil).Send(context.Background(), msgs)
	require.NoError(t, core.CheckOutcomes(msgs, out))
	require.NoError(t, out[0])
	require.NoError(t, out[1])
	require.NoError(t, out[2])
	require.True(t, core.IsPermanent(out[3]), "%v", out[3])
	require.ErrorIs(t, out[3], core.ErrUnknownDestination)
	require.True(t, core.IsPermanent(out[4]), "%v", out[4])
	require.ErrorIs(t, out[4], rabbitmq.ErrUnroutable)
	require.True(t, core.IsPermanent(out[5]), "%v", out[5])
	require.ErrorIs(t, out[5], core.ErrUnknownDestination)
	got := getAll(t, channel(t), q, 3)
	ids := []string{got[0].MessageId, got[1].MessageId, got[2].MessageId}
	require.ElementsMatch(t, []string{msgs[0].ID, msgs[1].ID, msgs[2].ID}, ids)
}
