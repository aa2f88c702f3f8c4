package kafka_test

import (
	"context"
	crand "crypto/rand"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// TestConformance runs the sink suite against the test cluster: a topic of 3 partitions (each
// key in one partition: ordered), read back from the start and decoded as the consumer does.
// The failure hooks: a topic that does not exist (permanent), and a topic whose
// max.message.bytes refuses the message's 8 KiB of random bytes (the broker refuses the
// batch: retryable). The client's ProducerBatchMaxBytes is the sink's size limit. Kafka has no
// per-message deduplication id (the idempotent producer's sequence numbers are per
// partition), so the dedup case is not offered.
func TestConformance(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			topic := newTopic(t, 3)
			sink, err := kafka.New(newClient(t, kgo.ProducerBatchMaxBytes(maxBytes)), &kafka.Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			reader := newClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			var got []conformance.ReceivedMessage
			var small sync.Once
			smallTopic := topic + "-small"
			return conformance.SinkFixture{
				Sink:        sink,
				Destination: topic,
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					for len(got) < atLeast {
						fs := reader.PollFetches(ctx)
						if ctx.Err() != nil {
							break
						}
						if err := fs.Err0(); err != nil {
							return nil, err
						}
						for _, r := range fs.Records() {
							ev, _, err := kafka.DecodeRecord(r)
							if err != nil {
								return nil, err
							}
							got = append(got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers, Key: string(r.Key)})
						}
					}
					return slices.Clone(got), nil
				},
				RejectPermanent: func(m *core.Message) { m.Destination = "missing-" + topic },
				RejectRetryable: func(m *core.Message) {
					small.Do(func() {
						createTopic(t, smallTopic, 1)
						_, err := kadm.NewClient(newClient(t)).AlterTopicConfigs(context.Background(),
							[]kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2048")}}, smallTopic)
						require.NoError(t, err)
					})
					m.Destination = smallTopic
					m.Payload = make([]byte, 8192)
					_, _ = crand.Read(m.Payload) // incompressible
				},
			}
		},
		Ordered:         true,
		MaxMessageBytes: maxBytes,
		ErrTooLarge:     kafka.ErrMessageTooLarge,
	})
}
