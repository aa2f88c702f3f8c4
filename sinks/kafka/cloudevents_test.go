package kafka_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// ceMessage reads a Kafka record as the CloudEvents Kafka protocol binding (binary content
// mode) says, the way sdk-go's own Kafka bindings do: ce_-prefixed headers are attributes or
// extensions, content-type is datacontenttype, the value is the data. sdk-go has no franz-go
// binding, so this adapter hands sdk-go the record's headers as they are.
type ceMessage struct{ r *kgo.Record }

var ceSpecs = spec.WithPrefix("ce_")

func (m ceMessage) ReadEncoding() binding.Encoding {
	if header(m.r, "ce_specversion") != "" {
		return binding.EncodingBinary
	}
	return binding.EncodingUnknown
}

func (m ceMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m ceMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	v := ceSpecs.Version(header(m.r, "ce_specversion"))
	if v == nil {
		return binding.ErrNotBinary
	}
	for _, h := range m.r.Headers {
		switch {
		case h.Key == "content-type":
			if err := w.SetAttribute(v.AttributeFromKind(spec.DataContentType), string(h.Value)); err != nil {
				return err
			}
		case v.Attribute(h.Key) != nil:
			if err := w.SetAttribute(v.Attribute(h.Key), string(h.Value)); err != nil {
				return err
			}
		case strings.HasPrefix(h.Key, "ce_"):
			if err := w.SetExtension(strings.TrimPrefix(h.Key, "ce_"), string(h.Value)); err != nil {
				return err
			}
		}
	}
	return w.SetData(bytes.NewReader(m.r.Value))
}

// GetAttribute and GetExtension make ceMessage a binding.MessageMetadataReader.
func (m ceMessage) GetAttribute(k spec.Kind) (spec.Attribute, interface{}) {
	v := ceSpecs.Version(header(m.r, "ce_specversion"))
	if v == nil {
		return nil, nil
	}
	a := v.AttributeFromKind(k)
	if a == nil {
		return nil, nil
	}
	name := a.PrefixedName()
	if k == spec.DataContentType {
		name = "content-type"
	}
	if s := header(m.r, name); s != "" {
		return a, s
	}
	return a, nil
}

func (m ceMessage) GetExtension(name string) interface{} {
	if s := header(m.r, "ce_"+name); s != "" {
		return s
	}
	return nil
}

func (m ceMessage) Finish(error) error { return nil }

// TestCloudEventsSDKDecodesRecords: sdk-go, an independent reader of the format, turns our
// records into valid CloudEvents with every documented attribute and extension.
func TestCloudEventsSDKDecodesRecords(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	sink, err := kafka.New(newClient(t), &kafka.Options{Source: "/shop/orders"})
	require.NoError(t, err)
	m := message(topic, "42", 0)
	m.CausationID, m.CorrelationID = "cause-1", "corr-1"
	m.Headers["content-type"] = "application/json"
	m.Headers["tracestate"] = "vendor=1"
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	rec := consume(t, topic, 1)[0]

	ev, err := binding.ToEvent(context.Background(), ceMessage{rec})
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, m.ID, ev.ID())
	require.Equal(t, "/shop/orders", ev.Source())
	require.Equal(t, "order.updated", ev.Type())
	require.Equal(t, "order/42", ev.Subject())
	require.Equal(t, "application/json", ev.DataContentType())
	require.True(t, m.CreatedAt.Equal(ev.Time()), "time %v", ev.Time())
	require.Equal(t, m.Payload, ev.Data())
	ext := ev.Extensions()
	want := map[string]string{
		"aggregatetype": "order", "aggregateid": "42", "aggregateversion": "1", "partitionkey": "order/42",
		"schemaid": "order.v1", "tenant": "acme", "causationid": "cause-1", "correlationid": "corr-1",
		"traceparent": m.Headers["traceparent"], "tracestate": "vendor=1",
	}
	for k, v := range want {
		require.Equal(t, v, ext[k], "extension %s", k)
	}
	require.Len(t, ext, len(want), "no other extensions: %v", ext)
}
