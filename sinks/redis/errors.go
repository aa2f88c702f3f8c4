package redis

import (
	"errors"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrMessageTooLarge: an entry (its field names and values, the payload among them) is
	// larger than Options.MaxMessageBytes. Permanent: there is no claim check for Redis; raise
	// the limit or keep payloads small. It is the same error as kafka.ErrMessageTooLarge.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrUndecodable: a consumed entry does not carry the fields this package writes (see the
	// package documentation). The consumer sends it to the dead-letter stream at once.
	ErrUndecodable = errors.New("redis: stream entry does not follow the outboxkit CloudEvents mapping")
	// ErrHandlerPanic: the consumer's handler panicked. The attempt failed: its inbox
	// transaction rolled back.
	ErrHandlerPanic = errors.New("redis: handler panicked")
	// ErrMaxDeliveries: an entry was delivered ConsumerOptions.MaxDeliveries times without
	// its inbox transaction committing; the consumer sends it to the dead-letter stream.
	ErrMaxDeliveries = errors.New("redis: entry delivered too many times")
)
