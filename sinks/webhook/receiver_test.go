package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// receiverEnv is a Handler on the in-memory inbox behind an httptest server; its handler
// increments the counter named by the event ID, and fails while fail is set.
type receiverEnv struct {
	store *memory.Store
	rc    *webhook.Receiver[*memory.Tx]
	srv   *httptest.Server
	fail  atomic.Bool
	calls atomic.Int64
}

func newReceiver(t *testing.T, secrets ...string) *receiverEnv {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	e := &receiverEnv{store: store}
	e.rc, err = webhook.NewHandler(inbox, "receiver-test", func(ctx context.Context, tx *memory.Tx, d *webhook.Delivery) error {
		e.calls.Add(1)
		if e.fail.Load() {
			return errors.New("handler says no")
		}
		return tx.Incr(d.Event.ID)
	}, &webhook.HandlerOptions{Secrets: secrets, Logger: quiet()})
	require.NoError(t, err)
	e.srv = httptest.NewServer(e.rc)
	t.Cleanup(e.srv.Close)
	return e
}

// ceHeaders are the CloudEvents headers of event id, written by hand (not by the Sink).
func ceHeaders(id string) http.Header {
	h := http.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", id)
	h.Set("ce-source", "/test")
	h.Set("ce-type", "order.placed")
	h.Set("ce-aggregatetype", "order")
	h.Set("ce-aggregateid", "42")
	h.Set("Content-Type", "application/json")
	h.Set("Outbox-H-X-Region", "eu")
	return h
}

// refSigned is a request signed by the Standard Webhooks reference library with secret, at
// ts, for webhook-id id.
func refSigned(t *testing.T, secret, id string, ts time.Time, h http.Header, body []byte) (http.Header, []byte) {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	sig, err := wh.Sign(id, ts, body)
	require.NoError(t, err)
	h = h.Clone()
	h.Set(standardwebhooks.HeaderWebhookID, id)
	h.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(ts.Unix()))
	h.Set(standardwebhooks.HeaderWebhookSignature, sig)
	return h, body
}

func (e *receiverEnv) post(t *testing.T, method string, h http.Header, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+"/hook", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReceiverVerifiesReferenceSignatures: requests signed by the reference library (with any
// of the handler's secrets) are applied once; every tampered, unsigned, badly timed or
// undecodable request is refused and applies nothing.
func TestReceiverVerifiesReferenceSignatures(t *testing.T) {
	t.Parallel()
	oldSecret, newSecretV := newSecret(t), newSecret(t)
	e := newReceiver(t, oldSecret, newSecretV)
	body := []byte(`{"total":1250}`)
	now := time.Now()

	for i, secret := range []string{oldSecret, newSecretV} {
		id := fmt.Sprintf("ref-%d", i)
		code, _ := e.post(t, http.MethodPost, nil, nil)
		require.Equal(t, http.StatusUnauthorized, code) // nothing signed
		h, b := refSigned(t, secret, id, now, ceHeaders(id), body)
		code, text := e.post(t, http.MethodPost, h, b)
		require.Equal(t, http.StatusNoContent, code, text)
		assert.Equal(t, 1, e.store.Counter(id))
		code, _ = e.post(t, http.MethodPost, h, b) // a resend: a duplicate, acknowledged
		require.Equal(t, http.StatusNoContent, code)
		assert.Equal(t, 1, e.store.Counter(id))
	}

	other := newSecret(t)
	for _, c := range []struct {
		name string
		req  func() (http.Header, []byte)
		code int
	}{
		{"unknown-secret", func() (http.Header, []byte) { return refSigned(t, other, "x1", now, ceHeaders("x1"), body) }, 401},
		{"tampered-body", func() (http.Header, []byte) {
			h, _ := refSigned(t, oldSecret, "x2", now, ceHeaders("x2"), body)
			return h, []byte(`{"total":1}`)
		}, 401},
		{"other-id", func() (http.Header, []byte) {
			h, b := refSigned(t, oldSecret, "x3", now, ceHeaders("x3"), body)
			h.Set("webhook-id", "x3-other")
			return h, b
		}, 401},
		{"too-old", func() (http.Header, []byte) {
			return refSigned(t, oldSecret, "x4", now.Add(-6*time.Minute), ceHeaders("x4"), body)
		}, 401},
		{"too-new", func() (http.Header, []byte) {
			return refSigned(t, oldSecret, "x5", now.Add(6*time.Minute), ceHeaders("x5"), body)
		}, 401},
		{"no-signature", func() (http.Header, []byte) {
			h, b := refSigned(t, oldSecret, "x6", now, ceHeaders("x6"), body)
			h.Del("webhook-signature")
			return h, b
		}, 401},
		{"ce-id-not-webhook-id", func() (http.Header, []byte) { return refSigned(t, oldSecret, "x7", now, ceHeaders("x7-other"), body) }, 400},
		{"no-ce-headers", func() (http.Header, []byte) { return refSigned(t, oldSecret, "x8", now, http.Header{}, body) }, 400},
		{"bad-specversion", func() (http.Header, []byte) {
			h := ceHeaders("x9")
			h.Set("ce-specversion", "0.3")
			return refSigned(t, oldSecret, "x9", now, h, body)
		}, 400},
		{"too-large", func() (http.Header, []byte) {
			return refSigned(t, oldSecret, "x10", now, ceHeaders("x10"), bytes.Repeat([]byte("x"), webhook.DefaultMaxBodyBytes+1))
		}, 413},
	} {
		h, b := c.req()
		code, text := e.post(t, http.MethodPost, h, b)
		assert.Equal(t, c.code, code, "%s: %s", c.name, text)
	}
	h, b := refSigned(t, oldSecret, "get", now, ceHeaders("get"), body)
	code, _ := e.post(t, http.MethodGet, h, b)
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.Equal(t, int64(2), e.calls.Load(), "the handler ran for a refused request")
	st := e.rc.Stats()
	assert.Equal(t, uint64(2), st.Applied)
	assert.Equal(t, uint64(2), st.Duplicate)
}

// TestReceiverOutcomes: a handler error is a 5xx with no effect (the Sink retries); the resend
// applies once; a digest conflict is a 422 (the Sink parks it) without running the handler.
func TestReceiverOutcomes(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	e := newReceiver(t, secret)
	sink := newSink(t, webhook.Options{Secrets: []string{secret}})
	m := msg(e.srv.URL+"/hook", "out-1", "k")

	e.fail.Store(true)
	err := sink.Send(context.Background(), []core.Message{m})[0]
	var se *webhook.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusInternalServerError, se.StatusCode)
	assert.False(t, core.IsPermanent(err))
	assert.NotContains(t, se.Body, "handler says no", "the handler's error text reached the sender")
	assert.Equal(t, 0, e.store.Counter(m.ID))

	e.fail.Store(false)
	h, b := refSigned(t, secret, "outcome-header", time.Now(), ceHeaders("outcome-header"), []byte("{}"))
	req, err := http.NewRequest(http.MethodPost, e.srv.URL, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header = h
	for _, want := range []string{"applied", "duplicate"} {
		resp, err := http.DefaultClient.Do(req.Clone(context.Background()))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.Header.Get("Outbox-Outcome"))
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	assert.Equal(t, 1, e.store.Counter(m.ID))
	assert.Equal(t, int64(3), e.calls.Load())

	conflict := m
	conflict.Payload = []byte("another payload")
	err = sink.Send(context.Background(), []core.Message{conflict})[0]
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusUnprocessableEntity, se.StatusCode)
	assert.True(t, core.IsPermanent(err))
	assert.Equal(t, 1, e.store.Counter(m.ID))
	assert.Equal(t, int64(3), e.calls.Load(), "the handler ran for the conflicting payload")
	st := e.rc.Stats()
	assert.Equal(t, webhook.ReceiverStats{Applied: 2, Duplicate: 2, Refused: 1, Failed: 1}, st)
}

// TestSinkVerifiedByReference: what the Sink sends verifies with the reference library under
// each of its secrets, and the ce- headers carry the event.
func TestSinkVerifiedByReference(t *testing.T) {
	t.Parallel()
	s1, s2 := newSecret(t), newSecret(t)
	rec := newRecorder(t, s2)
	sink := newSink(t, webhook.Options{Secrets: []string{s1, s2}, Source: "/shop", ContentType: "application/json"})
	m := msg(rec.URL+"/ok", "ref-check", "order/7")
	m.AggregateVersion = 3
	m.Headers = map[string]string{"X-Region": "eu-west-1", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	require.Equal(t, 0, rec.rejectedCount())
	rec.mu.Lock()
	h := rec.headers[0]
	got := rec.got[0]
	rec.mu.Unlock()
	sigs := strings.Fields(h.Get("webhook-signature"))
	require.Len(t, sigs, 2, "one signature per secret")
	// Each secret alone verifies the request.
	for _, s := range []string{s1, s2} {
		wh, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(m.Payload, h))
	}
	assert.Equal(t, "ref-check", h.Get("webhook-id"))
	assert.InDelta(t, time.Now().Unix(), mustInt(t, h.Get("webhook-timestamp")), 5)
	assert.Equal(t, "1.0", h.Get("ce-specversion"))
	assert.Equal(t, "/shop", h.Get("ce-source"))
	assert.Equal(t, "order.placed", h.Get("ce-type"))
	assert.Equal(t, "3", h.Get("ce-aggregateversion"))
	assert.Equal(t, "order/7", h.Get("ce-partitionkey"))
	assert.Equal(t, "application/json", h.Get("Content-Type"))
	assert.Equal(t, m.Headers["traceparent"], h.Get("ce-traceparent"))
	assert.Equal(t, "eu-west-1", h.Get("Outbox-H-X-Region"))
	// Other headers' names come back lowercased.
	assert.Equal(t, map[string]string{"x-region": "eu-west-1", "traceparent": m.Headers["traceparent"], "content-type": "application/json"}, got.Headers)
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	_, err := fmt.Sscan(s, &n)
	require.NoError(t, err)
	return n
}

func TestHandlerOptionErrors(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	h := func(context.Context, *memory.Tx, *webhook.Delivery) error { return nil }
	good := newSecret(t)
	for _, c := range []struct {
		inbox    *core.Inbox[*memory.Tx]
		consumer string
		handler  webhook.Handler[*memory.Tx]
		o        *webhook.HandlerOptions
		field    string
	}{
		{nil, "c", h, &webhook.HandlerOptions{Secrets: []string{good}}, "inbox"},
		{inbox, "", h, &webhook.HandlerOptions{Secrets: []string{good}}, "consumer"},
		{inbox, "c", nil, &webhook.HandlerOptions{Secrets: []string{good}}, "handler"},
		{inbox, "c", h, nil, "Secrets"},
		{inbox, "c", h, &webhook.HandlerOptions{Secrets: []string{"whsec_%%%"}}, "Secrets[0]"},
		{inbox, "c", h, &webhook.HandlerOptions{Secrets: []string{good}, Tolerance: -1}, "Tolerance"},
		{inbox, "c", h, &webhook.HandlerOptions{Secrets: []string{good}, MaxBodyBytes: -1}, "MaxBodyBytes"},
	} {
		_, err := webhook.NewHandler(c.inbox, c.consumer, c.handler, c.o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, c.field)
		assert.Equal(t, c.field, oe.Field)
	}
}

// TestReceiverSenderGivesUp: the sender's timeout ends the request while the handler's
// transaction is open: the transaction rolls back (no effect), the sender sees a retryable
// failure, and its resend applies the event once.
func TestReceiverSenderGivesUp(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	var block atomic.Bool
	block.Store(true)
	rolledBack := make(chan struct{}, 1)
	rc, err := webhook.NewHandler(inbox, "receiver-test", func(ctx context.Context, tx *memory.Tx, d *webhook.Delivery) error {
		if err := tx.Incr(d.Event.ID); err != nil {
			return err
		}
		if block.Load() {
			<-ctx.Done() // the sender hung up
			rolledBack <- struct{}{}
			return ctx.Err()
		}
		return nil
	}, &webhook.HandlerOptions{Secrets: []string{secret}, Logger: quiet()})
	require.NoError(t, err)
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{secret}, Timeout: 200 * time.Millisecond})
	m := msg(srv.URL, "gives-up", "k")
	err = sink.Send(context.Background(), []core.Message{m})[0]
	require.Error(t, err)
	assert.False(t, core.IsPermanent(err), "a timeout is retryable: %v", err)
	select {
	case <-rolledBack:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled when the sender hung up")
	}
	require.Eventually(t, func() bool { return rc.Stats().Failed == 1 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 0, store.Counter(m.ID), "the effect of an unacknowledged request was committed")
	block.Store(false)
	require.NoError(t, sink.Send(context.Background(), []core.Message{m})[0])
	assert.Equal(t, 1, store.Counter(m.ID))
}

// TestSinkRedactsQuery: a token in the destination's query does not reach the error.
func TestSinkRedactsQuery(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // connection refused
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}})
	err := sink.Send(context.Background(), []core.Message{msg(url+"/hook?token=s3cret", "redact", "k")})[0]
	require.Error(t, err)
	assert.False(t, core.IsPermanent(err))
	assert.NotContains(t, err.Error(), "s3cret")
}
