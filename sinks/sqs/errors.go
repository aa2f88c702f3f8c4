package sqs

import (
	"errors"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Errors, tested with errors.Is.
var (
	// ErrMessageTooLarge: a message does not fit in Options.MaxRequestBytes and no claim check
	// is configured (or even its claim-check reference does not fit). The outcome is permanent.
	ErrMessageTooLarge = wire.ErrMessageTooLarge
	// ErrUndecodable: a received message does not follow the wire format (see the package
	// documentation). The consumer does not delete it.
	ErrUndecodable = wire.ErrUndecodable
	// ErrClaimCheckDigest: a claim-checked payload read from S3 does not match the SHA-256
	// digest or size recorded in its message. The consumer does not delete it.
	ErrClaimCheckDigest = wire.ErrClaimCheckDigest
	// ErrClaimCheckBucket: a message points to a bucket that ConsumerOptions.ClaimCheckBuckets
	// does not list (by default none is listed), or the consumer has no S3 client. Nothing was
	// fetched; the consumer does not delete the message.
	ErrClaimCheckBucket = errors.New("sqs: claim-check bucket not allowed")
	// ErrClaimCheckTooLarge: a claim-check reference claims a payload larger than
	// ConsumerOptions.MaxClaimCheckBytes. Nothing was fetched; the consumer does not delete it.
	ErrClaimCheckTooLarge = wire.ErrClaimCheckTooLarge
	// ErrHandlerPanic: the consumer's handler panicked. The message is treated as failed: its
	// inbox transaction rolls back and it is not deleted, so it is received again (and, past
	// the queue's maxReceiveCount, moved to its dead-letter queue).
	ErrHandlerPanic = errors.New("sqs: handler panicked")
)
