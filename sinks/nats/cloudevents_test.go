package nats_test

import (
	"context"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/cetest"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// TestCloudEventsSDKDecodesMessages: sdk-go's own NATS JetStream protocol binding
// (protocol/nats_jetstream/v2: NewMessage, then binding.ToEvent), an independent reader of
// the CloudEvents NATS binding, turns a message the sink stored in a stream (read back with
// nats.go) into a valid CloudEvent with every documented attribute and extension, and the
// payload as its data byte for byte.
func TestCloudEventsSDKDecodesMessages(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("ce") + ".events"
	s := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}})
	sink, err := natssink.New(nc, &natssink.Options{Source: "/shop/orders"})
	require.NoError(t, err)
	m := message(subject, "42", 0)
	m.CausationID, m.CorrelationID = "cause-1", "corr-1"
	m.Headers["content-type"] = "application/json"
	m.Headers["tracestate"] = "vendor=1"
	m.Payload = append([]byte(`{"bytes":"`), 0x00, 0xff, 0x80, '"', '}')
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := readStream(ctx, s, 1)
	require.NoError(t, err)
	require.Len(t, stored, 1)
	msg := &nats.Msg{Subject: stored[0].Subject, Header: stored[0].Header, Data: stored[0].Data}

	cetest.RequireDecoded(t, cejs.NewMessage(msg), m, "/shop/orders", "application/json", map[string]string{
		"aggregatetype": "order", "aggregateid": "42", "aggregateversion": "1", "partitionkey": "order/42",
		"schemaid": "order.v1", "tenant": "acme", "causationid": "cause-1", "correlationid": "corr-1",
		"traceparent": m.Headers["traceparent"], "tracestate": "vendor=1",
	})
}
