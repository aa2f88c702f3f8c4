package webhook_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// batchMsgs are events of every payload kind: compact JSON, JSON with inner whitespace, JSON
// under a text content type, binary, empty; with headers and extensions.
func batchMsgs(dest string) []core.Message {
	ms := []core.Message{msg(dest, "b-1", "order/1"), msg(dest, "b-2", "order/2"), msg(dest, "b-3", "order/1"),
		msg(dest, "b-4", "order/2"), msg(dest, "b-5", "order/1")}
	ms[0].Headers = map[string]string{"content-type": "application/json", "x-region": "eu", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	ms[0].AggregateVersion, ms[0].Tenant = 4, "acme"
	ms[1].Payload = []byte(`{ "spaced" : [1, 2] }`)
	ms[2].Headers = map[string]string{"content-type": "text/plain"}
	ms[2].Payload = []byte(`"quoted text"`)
	ms[3].Payload = []byte{0, 1, 2, 0xff, '"'}
	ms[4].Payload = nil
	return ms
}

// TestBatchRequests: with BatchSize, a Send's events travel in batch requests that the
// Standard Webhooks reference library verifies (webhook-id = BatchID of the events, in order),
// with Content-Type application/cloudevents-batch+json, and that decode back to the events
// byte for byte, in order per key.
func TestBatchRequests(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	rec := newRecorder(t, secret)
	sink := newSink(t, webhook.Options{Secrets: []string{secret}, BatchSize: 2})
	ms := batchMsgs(rec.URL + "/ok")
	for i, err := range sink.Send(context.Background(), ms) {
		require.NoError(t, err, "message %d", i)
	}
	assert.Zero(t, rec.rejectedCount())
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// Two of the Send's five events per request (first fit, per key in order): two batches,
	// and the last event alone.
	require.Len(t, rec.bodies, 2)
	require.Len(t, rec.batchHeaders, 2)
	require.Len(t, rec.headers, 3)
	for i, body := range rec.bodies {
		var arr []map[string]any
		require.NoError(t, json.Unmarshal(body, &arr))
		ids := []string{}
		for _, e := range arr {
			ids = append(ids, e["id"].(string))
		}
		assert.Len(t, ids, 2)
		h := rec.batchHeaders[i]
		assert.Equal(t, webhook.BatchContentType, h.Get("Content-Type"))
		assert.Equal(t, webhook.BatchID(ids), h.Get(webhook.HeaderWebhookID))
	}
	got := map[string]conformance.ReceivedMessage{}
	for _, r := range rec.got {
		got[r.EventID] = r
	}
	require.Len(t, got, len(ms))
	for _, m := range ms {
		g, ok := got[m.ID]
		require.True(t, ok, "event %s not received", m.ID)
		assert.Equal(t, string(m.Payload), string(g.Payload), "payload of %s", m.ID)
		if len(m.Headers) > 0 {
			assert.Equal(t, m.Headers, g.Headers, "headers of %s", m.ID)
		}
	}
	// Per key, in order.
	last := map[string]string{}
	for _, r := range rec.got {
		if prev, ok := last[r.Key]; ok {
			assert.Less(t, prev, r.EventID, "key %s out of order", r.Key)
		}
		last[r.Key] = r.EventID
	}
}

// TestBatchID: the webhook-id of a batch is the documented hash of its event ids, in order.
func TestBatchID(t *testing.T) {
	t.Parallel()
	a := webhook.BatchID([]string{"1", "2"})
	assert.Equal(t, a, webhook.BatchID([]string{"1", "2"}))
	assert.NotEqual(t, a, webhook.BatchID([]string{"2", "1"}))
	assert.NotEqual(t, a, webhook.BatchID([]string{"12"}))
	assert.True(t, strings.HasPrefix(a, "batch_"))
	assert.Len(t, a, len("batch_")+32)
}

// TestCloudEventsSDKReadsBatch: sdk-go's HTTP binding reads a batch request (batched content
// mode) as the events: attributes, extensions, data and data_base64.
func TestCloudEventsSDKReadsBatch(t *testing.T) {
	t.Parallel()
	type result struct {
		ids, cts, subjects []string
		data               [][]byte
		ext                []map[string]any
		err                error
	}
	got := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evs, err := cehttp.NewEventsFromHTTPRequest(r)
		var res result
		res.err = err
		for _, ev := range evs {
			if err := ev.Validate(); err != nil && res.err == nil {
				res.err = err
			}
			res.ids = append(res.ids, ev.ID())
			res.cts = append(res.cts, ev.DataContentType())
			res.subjects = append(res.subjects, ev.Subject())
			res.data = append(res.data, ev.Data())
			res.ext = append(res.ext, ev.Extensions())
		}
		got <- res
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, BatchSize: 10})
	ms := batchMsgs(srv.URL)
	for _, err := range sink.Send(context.Background(), ms) {
		require.NoError(t, err)
	}
	r := <-got
	require.NoError(t, r.err)
	assert.Equal(t, []string{"b-1", "b-2", "b-3", "b-4", "b-5"}, r.ids)
	assert.Equal(t, []string{"application/json", "", "text/plain", "", ""}, r.cts)
	assert.Equal(t, "order/order/1", r.subjects[0]) // AggregateType/AggregateID
	for i, m := range ms[:4] {
		if i == 2 {
			// Text data travels base64 (the payload is not JSON under a JSON type).
			assert.Equal(t, `"quoted text"`, string(r.data[i]))
			continue
		}
		assert.Equal(t, string(m.Payload), string(r.data[i]), "data of %s", m.ID)
	}
	assert.Empty(t, r.data[4])
	assert.Equal(t, "4", r.ext[0]["aggregateversion"])
	assert.Equal(t, "acme", r.ext[0]["tenant"])
	assert.Equal(t, "order/1", r.ext[0]["partitionkey"])
	assert.Equal(t, `{"x-region":"eu"}`, r.ext[0]["outboxheaders"])
	assert.Equal(t, ms[0].Headers["traceparent"], r.ext[0]["traceparent"])
}

// TestBatchOutcomes: a batch's retryable answer is the outcome of every event in it; a
// permanent one sends the events again one request each, so only the event the endpoint
// refuses alone is parked, and the later events of its key are held back.
func TestBatchOutcomes(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		singles []string
		status  = http.StatusServiceUnavailable
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Content-Type") == webhook.BatchContentType {
			w.Header().Set("Retry-After", "3")
			w.WriteHeader(status)
			return
		}
		id := r.Header.Get(webhook.HeaderWebhookID)
		singles = append(singles, id)
		if id == "b-1" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, BatchSize: 10})
	ms := batchMsgs(srv.URL)

	out := sink.Send(context.Background(), ms)
	require.NoError(t, core.CheckOutcomes(ms, out))
	for i, err := range out {
		var se *webhook.StatusError
		require.ErrorAs(t, err, &se, "message %d", i)
		assert.False(t, core.IsPermanent(err))
		assert.Equal(t, 5, se.BatchSize)
		assert.Equal(t, webhook.BatchID([]string{"b-1", "b-2", "b-3", "b-4", "b-5"}), se.EventID)
		assert.Equal(t, 3*time.Second, se.RetryAfter)
	}
	assert.Empty(t, singles)

	mu.Lock()
	status = http.StatusBadRequest
	mu.Unlock()
	out = sink.Send(context.Background(), ms)
	require.NoError(t, core.CheckOutcomes(ms, out))
	// b-1 (key order/1) refused alone: parked; b-3 and b-5 of its key held back; order/2 sent.
	assert.True(t, core.IsPermanent(out[0]), "%v", out[0])
	assert.NoError(t, out[1])
	assert.ErrorIs(t, out[2], core.ErrNotAcknowledged)
	assert.NoError(t, out[3])
	assert.ErrorIs(t, out[4], core.ErrNotAcknowledged)
	assert.Equal(t, []string{"b-1", "b-2", "b-4"}, singles)
}

// TestReceiverBatch: the Handler applies a batch request in one inbox transaction and answers
// 204 after it committed, with the outcome of each event; a digest conflict in the batch is
// 422 and a handler error 500, both with nothing of the batch recorded; an undecodable batch
// is 400; the reference library's signature over the body is what it checks.
func TestReceiverBatch(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	e := newReceiver(t, secret)
	post := func(ids []string, body string) (int, string, string) {
		t.Helper()
		h := http.Header{}
		h.Set("Content-Type", webhook.BatchContentType+"; charset=utf-8")
		h, b := refSigned(t, secret, webhook.BatchID(ids), time.Now(), h, []byte(body))
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/hook", strings.NewReader(string(b)))
		require.NoError(t, err)
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		text, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Outbox-Outcome"), string(text)
	}
	ev := func(id, data string) string {
		return `{"specversion":"1.0","id":"` + id + `","source":"/t","type":"order.placed","aggregatetype":"order",` +
			`"aggregateid":"42","outboxheaders":"{\"x-region\":\"eu\"}","data":` + data + `}`
	}
	code, outcome, text := post([]string{"r-1", "r-2"}, "["+ev("r-1", `{"a":1}`)+","+ev("r-2", `{"a":2}`)+"]")
	require.Equal(t, http.StatusNoContent, code, text)
	assert.Equal(t, "applied, applied", outcome)
	assert.Equal(t, 1, e.store.Counter("r-1"))
	assert.Equal(t, 1, e.store.Counter("r-2"))

	// A resend with a new event: duplicates and one applied.
	code, outcome, _ = post([]string{"r-1", "r-2", "r-3"}, "["+ev("r-1", `{"a":1}`)+","+ev("r-2", `{"a":2}`)+","+ev("r-3", `{"a":3}`)+"]")
	require.Equal(t, http.StatusNoContent, code)
	assert.Equal(t, "duplicate, duplicate, applied", outcome)
	assert.Equal(t, 1, e.store.Counter("r-1"))
	assert.Equal(t, 1, e.store.Counter("r-3"))

	// A digest conflict (r-1 with another payload) refuses the whole batch: r-4 not recorded.
	code, _, text = post([]string{"r-4", "r-1"}, "["+ev("r-4", `{"a":4}`)+","+ev("r-1", `{"a":"other"}`)+"]")
	assert.Equal(t, http.StatusUnprocessableEntity, code, text)
	assert.Equal(t, 0, e.store.Counter("r-4"))

	// A handler error: 500, nothing recorded; once it passes, applied.
	e.fail.Store(true)
	code, _, _ = post([]string{"r-5"}, "["+ev("r-5", `{"a":5}`)+"]")
	assert.Equal(t, http.StatusInternalServerError, code)
	e.fail.Store(false)
	assert.Equal(t, 0, e.store.Counter("r-5"))
	code, outcome, _ = post([]string{"r-5"}, "["+ev("r-5", `{"a":5}`)+"]")
	assert.Equal(t, http.StatusNoContent, code)
	assert.Equal(t, "applied", outcome)

	// Undecodable: not an array, an event without its type, data_base64 not base64.
	for _, body := range []string{`{"id":"x"}`, `[{"specversion":"1.0","id":"r-6","aggregatetype":"o","aggregateid":"1"}]`,
		"[" + strings.Replace(ev("r-7", `1`), `"data":1`, `"data_base64":"%%%"`, 1) + "]", `[{"specversion":"1.0","id":{}}]`} {
		code, _, text = post([]string{"x"}, body)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", body, text)
	}
	assert.Equal(t, 0, e.store.Counter("r-7"))

	// Signed with another secret: 401.
	other := newSecret(t)
	h := http.Header{}
	h.Set("Content-Type", webhook.BatchContentType)
	h, b := refSigned(t, other, "x", time.Now(), h, []byte("["+ev("r-8", `1`)+"]"))
	code, _ = e.post(t, http.MethodPost, h, b)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, 0, e.store.Counter("r-8"))
}

// TestSinkToReceiverBatch: the Sink in batch mode to the Handler, end to end: every event
// applied once, in one request per batch.
func TestSinkToReceiverBatch(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	e := newReceiver(t, secret)
	sink := newSink(t, webhook.Options{Secrets: []string{secret}, BatchSize: 3})
	ms := batchMsgs(e.srv.URL + "/hook")
	for i, err := range sink.Send(context.Background(), ms) {
		require.NoError(t, err, "message %d", i)
	}
	for _, m := range ms {
		assert.Equal(t, 1, e.store.Counter(m.ID), "event %s", m.ID)
	}
	st := e.rc.Stats()
	assert.Equal(t, uint64(5), st.Applied)
	assert.Zero(t, st.Refused+st.Failed)
}
