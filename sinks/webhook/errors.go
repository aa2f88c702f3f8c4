package webhook

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrMessageTooLarge: the payload is larger than Options.MaxBodyBytes (permanent: raise the
	// limit, or keep payloads small). It is the same error as kafka.ErrMessageTooLarge and
	// sqs.ErrMessageTooLarge.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrUnsendableHeader: an event header cannot travel as an HTTP header unchanged: its name
	// is not an HTTP token, or its value holds a control character or starts or ends with a
	// space or tab (HTTP trims those). Permanent.
	ErrUnsendableHeader = errors.New("webhook: event header cannot travel as an HTTP header")
	// ErrBadSignature: a request to the Handler has no valid Standard Webhooks signature by
	// any of its secrets (missing or malformed webhook-id, webhook-timestamp or
	// webhook-signature headers, or no signature that matches). Answered 401.
	ErrBadSignature = errors.New("webhook: no valid signature")
	// ErrTimestampOutOfTolerance: a request's webhook-timestamp is further from the Handler's
	// clock than HandlerOptions.Tolerance (a replay, or a clock far off). Answered 401.
	ErrTimestampOutOfTolerance = errors.New("webhook: timestamp outside the tolerance")
	// ErrUndecodable: a signed request does not carry the CloudEvents headers the Sink writes,
	// or its ce-id differs from its webhook-id. Answered 400.
	ErrUndecodable = errors.New("webhook: request does not follow the outboxkit CloudEvents mapping")
	// ErrHandlerPanic: the Handler's handler panicked. The attempt failed: its inbox
	// transaction rolled back, and the request is answered 500.
	ErrHandlerPanic = errors.New("webhook: handler panicked")
)

// StatusError is the outcome of a request that the endpoint answered with a status other than
// 2xx. 408, 409, 425, 429 and 5xx are retryable: the relay sends again after its own backoff
// or, when the answer had a Retry-After, after at least that long (the outcome wraps the
// *StatusError in core.RetryAfter; the relay's wait is capped by its RetryPolicy.Max). 3xx
// (redirects are not followed) and every other 4xx are wrapped in core.Permanent.
type StatusError struct {
	// EventID is the event of the request; of a batch request, its webhook-id (BatchID).
	EventID string
	// BatchSize is the number of events of a batch request (Options.BatchSize), whose every
	// event has this outcome; 0 for a single-event request.
	BatchSize int
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// RetryAfter is the answer's Retry-After (delay-seconds or an HTTP date, as a delay from
	// the answer); 0 when absent or unreadable.
	RetryAfter time.Duration
	// Body is the start of the answer's body (at most 256 bytes), for the logs.
	Body string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	if e.BatchSize > 0 {
		fmt.Fprintf(&b, "webhook: batch %s (%d events): endpoint answered %d", e.EventID, e.BatchSize, e.StatusCode)
	} else {
		fmt.Fprintf(&b, "webhook: event %s: endpoint answered %d", e.EventID, e.StatusCode)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (Retry-After %v)", e.RetryAfter)
	}
	if e.Body != "" {
		fmt.Fprintf(&b, ": %q", e.Body)
	}
	return b.String()
}

// Retryable reports whether a later attempt may succeed: 408, 409, 425, 429 and 5xx.
func (e *StatusError) Retryable() bool { return retryableStatus(e.StatusCode) }

func retryableStatus(code int) bool {
	switch {
	case code == 408, code == 409, code == 425, code == 429:
		return true
	case code >= 500:
		return true
	}
	return false
}
