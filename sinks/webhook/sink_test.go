package webhook_test

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/webhook"
)

func msg(dest, id, key string) core.Message {
	return core.Message{
		Record: driver.Record{Event: core.Event{ID: id, Type: "order.placed", AggregateType: "order", AggregateID: key,
			PartitionKey: key, Payload: []byte(`{"id":"` + id + `"}`)}, CreatedAt: time.Now()},
		Destination: dest, DedupID: id, GroupID: key,
	}
}

// TestOutcomeByStatus: how each answer (or its absence) classifies, and that a redirect is not
// followed.
func TestOutcomeByStatus(t *testing.T) {
	t.Parallel()
	var followed sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/target":
			followed.Store(r.Header.Get(webhook.HeaderWebhookID), true)
			w.WriteHeader(http.StatusOK)
		case "/301":
			http.Redirect(w, r, "/target", http.StatusMovedPermanently)
		case "/429":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/503":
			w.Header().Set("Retry-After", time.Now().Add(90*time.Second).UTC().Format(http.TimeFormat))
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
		case "/slow":
			select {
			case <-time.After(5 * time.Second):
			case <-r.Context().Done():
			}
		case "/close":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		default:
			var code int
			_, _ = fmt.Sscanf(r.URL.Path, "/%d", &code)
			w.WriteHeader(code)
		}
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, Timeout: 300 * time.Millisecond})
	const (
		ack = iota
		retryable
		permanent
	)
	for _, c := range []struct {
		path       string
		want       int
		status     int // of the StatusError; 0: none
		retryAfter time.Duration
	}{
		{"/200", ack, 0, 0},
		{"/204", ack, 0, 0},
		{"/301", permanent, 301, 0},
		{"/400", permanent, 400, 0},
		{"/404", permanent, 404, 0},
		{"/408", retryable, 408, 0},
		{"/409", retryable, 409, 0},
		{"/425", retryable, 425, 0},
		{"/429", retryable, 429, 7 * time.Second},
		{"/500", retryable, 500, 0},
		{"/503", retryable, 503, 90 * time.Second},
		{"/slow", retryable, 0, 0},
		{"/close", retryable, 0, 0},
	} {
		t.Run(c.path[1:], func(t *testing.T) {
			t.Parallel()
			id := "ev" + c.path[1:]
			start := time.Now()
			err := sink.Send(context.Background(), []core.Message{msg(srv.URL+c.path, id, "k")})[0]
			switch c.want {
			case ack:
				require.NoError(t, err)
				return
			case retryable:
				require.Error(t, err)
				assert.False(t, core.IsPermanent(err), "want retryable, got %v", err)
			case permanent:
				require.Error(t, err)
				assert.True(t, core.IsPermanent(err), "want permanent, got %v", err)
			}
			var se *webhook.StatusError
			if c.status == 0 {
				assert.False(t, errors.As(err, &se), "no status expected, got %v", err)
				assert.Less(t, time.Since(start), 3*time.Second, "the request timeout did not cut the request short")
				return
			}
			require.ErrorAs(t, err, &se)
			assert.Equal(t, c.status, se.StatusCode)
			assert.Equal(t, id, se.EventID)
			assert.InDelta(t, c.retryAfter.Seconds(), se.RetryAfter.Seconds(), 2)
			assert.Equal(t, c.want == retryable, se.Retryable())
		})
	}
	t.Run("redirect-not-followed", func(t *testing.T) {
		t.Parallel()
		_ = sink.Send(context.Background(), []core.Message{msg(srv.URL+"/301", "ev-redirect", "r")})
		_, ok := followed.Load("ev-redirect")
		assert.False(t, ok, "the redirect was followed")
	})
}

// TestRefusedBeforeSending: messages the sink refuses without a request are permanent, and
// hold back the later messages of their key.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store(r.Header.Get(webhook.HeaderWebhookID), true)
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, MaxBodyBytes: 40})
	big := msg(srv.URL, "big", "a")
	big.Payload = []byte(strings.Repeat("x", 41))
	badName := msg(srv.URL, "bad-name", "b")
	badName.Headers = map[string]string{"has space": "v"}
	badValue := msg(srv.URL, "bad-value", "c")
	badValue.Headers = map[string]string{"x": "line\nbreak"}
	padded := msg(srv.URL, "padded", "d")
	padded.Headers = map[string]string{"x": " padded"}
	badType := msg(srv.URL, "bad-type", "e")
	badType.Type = "a\r\nInjected: yes"
	noURL := msg("orders", "no-url", "f")
	folded := msg(srv.URL, "folded", "i")
	folded.Headers = map[string]string{"X-Region": "eu", "x-region": "us"}
	ftp := msg("ftp://example.invalid/x", "ftp", "g")
	after := msg(srv.URL, "after-big", "a")
	fine := msg(srv.URL, "fine", "h")
	fine.Payload = []byte(strings.Repeat("x", 40))
	out := sink.Send(context.Background(), []core.Message{big, badName, badValue, padded, badType, noURL, ftp, after, fine, folded})
	require.Len(t, out, 10)
	for i, want := range []error{webhook.ErrMessageTooLarge, webhook.ErrUnsendableHeader, webhook.ErrUnsendableHeader,
		webhook.ErrUnsendableHeader, webhook.ErrUnsendableHeader, core.ErrUnknownDestination, core.ErrUnknownDestination} {
		assert.ErrorIs(t, out[i], want, "message %d", i)
		assert.True(t, core.IsPermanent(out[i]), "message %d: %v", i, out[i])
	}
	assert.Error(t, out[7], "a later message of the oversize message's key was acknowledged")
	assert.NoError(t, out[8])
	assert.ErrorIs(t, out[9], webhook.ErrUnsendableHeader)
	assert.True(t, core.IsPermanent(out[9]))
	assert.NoError(t, core.CheckOutcomes([]core.Message{big, badName, badValue, padded, badType, noURL, ftp, after, fine, folded}, out))
	n := 0
	hits.Range(func(k, _ any) bool { n++; assert.Equal(t, "fine", k); return true })
	assert.Equal(t, 1, n)
}

// TestConcurrency: several requests in flight per Send, never two of one key; per key in order.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		total    int
		maxTotal int
		overlap  bool
		order    = map[string][]string{}
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(webhook.HeaderPartitionKey)
		mu.Lock()
		inFlight[key]++
		total++
		maxTotal = max(maxTotal, total)
		overlap = overlap || inFlight[key] > 1
		order[key] = append(order[key], r.Header.Get(webhook.HeaderWebhookID))
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		mu.Lock()
		inFlight[key]--
		total--
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	sink := newSink(t, webhook.Options{Secrets: []string{newSecret(t)}, Concurrency: 4})
	var msgs []core.Message
	for i := range 5 {
		for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
			msgs = append(msgs, msg(srv.URL, fmt.Sprintf("%s%d", k, i), k))
		}
	}
	for i, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err, "message %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.False(t, overlap, "two requests of one key were in flight at once")
	assert.Greater(t, maxTotal, 1, "never more than one request in flight")
	assert.LessOrEqual(t, maxTotal, 4, "more requests in flight than Options.Concurrency")
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		assert.Equal(t, []string{k + "0", k + "1", k + "2", k + "3", k + "4"}, order[k])
	}
}

// TestCAFile: an https endpoint whose certificate the system does not trust is reached with
// Options.CAFile, and not without it.
func TestCAFile(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	t.Cleanup(srv.Close)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))
	secret := newSecret(t)
	with := newSink(t, webhook.Options{Secrets: []string{secret}, CAFile: caFile})
	require.NoError(t, with.Send(context.Background(), []core.Message{msg(srv.URL, "tls", "k")})[0])
	without := newSink(t, webhook.Options{Secrets: []string{secret}})
	err := without.Send(context.Background(), []core.Message{msg(srv.URL, "tls", "k")})[0]
	require.Error(t, err)
	assert.Contains(t, err.Error(), "certificate")
}

func TestOptionErrors(t *testing.T) {
	t.Parallel()
	good := newSecret(t)
	noPEM := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(noPEM, []byte("nothing"), 0o600))
	for _, c := range []struct {
		o     webhook.Options
		field string
	}{
		{webhook.Options{}, "Secrets"},
		{webhook.Options{Secrets: []string{good, "whsec_not base64!"}}, "Secrets[1]"},
		{webhook.Options{Secrets: []string{"whsec_"}}, "Secrets[0]"},
		{webhook.Options{Secrets: []string{good}, Concurrency: -1}, "Concurrency"},
		{webhook.Options{Secrets: []string{good}, Source: "a\nb"}, "Source"},
		{webhook.Options{Secrets: []string{good}, ContentType: " text/plain"}, "ContentType"},
		{webhook.Options{Secrets: []string{good}, MaxBodyBytes: -1}, "MaxBodyBytes"},
		{webhook.Options{Secrets: []string{good}, Timeout: -time.Second}, "Timeout"},
		{webhook.Options{Secrets: []string{good}, CAFile: filepath.Join(t.TempDir(), "missing.pem")}, "CAFile"},
		{webhook.Options{Secrets: []string{good}, CAFile: noPEM}, "CAFile"},
	} {
		_, err := webhook.New(c.o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%+v", c.o)
		assert.Equal(t, c.field, oe.Field)
		assert.ErrorIs(t, err, core.ErrInvalidOptions)
	}
}
