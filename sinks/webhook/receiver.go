package webhook

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

// DefaultTolerance is the default HandlerOptions.Tolerance, the Standard Webhooks replay
// window.
const DefaultTolerance = 5 * time.Minute

// Delivery is one received request, verified and decoded.
type Delivery struct {
	// Event is the event the producer wrote, rebuilt from the request's headers; Payload is
	// the body.
	Event core.Event
	// CreatedAt is the outbox CreatedAt (ce-time; zero when the request has none).
	CreatedAt time.Time
	// Timestamp is the request's webhook-timestamp: when this attempt was sent.
	Timestamp time.Time
	// Request is the HTTP request (its body already read into Event.Payload).
	Request *http.Request
}

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox:
// func(ctx context.Context, tx TTx, d *Delivery) error, the shape of kafka.Handler and
// sqs.Handler.
type Handler[TTx any] = consume.Handler[TTx, Delivery]

// HandlerOptions configures the receiving side (NewHandler).
type HandlerOptions struct {
	// Secrets are the secrets a request's signature may be made with, in the format of
	// Options.Secrets: a request is accepted when one of its signatures matches one of them.
	// Required.
	Secrets []string
	// Tolerance is how far a request's webhook-timestamp may be from this clock, either way:
	// an older request (a replay) or a newer one is refused with 401. Default
	// DefaultTolerance (5 minutes).
	Tolerance time.Duration
	// MaxBodyBytes is the largest body read: a larger one is refused with 413. Default
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// Entity maps an event to the inbox's version gate (core.InboxMessage Entity and Version;
	// version 0 disables the gate). Default core.EventEntity. NoVersionGate turns the gate
	// off. Each delivery reaches Inbox.Process as core.InboxMessageOf(&d.Event, d.CreatedAt,
	// "webhook:<path>@<webhook-timestamp>") with this gate.
	Entity func(ev *core.Event) (entity string, version int64)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// NoVersionGate is a HandlerOptions.Entity that turns the inbox's version gate off.
func NoVersionGate(ev *core.Event) (string, int64) { return consume.NoVersionGate(ev) }

// ReceiverStats counts what a Receiver answered.
type ReceiverStats struct {
	Applied   uint64 // 2xx: inbox outcome Applied
	Duplicate uint64 // 2xx: inbox outcome Duplicate
	Stale     uint64 // 2xx: inbox outcome Stale
	Refused   uint64 // 4xx: bad signature, undecodable, poison, wrong method, too large
	Failed    uint64 // 5xx: handler or database error, or the request ended before the commit
}

// Receiver is the http.Handler of NewHandler.
type Receiver[TTx any] struct {
	proc     *consume.Processor[TTx, Delivery]
	keys     [][]byte
	o        HandlerOptions
	log      *slog.Logger
	now      func() time.Time
	outcomes consume.Outcomes
	refused  atomic.Uint64
	failed   atomic.Uint64
}

// NewHandler returns the http.Handler of an endpoint the Sink posts to: it verifies each
// request's signature (by any of HandlerOptions.Secrets) and timestamp (within
// HandlerOptions.Tolerance), rebuilds the event from its ce- headers and body, and processes it
// through inbox as consumer with handler in the inbox's transaction. It answers:
//
//   - 204 once the inbox transaction committed: the event was applied, or is a duplicate (a
//     resend) or stale (the version gate); never before the commit. The answer's
//     Outbox-Outcome header says which: "applied", "duplicate" or "stale".
//   - 401 for a missing or wrong signature or a timestamp outside the tolerance; 400 for a
//     request without the CloudEvents headers (or whose ce-id is not its webhook-id); 405 for
//     another method than POST; 413 for a body over HandlerOptions.MaxBodyBytes. The Sink
//     parks these (permanent).
//   - 422 for a poison message, one no attempt can get past: its event ID was recorded with
//     another payload (core.ErrDigestMismatch), the inbox refuses it (core.ErrInvalidMessage)
//     or it is older than the retention horizon (core.ErrBeyondRetention). Permanent for the
//     Sink too (422, not 409, which the Sink retries).
//   - 500 for a handler error or panic or a database failure, 503 when the request ended
//     (the sender gave up) before the commit: nothing was recorded, and the Sink sends again.
//
// A nil inbox or handler, a consumer name that driver.CheckConsumer refuses, or bad options
// are a *core.OptionError.
func NewHandler[TTx any](inbox *core.Inbox[TTx], consumer string, handler Handler[TTx], opts *HandlerOptions) (*Receiver[TTx], error) {
	proc, err := consume.NewProcessor(inbox, consumer, handler, deliveryEvent, ErrHandlerPanic)
	if err != nil {
		return nil, err
	}
	var o HandlerOptions
	if opts != nil {
		o = *opts
	}
	keys, err := parseSecrets("Secrets", o.Secrets)
	if err != nil {
		return nil, err
	}
	switch {
	case o.Tolerance == 0:
		o.Tolerance = DefaultTolerance
	case o.Tolerance < 0:
		return nil, &core.OptionError{Field: "Tolerance", Reason: "must not be negative"}
	}
	switch {
	case o.MaxBodyBytes == 0:
		o.MaxBodyBytes = DefaultMaxBodyBytes
	case o.MaxBodyBytes < 0:
		return nil, &core.OptionError{Field: "MaxBodyBytes", Reason: "must not be negative"}
	}
	if o.Entity == nil {
		o.Entity = core.EventEntity
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Receiver[TTx]{proc: proc, keys: keys, o: o, log: log, now: time.Now}, nil
}

// Stats returns the counters so far.
func (rc *Receiver[TTx]) Stats() ReceiverStats {
	return ReceiverStats{Applied: rc.outcomes.Applied.Load(), Duplicate: rc.outcomes.Duplicate.Load(), Stale: rc.outcomes.Stale.Load(),
		Refused: rc.refused.Load(), Failed: rc.failed.Load()}
}

// ServeHTTP implements http.Handler.
func (rc *Receiver[TTx]) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		rc.refuse(w, r, http.StatusMethodNotAllowed, "", errors.New("webhook: only POST"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.o.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			rc.refuse(w, r, http.StatusRequestEntityTooLarge, "", fmt.Errorf("webhook: body over %d bytes", rc.o.MaxBodyBytes))
			return
		}
		// The sender went away or the connection broke. Answer anyway (a handler that writes
		// nothing answers 200): retryable, nothing was recorded.
		rc.fail(w, r, http.StatusServiceUnavailable, r.Header.Get(HeaderWebhookID), fmt.Errorf("webhook: reading the body: %w", err))
		return
	}
	id := r.Header.Get(HeaderWebhookID)
	ts, err := verify(rc.keys, id, r.Header.Get(HeaderWebhookTimestamp), r.Header.Get(HeaderWebhookSignature), body, rc.now(), rc.o.Tolerance)
	if err != nil {
		rc.refuse(w, r, http.StatusUnauthorized, id, err)
		return
	}
	if isBatch(r.Header) {
		rc.serveBatch(w, r, id, ts, body)
		return
	}
	ev, created, err := decodeRequest(r.Header, body)
	if err == nil && ev.ID != id {
		// The signature covers webhook-id, not the ce- headers: the event ID must be the
		// signed one, so a signed request cannot be replayed as another event.
		err = fmt.Errorf("%s %q differs from %s %q", HeaderID, ev.ID, HeaderWebhookID, id)
	}
	if err != nil {
		rc.refuse(w, r, http.StatusBadRequest, id, fmt.Errorf("%w: %w", ErrUndecodable, err))
		return
	}
	del := &Delivery{Event: ev, CreatedAt: created, Timestamp: time.Unix(ts, 0), Request: r}
	msg := consume.Message(&del.Event, created, rc.o.Entity, "webhook:"+r.URL.Path+"@"+strconv.FormatInt(ts, 10))
	res, err := rc.proc.Process(r.Context(), del, msg)
	switch consume.Decide(r.Context(), err) {
	case consume.Ack:
		name := rc.outcomes.Add(res.Outcome)
		w.Header().Set("Outbox-Outcome", name)
		w.WriteHeader(http.StatusNoContent)
	case consume.DeadLetter:
		rc.refuse(w, r, http.StatusUnprocessableEntity, id, err)
	case consume.Release:
		rc.fail(w, r, http.StatusServiceUnavailable, id, err)
	default:
		rc.fail(w, r, http.StatusInternalServerError, id, err)
	}
}

// serveBatch processes a verified batch request (Content-Type BatchContentType) in one inbox
// transaction and answers for all its events.
func (rc *Receiver[TTx]) serveBatch(w http.ResponseWriter, r *http.Request, id string, ts int64, body []byte) {
	evs, err := decodeBatch(body)
	if err != nil {
		rc.refuse(w, r, http.StatusBadRequest, id, fmt.Errorf("%w: %w", ErrUndecodable, err))
		return
	}
	if len(evs) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	ds := make([]*Delivery, len(evs))
	msgs := make([]core.InboxMessage, len(evs))
	at := "webhook:" + r.URL.Path + "@" + strconv.FormatInt(ts, 10) + "#"
	for i := range evs {
		ds[i] = &Delivery{Event: evs[i].ev, CreatedAt: evs[i].created, Timestamp: time.Unix(ts, 0), Request: r}
		msgs[i] = consume.Message(&ds[i].Event, evs[i].created, rc.o.Entity, at+strconv.Itoa(i))
	}
	res, err := rc.proc.ProcessBatch(r.Context(), ds, msgs)
	switch consume.Decide(r.Context(), err) {
	case consume.Ack:
		names := make([]string, len(res))
		for i := range res {
			names[i] = rc.outcomes.Add(res[i].Outcome)
		}
		w.Header().Set("Outbox-Outcome", strings.Join(names, ", "))
		w.WriteHeader(http.StatusNoContent)
	case consume.DeadLetter:
		rc.refuse(w, r, http.StatusUnprocessableEntity, id, err)
	case consume.Release:
		rc.fail(w, r, http.StatusServiceUnavailable, id, err)
	default:
		rc.fail(w, r, http.StatusInternalServerError, id, err)
	}
}

func (rc *Receiver[TTx]) refuse(w http.ResponseWriter, r *http.Request, code int, id string, err error) {
	rc.refused.Add(1)
	rc.log.Warn("webhook_request_refused", "path", r.URL.Path, "webhook_id", id, "status", code, "error", err)
	http.Error(w, err.Error(), code)
}

func (rc *Receiver[TTx]) fail(w http.ResponseWriter, r *http.Request, code int, id string, err error) {
	rc.failed.Add(1)
	rc.log.Error("webhook_request_failed", "path", r.URL.Path, "webhook_id", id, "status", code, "error", err)
	// The error text stays in the logs: a database error may say more than a sender should
	// read.
	http.Error(w, http.StatusText(code), code)
}

var _ http.Handler = (*Receiver[struct{}])(nil)

// decodeRequest rebuilds the event a request carries (its ce- headers and body) and its
// outbox CreatedAt (zero when the request has no ce-time).
func decodeRequest(h http.Header, body []byte) (core.Event, time.Time, error) {
	d := binding.NewDecoder()
	for k, vs := range h {
		if len(vs) > 0 {
			d.Add(k, vs[0])
		}
	}
	return d.Event("", body)
}

// deliveryEvent is the event a delivery carries (consume.NewProcessor).
func deliveryEvent(d *Delivery) *core.Event { return &d.Event }
