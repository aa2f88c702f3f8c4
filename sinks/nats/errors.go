package nats

import (
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrMessageTooLarge: a message (payload and headers) is larger than the server's
	// max_payload (the connection's MaxPayload), or the stream refused it as larger than its
	// max_msg_size. Permanent: there is no claim check for NATS; raise the limit or keep
	// payloads small. It is the same error as sqs.ErrMessageTooLarge and
	// kafka.ErrMessageTooLarge.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrNoStream: no JetStream stream covers the subject (the server answered "no
	// responders"). Permanent: a missing stream is a configuration error; create the stream
	// (or add the subject to one), then unpark the events.
	ErrNoStream = errors.New("nats: no stream covers the subject")
	// ErrInvalidSubject: the destination is not a valid subject to publish to (empty, an
	// empty token, whitespace, or a wildcard token "*" or ">"). Permanent; it wraps
	// core.ErrUnknownDestination.
	ErrInvalidSubject = fmt.Errorf("nats: invalid publish subject: %w", core.ErrUnknownDestination)
	// ErrUndecodable: a consumed message does not carry the CloudEvents headers this package
	// writes (see the package documentation). The consumer dead-letters it at once.
	ErrUndecodable = errors.New("nats: message does not follow the outboxkit CloudEvents mapping")
	// ErrHandlerPanic: the consumer's handler panicked. The attempt failed: its inbox
	// transaction rolled back.
	ErrHandlerPanic = errors.New("nats: handler panicked")
)
