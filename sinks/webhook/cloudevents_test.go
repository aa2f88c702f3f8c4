package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// TestCloudEventsSDKReadsRequests: sdk-go's HTTP binding reads what the sink posts as a
// CloudEvent (binary content mode): attributes, extensions and data.
func TestCloudEventsSDKReadsRequests(t *testing.T) {
	t.Parallel()
	type result struct {
		id, source, typ, subject, ct string
		ext                          map[string]any
		data                         []byte
		at                           time.Time
		err                          error
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			got <- result{err: err}
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- result{id: ev.ID(), source: ev.Source(), typ: ev.Type(), subject: ev.Subject(), ct: ev.DataContentType(),
			ext: ev.Extensions(), data: ev.Data(), at: ev.Time()}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, Source: "/shop/orders"})
	m := msg(srv.URL, "sdk-1", "order/9")
	m.AggregateID, m.AggregateVersion, m.Tenant = "9", 4, "acme"
	m.CreatedAt = time.Date(2026, 12, 5, 8, 4, 6, 1663000, time.UTC)
	m.Headers = map[string]string{"content-type": "application/json", "x-region": "eu"}
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, "sdk-1", r.id)
	assert.Equal(t, "/shop/orders", r.source)
	assert.Equal(t, "order.placed", r.typ)
	assert.Equal(t, "order/9", r.subject)
	assert.Equal(t, "application/json", r.ct)
	assert.True(t, m.CreatedAt.Equal(r.at), "time %v, want %v", r.at, m.CreatedAt)
	assert.Equal(t, string(m.Payload), string(r.data))
	assert.Equal(t, "order", r.ext["aggregatetype"])
	assert.Equal(t, "9", r.ext["aggregateid"])
	assert.Equal(t, "4", r.ext["aggregateversion"])
	assert.Equal(t, "order/9", r.ext["partitionkey"])
	assert.Equal(t, "acme", r.ext["tenant"])
}
