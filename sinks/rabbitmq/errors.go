package rabbitmq

import (
	"errors"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrUnroutable: the broker returned a mandatory message (basic.return, e.g. 312
	// NO_ROUTE): its exchange has no binding that matches the routing key, so no queue took
	// it. Permanent (core.Permanent): declare the queue or the binding, then unpark the event.
	ErrUnroutable = errors.New("rabbitmq: message returned as unroutable")
	// ErrNacked: the broker refused the message with a negative publisher confirm
	// (basic.nack: a queue at its x-max-length with x-overflow=reject-publish, an internal
	// error). Retryable.
	ErrNacked = errors.New("rabbitmq: message nacked by the broker")
	// ErrConfirmTimeout: no publisher confirm came within Options.ConfirmTimeout. Retryable:
	// the message may have reached the queue (the resend is a duplicate, never a loss).
	ErrConfirmTimeout = errors.New("rabbitmq: no publisher confirm in time")
	// ErrChannelClosed: the channel or connection closed before the confirm came (a broker
	// restart, a network failure, a channel error). Retryable unless the close names the
	// destination as missing (404) or forbidden (403), which is permanent.
	ErrChannelClosed = errors.New("rabbitmq: channel closed before the confirm")
	// ErrUnavailable: no connection to the broker (the last dial failed; the next is tried
	// after a backoff). Retryable.
	ErrUnavailable = errors.New("rabbitmq: broker unavailable")
	// ErrClosed: the sink or consumer was closed.
	ErrClosed = errors.New("rabbitmq: closed")
	// ErrMessageTooLarge: a message (payload and headers) is larger than
	// Options.MaxMessageBytes. Permanent; it is not sent. It is the same error as
	// kafka.ErrMessageTooLarge and sqs.ErrMessageTooLarge.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrUndecodable: a consumed message does not carry the CloudEvents headers this package
	// writes. The consumer dead-letters it at once.
	ErrUndecodable = errors.New("rabbitmq: message does not follow the outboxkit CloudEvents mapping")
	// ErrHandlerPanic: the consumer's handler panicked. The attempt failed: its inbox
	// transaction rolled back.
	ErrHandlerPanic = errors.New("rabbitmq: handler panicked")
)
