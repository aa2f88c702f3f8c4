package stdout_test

import (
	"bufio"
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/sinks/stdout"
)

// syncBuffer is a bytes.Buffer safe for the sink's writes and the suite's reads at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// TestConformance runs the sink suite on the sink writing to a buffer; Received decodes its
// lines. The sink refuses nothing (no permanent, retryable or oversize cases) and keeps the
// order it was given (one writer).
func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			var out syncBuffer
			return conformance.SinkFixture{
				Sink:        stdout.New(&out, nil),
				Destination: "stdout",
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					var got []conformance.ReceivedMessage
					sc := bufio.NewScanner(bytes.NewReader(out.bytes()))
					sc.Buffer(nil, 1<<26)
					for sc.Scan() {
						l, err := stdout.DecodeLine(sc.Bytes())
						if err != nil {
							return nil, err
						}
						got = append(got, conformance.ReceivedMessage{EventID: l.ID, Payload: l.Payload(), Headers: l.Headers, Key: l.PartitionKey})
					}
					return got, sc.Err()
				},
			}
		},
		Ordered: true,
	})
}
