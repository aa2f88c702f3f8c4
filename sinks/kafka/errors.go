package kafka

import (
	"errors"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrMessageTooLarge: a record (key, value and headers) is larger than the client's
	// ProducerBatchMaxBytes (permanent: there is no claim check for Kafka; raise the topic's
	// max.message.bytes and the client's limit, or keep payloads small), or the broker
	// refused the batch holding it as too large (retryable; see the package documentation).
	// It is the same error as sqs.ErrMessageTooLarge.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrUndecodable: a consumed record does not carry the CloudEvents headers this package
	// writes (see the package documentation). The consumer sends it to the dead-letter topic
	// at once.
	ErrUndecodable = errors.New("kafka: record does not follow the outboxkit CloudEvents mapping")
	// ErrHandlerPanic: the consumer's handler panicked. The attempt failed: its inbox
	// transaction rolled back.
	ErrHandlerPanic = errors.New("kafka: handler panicked")
)
