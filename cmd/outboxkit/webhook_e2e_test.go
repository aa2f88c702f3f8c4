package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
)

// The daemon with sink webhook posting to an httptest endpoint that verifies every request
// with the Standard Webhooks reference library: graceful restarts under traffic resend nothing.
func TestDaemonWebhook(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), webhookE2ESink(t, 0), 3, 0)
}

// The same in batch mode (sinks.webhook.batch_size): each request is a signed CloudEvents
// batch, counted per event id.
func TestDaemonWebhookBatch(t *testing.T) {
	t.Parallel()
	runDaemonE2E(t, sqliteBackend(t), webhookE2ESink(t, 16), 3, 0)
}

// Daemons killed with SIGKILL mid-traffic lose nothing: the last one delivers every event.
func TestDaemonWebhookKill(t *testing.T) {
	t.Parallel()
	runDaemonKillE2E(t, sqliteBackend(t), webhookE2ESink(t, 0), 2)
}

// webhookE2ESink is an endpoint that counts the verified requests by webhook-id (every
// request, duplicates included) and answers 401 to a request it cannot verify, which the
// daemon would park: an event lost from the count. With batch > 0 the daemon sends batches of
// up to batch events (application/cloudevents-batch+json), counted by each event's id.
func webhookE2ESink(t *testing.T, batch int) e2eSink {
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	var (
		mu  sync.Mutex
		got = map[string]int{}
		bad int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err == nil {
			err = wh.Verify(body, r.Header)
		}
		ids := []string{r.Header.Get("webhook-id")}
		switch {
		case err != nil:
		case batch > 0:
			var events []struct {
				ID string `json:"id"`
			}
			if ct := r.Header.Get("Content-Type"); ct != "application/cloudevents-batch+json" {
				err = fmt.Errorf("content type %q in batch mode", ct)
			} else if err = json.Unmarshal(body, &events); err == nil && (len(events) == 0 || len(events) > batch) {
				err = fmt.Errorf("a batch of %d events (batch_size %d)", len(events), batch)
			}
			ids = ids[:0]
			for _, e := range events {
				ids = append(ids, e.ID)
			}
		case r.Header.Get("ce-id") != r.Header.Get("webhook-id"):
			err = fmt.Errorf("ce-id %q is not webhook-id %q", r.Header.Get("ce-id"), r.Header.Get("webhook-id"))
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			bad++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		for _, id := range ids {
			got[id]++
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return e2eSink{
		config: fmt.Sprintf("sink: webhook\nsinks:\n  webhook:\n    secrets: [%q]\n    source: /daemon-e2e\n    timeout: 5s\n    batch_size: %d\nroutes:\n  default: %s/events\n",
			secret, batch, srv.URL),
		receive: func(t *testing.T, want int) map[string]int {
			// The last daemon stopped: everything it acknowledged was answered already. A quiet
			// moment shows there is no late request.
			time.Sleep(500 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			require.Zero(t, bad, "requests the reference library could not verify")
			return maps.Clone(got)
		},
	}
}
