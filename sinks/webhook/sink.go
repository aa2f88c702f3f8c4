package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// DefaultSource is the default ce-source.
const DefaultSource = "outboxkit"

// Defaults of Options.
const (
	DefaultConcurrency  = 8
	DefaultTimeout      = 10 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	// DefaultBatchMaxBytes is the default Options.BatchMaxBytes: the Handler's default
	// HandlerOptions.MaxBodyBytes, so that a default receiver takes every batch.
	DefaultBatchMaxBytes = DefaultMaxBodyBytes
)

// maxErrorBody is the most bytes of an answer's body kept in a StatusError; maxDrain the most
// read (and discarded) so that the connection can be reused.
const (
	maxErrorBody = 256
	maxDrain     = 64 << 10
)

// Options configures a Sink.
type Options struct {
	// Secrets are the signing secrets, each "whsec_" followed by the standard base64 of the
	// key (the Standard Webhooks format; the prefix may be left out). Every request carries one
	// v1 signature per secret, so a receiver that knows any of them verifies it: to rotate,
	// add the new secret, update the receivers, then remove the old one. Required.
	Secrets []string
	// Source is the CloudEvents source (ce-source) of every request, a URI reference.
	// Default DefaultSource.
	Source string
	// ContentType is the Content-Type of requests whose event has no "content-type" header.
	// Default "": no Content-Type header.
	ContentType string
	// Concurrency is the most requests one Send call has in flight (never two of one partition
	// key). Default DefaultConcurrency.
	Concurrency int
	// Timeout bounds each request, from sending to reading the answer: past it the message is
	// not acknowledged (retryable). Default DefaultTimeout.
	Timeout time.Duration
	// MaxBodyBytes is the largest payload sent: a larger one fails permanently with
	// ErrMessageTooLarge. Default DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int
	// BatchSize turns batch mode on when it is 2 or more: a request carries up to BatchSize
	// events of one destination in the CloudEvents HTTP binding's batched content mode
	// (Content-Type BatchContentType, the body a JSON array of events), signed over the whole
	// body with webhook-id = BatchID of its event IDs. The endpoint's answer is the outcome of
	// every event in the request. A batch that would hold one event (the last of a Send, or
	// one larger than BatchMaxBytes) is sent as a single-event request, as without batch mode.
	// The receiver must accept batches (the Handler does). Default 0 (and 1): off, one request
	// per event.
	BatchSize int
	// BatchMaxBytes bounds the body of a batch request (the sum of its events' JSON): an event
	// that would take a batch past it goes to another request. Only with BatchSize >= 2.
	// Default DefaultBatchMaxBytes (1 MiB).
	BatchMaxBytes int
	// CAFile is a PEM file of the certificate authorities that sign the endpoints' certificates
	// (https destinations). Default "": the system's.
	CAFile string
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Sink posts each message to its destination, an http or https URL: core.Message.Destination,
// chosen by the relay's core.Router from trusted configuration, never from the payload. It is
// safe for concurrent use.
type Sink struct {
	o      Options
	keys   [][]byte
	client *http.Client
	log    *slog.Logger
	now    func() time.Time
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink. A missing or malformed secret, a negative number or an unreadable
// CAFile is a *core.OptionError naming the field.
func New(opts Options) (*Sink, error) {
	o := opts
	keys, err := parseSecrets("Secrets", o.Secrets)
	if err != nil {
		return nil, err
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	for name, v := range map[string]string{"Source": o.Source, "ContentType": o.ContentType} {
		if !validHeaderValue(v) {
			return nil, &core.OptionError{Field: name, Reason: "must be a valid HTTP header value (no control character, no leading or trailing whitespace)"}
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"Concurrency", &o.Concurrency, DefaultConcurrency}, {"MaxBodyBytes", &o.MaxBodyBytes, DefaultMaxBodyBytes},
		{"BatchSize", &o.BatchSize, 1}, {"BatchMaxBytes", &o.BatchMaxBytes, DefaultBatchMaxBytes}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			return nil, &core.OptionError{Field: f.name, Reason: "must not be negative"}
		}
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	case o.Timeout < 0:
		return nil, &core.OptionError{Field: "Timeout", Reason: "must not be negative"}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The sink is shared by every relay of a process: keep as many idle connections per
	// endpoint as the transport keeps in all, not Go's default 2.
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConns, o.Concurrency)
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, &core.OptionError{Field: "CAFile", Reason: err.Error()}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &core.OptionError{Field: "CAFile", Reason: "no PEM certificate in " + o.CAFile}
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	client := &http.Client{
		Transport: tr,
		// A redirect is not followed: the destination is the configured URL, and a 3xx is
		// permanent (fix the route).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return &Sink{o: o, keys: keys, client: client, log: log, now: time.Now}, nil
}

// Close closes the idle connections. The sink must not be used after.
func (s *Sink) Close() { s.client.CloseIdleConnections() }

// Send implements core.Sink: one POST per message (or per batch, with Options.BatchSize), up
// to Options.Concurrency at once, never two of one partition key at once; per key, a message
// is sent only after the previous one was acknowledged (2xx). See the package documentation
// for the outcome of each answer.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	batch := s.o.BatchSize > 1
	items := make([]batcher.Item, len(msgs))
	reqs := make([]http.Header, len(msgs))
	var (
		buf  bytes.Buffer
		ends []int // batch mode: the end of each message's JSON in buf
	)
	if batch {
		ends = make([]int, len(msgs))
	}
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination, Size: len(m.Payload)}
		h, err := s.prepare(m)
		if err != nil {
			items[i].Err = err
		}
		reqs[i] = h
		if batch {
			if err == nil {
				start := buf.Len()
				encodeEvent(&buf, m, s.o.Source, s.o.ContentType)
				items[i].Size = buf.Len() - start + 1 // and a comma
			}
			ends[i] = buf.Len()
		}
	}
	o := batcher.Options{MaxEntries: 1, Concurrency: s.o.Concurrency}
	if batch {
		o.MaxEntries, o.MaxBytes = s.o.BatchSize, s.o.BatchMaxBytes
	}
	return batcher.Run(ctx, items, o, func(ctx context.Context, dest string, idx []int) []error {
		out := make([]error, len(idx))
		if len(idx) > 1 {
			err := s.postBatch(ctx, dest, msgs, idx, buf.Bytes(), ends)
			if !core.IsPermanent(err) {
				for k := range out {
					out[k] = err
				}
				return out
			}
			// The endpoint refused the batch for good: send its events again one request
			// each, so that only those it refuses on their own are parked.
			s.log.Warn("webhook_batch_refused_sending_singly", "destination", redact(dest), "events", len(idx), "error", err)
		}
		failed := map[string]bool{}
		for k, i := range idx {
			m := &msgs[i]
			if failed[m.GroupID] {
				out[k] = core.ErrNotAcknowledged // behind a failure of its key: sent again later
				continue
			}
			out[k] = s.post(ctx, m.Destination, m.ID, 0, reqs[i].Clone(), m.Payload)
			if out[k] != nil {
				failed[m.GroupID] = true
			}
		}
		return out
	})
}

// postBatch sends the messages idx of msgs to dest in one batch request; the JSON of msgs[i] is
// all[ends[i-1]:ends[i]].
func (s *Sink) postBatch(ctx context.Context, dest string, msgs []core.Message, idx []int, all []byte, ends []int) error {
	ids := make([]string, len(idx))
	n := 1
	for k, i := range idx {
		ids[k] = msgs[i].ID
		n += ends[i] - start(ends, i) + 1
	}
	body := make([]byte, 0, n)
	body = append(body, '[')
	for k, i := range idx {
		if k > 0 {
			body = append(body, ',')
		}
		body = append(body, all[start(ends, i):ends[i]]...)
	}
	body = append(body, ']')
	id := BatchID(ids)
	h := http.Header{}
	h.Set("Content-Type", BatchContentType)
	h.Set(HeaderWebhookID, id)
	return s.post(ctx, dest, id, len(idx), h, body)
}

func start(ends []int, i int) int {
	if i == 0 {
		return 0
	}
	return ends[i-1]
}

// prepare checks m and returns its headers but the signature's.
func (s *Sink) prepare(m *core.Message) (http.Header, error) {
	if _, err := endpoint(m.Destination); err != nil {
		return nil, core.Permanent(fmt.Errorf("webhook: event %s: %w: %v", m.ID, core.ErrUnknownDestination, err))
	}
	if len(m.Payload) > s.o.MaxBodyBytes {
		return nil, core.Permanent(fmt.Errorf("webhook: event %s: %w: %d bytes, limit %d (Options.MaxBodyBytes)", m.ID, ErrMessageTooLarge, len(m.Payload), s.o.MaxBodyBytes))
	}
	folded := make(map[string]string, len(m.Headers))
	for k, v := range m.Headers {
		p := headerProblem(k, v)
		if other, ok := folded[strings.ToLower(k)]; ok && p == "" {
			p = fmt.Sprintf("names %q and %q differ only in case", min(k, other), max(k, other))
		}
		if p != "" {
			return nil, core.Permanent(fmt.Errorf("webhook: event %s: %w: %s", m.ID, ErrUnsendableHeader, p))
		}
		folded[strings.ToLower(k)] = k
	}
	h := http.Header{}
	var bad string
	binding.Encode(m, s.o.Source, s.o.ContentType, func(k, v string) {
		if !validHeaderValue(v) && bad == "" {
			bad = k
		}
		h.Set(k, v)
	})
	if bad != "" {
		return nil, core.Permanent(fmt.Errorf("webhook: event %s: %w: value of %s has a control character or leading or trailing whitespace", m.ID, ErrUnsendableHeader, bad))
	}
	h.Set(HeaderWebhookID, m.ID)
	return h, nil
}

// endpoint parses an absolute http or https URL.
func endpoint(dest string) (*url.URL, error) {
	u, err := url.Parse(dest)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%q is not an absolute http or https URL", redact(dest))
	}
	return u, nil
}

// post sends one request, of webhook-id id with headers h and body, to dest, and classifies
// the outcome; batch is the number of events of a batch request, 0 for a single event.
func (s *Sink) post(ctx context.Context, dest, id string, batch int, h http.Header, body []byte) error {
	what, idKey := "event "+id, "event_id"
	if batch > 0 {
		what, idKey = fmt.Sprintf("batch %s (%d events)", id, batch), "batch_id"
	}
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dest, bytes.NewReader(body))
	if err != nil {
		return core.Permanent(fmt.Errorf("webhook: %s: %w: %v", what, core.ErrUnknownDestination, err))
	}
	req.Header = h
	ts := s.now().Unix()
	req.Header.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderWebhookSignature, signatures(s.keys, id, ts, body))
	resp, err := s.client.Do(req)
	if err != nil {
		// A timeout, a refused or reset connection, a TLS failure, a cancelled Send:
		// retryable (the endpoint may have applied it: the resend is a duplicate, which the
		// receiver's inbox makes a no-op).
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact(ue.URL) // a query may hold a token: keep it out of errors and logs
		}
		err = fmt.Errorf("webhook: %s: %w", what, err)
		s.log.Warn("webhook_post_failed", idKey, id, "destination", redact(dest), "error", err)
		return err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	se := &StatusError{EventID: id, BatchSize: batch, StatusCode: resp.StatusCode, RetryAfter: retryAfter(resp.Header.Get("Retry-After"), s.now()), Body: string(head)}
	s.log.Warn("webhook_post_refused", idKey, id, "destination", redact(dest), "status", resp.StatusCode,
		"retry_after", se.RetryAfter, "permanent", !se.Retryable())
	if se.Retryable() {
		return core.RetryAfter(se, se.RetryAfter) // se itself when there was no Retry-After
	}
	return core.Permanent(se)
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date (0 when absent,
// unreadable or past).
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(min(n, int64(365*24*3600))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// redact is a destination URL for the logs, without its user info and query (which may hold
// a token).
func redact(dest string) string {
	u, err := url.Parse(dest)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

func validHeaderValue(v string) bool { return headerProblem("x", v) == "" }
