package webhook_test

import (
	"sync"
	"testing"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// TestConformance runs the sink suite against an httptest endpoint that verifies every request
// with the Standard Webhooks reference library (a request it cannot verify is answered 401,
// which the suite sees as a failed send) and decodes the ce- headers as the Handler does.
// Failure hooks: a path answering 404 (permanent) and one answering 503 (retryable).
// Options.MaxBodyBytes is the declared size limit. The endpoint answers each request before
// the sink sends the key's next one, so per-key order is offered; the deduplication id is the
// webhook-id header.
func TestConformance(t *testing.T) {
	t.Parallel()
	runSinkSuite(t, 0)
}

// TestConformanceBatch runs the sink suite in batch mode (Options.BatchSize 3): the recorder
// decodes the batch bodies, and each event's deduplication id is its id (the receiver's inbox
// key; the webhook-id is the batch's). Batch requests travel only when a Send holds two or
// more events of a destination, which the suite's bulk cases do.
func TestConformanceBatch(t *testing.T) {
	t.Parallel()
	runSinkSuite(t, 3)
}

func runSinkSuite(t *testing.T, batchSize int) {
	const maxBytes = 64 << 10
	var (
		mu   sync.Mutex
		recs []*recorder
	)
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			secret := newSecret(t)
			rec := newRecorder(t, secret)
			// Two secrets: the recorder knows only the second (a rotation in progress).
			sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t), secret}, MaxBodyBytes: maxBytes, BatchSize: batchSize})
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
			t.Cleanup(func() {
				if n := rec.rejectedCount(); n != 0 {
					t.Errorf("the reference library refused %d requests", n)
				}
			})
			return conformance.SinkFixture{
				Sink:            sink,
				Destination:     rec.URL + "/ok",
				Received:        rec.received,
				RejectPermanent: func(m *core.Message) { m.Destination = rec.URL + "/gone" },
				RejectRetryable: func(m *core.Message) { m.Destination = rec.URL + "/unavailable" },
			}
		},
		Ordered:         true,
		DedupID:         true,
		MaxMessageBytes: maxBytes,
		ErrTooLarge:     webhook.ErrMessageTooLarge,
	})
	t.Cleanup(func() { // after the parallel subtests
		mu.Lock()
		defer mu.Unlock()
		batches := 0
		for _, rec := range recs {
			batches += rec.batchCount()
		}
		if batchSize > 1 && batches == 0 {
			t.Errorf("batch mode: no batch request reached the endpoints")
		}
		t.Logf("%d batch requests", batches)
	})
}
