package batcher_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
	"github.com/outboxkit/outbox/sinks/memory"
)

// maxMessage is the size limit of batchedSink.
const maxMessage = 8 << 10

var errTooLarge = errors.New("batched sink: message too large")

// batchedSink is a sink as package doc describes one: an Item per message (a payload over
// maxMessage refused permanently), requests planned and run by batcher.Run, each request one
// Send to an in-memory broker.
type batchedSink struct {
	b *memory.Broker
	o batcher.Options
}

func (s batchedSink) Send(ctx context.Context, msgs []core.Message) []error {
	items := make([]batcher.Item, len(msgs))
	for i, m := range msgs {
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination, Size: len(m.Payload)}
		if len(m.Payload) > maxMessage {
			items[i].Err = core.Permanent(fmt.Errorf("event %s: %w", m.ID, errTooLarge))
		}
	}
	return batcher.Run(ctx, items, s.o, func(ctx context.Context, _ string, idx []int) []error {
		req := make([]core.Message, len(idx))
		for k, i := range idx {
			req[k] = msgs[i]
		}
		return s.b.Send(ctx, req)
	})
}

// TestConformance runs the sink suite against sinks built on Run with small requests, several
// in flight: with order kept per group, with one message of a group per request, and to a
// destination that keeps no order (then the suite does not check order).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		o       batcher.Options
		ordered bool
	}{
		{"ordered", batcher.Options{MaxEntries: 3, MaxBytes: 2 * maxMessage, Concurrency: 4}, true},
		{"one-per-group", batcher.Options{MaxEntries: 3, MaxBytes: 2 * maxMessage, Concurrency: 4, OnePerGroup: true}, true},
		{"unordered", batcher.Options{MaxEntries: 3, MaxBytes: 2 * maxMessage, Concurrency: 4, Unordered: func(string) bool { return true }}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conformance.RunSink(t, conformance.SinkHarness{
				New: func(t *testing.T) conformance.SinkFixture {
					b, err := memory.NewBroker(&memory.Options{Buffer: 1 << 16})
					require.NoError(t, err)
					var got []conformance.ReceivedMessage
					return conformance.SinkFixture{
						Sink:        batchedSink{b: b, o: c.o},
						Destination: "q",
						Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
							for len(got) < atLeast {
								select {
								case m := <-b.Deliveries():
									got = append(got, conformance.ReceivedMessage{EventID: m.ID, Payload: m.Payload, Headers: m.Headers, Key: m.GroupID})
								case <-ctx.Done():
									return slices.Clone(got), nil
								}
							}
							return slices.Clone(got), nil
						},
						RejectPermanent: func(m *core.Message) { b.Reject(m.ID, core.Permanent(errors.New("refused"))) },
						RejectRetryable: func(m *core.Message) { b.Reject(m.ID, memory.ErrRejected) },
					}
				},
				Ordered:         c.ordered,
				MaxMessageBytes: maxMessage,
				ErrTooLarge:     errTooLarge,
			})
		})
	}
}
