package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// newSecret returns a fresh Standard Webhooks secret: "whsec_" + base64 of 32 random bytes.
func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newSink returns a sink signing with secrets, closed when the test ends.
func newSink(t *testing.T, o webhook.Options) *webhook.Sink {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet()
	}
	s, err := webhook.New(o)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// recorder is an endpoint that checks every request with the Standard Webhooks reference
// library (a request it cannot verify is answered 401), then answers by path: /ok records the
// request and answers 204, /gone 404, /unavailable 503.
type recorder struct {
	*httptest.Server
	wh *standardwebhooks.Webhook

	mu           sync.Mutex
	got          []conformance.ReceivedMessage
	headers      []http.Header
	bodies       [][]byte      // of the batch requests
	batchHeaders []http.Header // of the batch requests
	rejected     int           // requests that failed verification
	changed      chan struct{}
}

func newRecorder(t *testing.T, secret string) *recorder {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	rec := &recorder{wh: wh, changed: make(chan struct{}, 1)}
	rec.Server = httptest.NewServer(http.HandlerFunc(rec.serve))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := rec.wh.Verify(body, r.Header); err != nil || r.Method != http.MethodPost {
		rec.mu.Lock()
		rec.rejected++
		rec.mu.Unlock()
		http.Error(w, "verification failed", http.StatusUnauthorized)
		return
	}
	switch r.URL.Path {
	case "/gone":
		http.Error(w, "no such endpoint", http.StatusNotFound)
		return
	case "/unavailable":
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	if r.Header.Get("Content-Type") == webhook.BatchContentType {
		// A batch: each event's deduplication id is its id, the receiver's inbox key.
		evs, err := webhook.DecodeBatch(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		for _, ev := range evs {
			rec.got = append(rec.got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers,
				Key: ev.PartitionKey, DedupID: ev.ID})
		}
		rec.headers = append(rec.headers, r.Header.Clone())
		rec.bodies = append(rec.bodies, body)
		rec.batchHeaders = append(rec.batchHeaders, r.Header.Clone())
		rec.mu.Unlock()
	} else {
		ev, _, err := webhook.DecodeRequest(r.Header, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rec.mu.Lock()
		rec.got = append(rec.got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers,
			Key: ev.PartitionKey, DedupID: r.Header.Get(webhook.HeaderWebhookID)})
		rec.headers = append(rec.headers, r.Header.Clone())
		rec.mu.Unlock()
	}
	select {
	case rec.changed <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// received waits until at least atLeast requests were recorded or ctx ends.
func (rec *recorder) received(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
	for {
		rec.mu.Lock()
		got := slices.Clone(rec.got)
		rec.mu.Unlock()
		if len(got) >= atLeast {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return got, nil
		case <-rec.changed:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (rec *recorder) rejectedCount() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.rejected
}

func (rec *recorder) batchCount() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.bodies)
}
