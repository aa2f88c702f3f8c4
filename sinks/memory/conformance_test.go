package memory_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/memory"
)

// TestConformance runs the sink suite against a perfect broker. Received drains the delivery
// channel; the Reject hooks use Broker.Reject. The broker has no size limit (the oversize cases
// are not offered).
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			b, err := memory.NewBroker(&memory.Options{Buffer: 1 << 16})
			require.NoError(t, err)
			var got []conformance.ReceivedMessage
			return conformance.SinkFixture{
				Sink:        b,
				Destination: "memory",
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					for len(got) < atLeast {
						select {
						case m := <-b.Deliveries():
							got = append(got, conformance.ReceivedMessage{EventID: m.ID, Payload: m.Payload, Headers: m.Headers, Key: m.GroupID, DedupID: m.DedupID})
						case <-ctx.Done():
							return slices.Clone(got), nil
						}
					}
					return slices.Clone(got), nil
				},
				RejectPermanent: func(m *core.Message) { b.Reject(m.ID, core.Permanent(errors.New("schema rejected"))) },
				RejectRetryable: func(m *core.Message) { b.Reject(m.ID, memory.ErrRejected) },
			}
		},
		Ordered: true, // one channel, in the order accepted
		DedupID: true, // a delivery is the core.Message the broker was given, DedupID included
	})
}
