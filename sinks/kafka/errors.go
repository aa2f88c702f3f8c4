package kafka

import (
	"errors"
	"fmt"

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
	// ErrDecompressedTooLarge: a fetched batch would decompress to more than
	// ConsumerOptions.MaxDecompressedBytes (a decompression bomb, or a limit set too low).
	// Consumer.Run returns a *DecompressError wrapping it.
	ErrDecompressedTooLarge = errors.New("kafka: a fetched batch decompresses to more than MaxDecompressedBytes")
)

// DecompressError is what Consumer.Run returns when a fetched batch would decompress to more
// than ConsumerOptions.MaxDecompressedBytes. Nothing of the batch was decompressed or applied,
// and no offset at or after it was committed: the consumer stops instead of consuming the
// partition past it or stalling on it in silence. Either raise MaxDecompressedBytes, if the
// batch is legitimate, or have the group skip the batch (set its committed offset of
// Topic/Partition to NextOffset) and run the consumer again. errors.Is(err,
// ErrDecompressedTooLarge) and errors.Is(err, kgo.ErrMaxDecompress) hold.
type DecompressError struct {
	Topic      string
	Partition  int32
	Offset     int64 // the batch's first offset
	NextOffset int64 // the offset after the batch
	Max        int   // ConsumerOptions.MaxDecompressedBytes
	err        error // franz-go's
}

func (e *DecompressError) Error() string {
	return fmt.Sprintf("kafka: topic %s partition %d: the batch at offset %d decompresses to more than MaxDecompressedBytes (%d); "+
		"nothing of it was applied; raise MaxDecompressedBytes or skip the batch (commit offset %d for the group)",
		e.Topic, e.Partition, e.Offset, e.Max, e.NextOffset)
}

func (e *DecompressError) Unwrap() []error { return []error{ErrDecompressedTooLarge, e.err} }
