package nats_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// TestConformance runs the sink suite against the test server: a stream covering the
// fixture's subject, read back by stream sequence and decoded as the consumer does, with the
// Nats-Msg-Id header as the deduplication id. The failure hooks: a subject no stream covers
// (no responders: permanent ErrNoStream), and a subject of a stream that is full and discards
// new messages ("maximum messages exceeded": retryable). The size limit is the server's
// max_payload, from the connection.
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.RunSink(t, sinkHarness(connect(t), false))
}

// TestConformanceAtomic runs the sink suite with Options.AtomicBatch against a nats-server
// of this module's version (2.12 or later: atomic batches) running in the test binary, on
// streams created with AllowAtomicPublish: the full stream refuses the whole batch, whose
// messages the sink then publishes one per key (retryable); the subject no stream covers has
// no stream to allow atomic publishes (ErrNoStream, permanent).
func TestConformanceAtomic(t *testing.T) {
	t.Parallel()
	conformance.RunSink(t, sinkHarness(connectAtomic(t), true))
}

// sinkHarness is the suite's harness on the server of nc, with Options.AtomicBatch = atomic
// and streams that allow atomic publishes when it is set.
func sinkHarness(nc *nats.Conn, atomic bool) conformance.SinkHarness {
	return conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			js := newJS(t, nc)
			subject := unique("s") + ".events"
			stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, AllowAtomicPublish: atomic})
			sink, err := natssink.New(nc, &natssink.Options{Logger: slog.New(slog.DiscardHandler), AtomicBatch: atomic})
			require.NoError(t, err)
			var got []conformance.ReceivedMessage
			var full sync.Once
			fullSubject := unique("full") + ".events"
			return conformance.SinkFixture{
				Sink:        sink,
				Destination: subject,
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					raw, err := readStream(ctx, stream, atLeast)
					if err != nil {
						return nil, err
					}
					got = got[:0]
					for _, m := range raw {
						ev, _, err := natssink.DecodeMsg(m.Subject, m.Header, m.Data)
						if err != nil {
							return nil, err
						}
						got = append(got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers,
							Key: ev.PartitionKey, DedupID: m.Header.Get(natssink.HeaderMsgID)})
					}
					return slices.Clone(got), nil
				},
				RejectPermanent: func(m *core.Message) { m.Destination = "nostream." + subject },
				RejectRetryable: func(m *core.Message) {
					full.Do(func() {
						newStream(t, js, jetstream.StreamConfig{Subjects: []string{fullSubject}, MaxMsgs: 1, Discard: jetstream.DiscardNew,
							AllowAtomicPublish: atomic})
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						_, err := js.Publish(ctx, fullSubject, []byte("fills the stream"))
						require.NoError(t, err)
					})
					m.Destination = fullSubject
				},
			}
		},
		Ordered:         true,
		DedupID:         true,
		MaxMessageBytes: int(nc.MaxPayload()),
		ErrTooLarge:     natssink.ErrMessageTooLarge,
	}
}
