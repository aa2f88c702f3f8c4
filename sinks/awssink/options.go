// Package awssink holds what the SQS and SNS sinks share in their public API: their Options
// (sqs.Options and sns.Options are this type) and the request limits. The sinks themselves
// are in packages sinks/sqs and sinks/sns.
package awssink

import (
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Limits and defaults of a request (SendMessageBatch or PublishBatch).
const (
	DefaultMaxRequestBytes = 256 << 10
	MaxRequestBytesLimit   = 1 << 20
	MaxBatchEntries        = 10
	DefaultConcurrency     = 64
	// DefaultRequestTimeout is the default Options.RequestTimeout.
	DefaultRequestTimeout = 10 * time.Second
	// MaxRequestTimeout is the largest Options.RequestTimeout.
	MaxRequestTimeout = 15 * time.Minute
)

// Options configures an SQS or SNS sink. The zero value (or nil) is ready to use.
type Options struct {
	// MaxRequestBytes bounds the size of one request (the sum, over its entries, of the body
	// plus every attribute's name, data type and value) and therefore of one message. A
	// message larger than this goes to S3 when ClaimCheck is set and is a permanent
	// ErrMessageTooLarge otherwise. Default 256 KiB (SNS's limit); 1 KiB to 1 MiB (SQS's
	// limit). Keep it at or below the queues' MaximumMessageSize.
	MaxRequestBytes int
	// MaxBatchEntries is the most entries of one request, 1 to 10. Default 10.
	MaxBatchEntries int
	// Concurrency is the most requests one Send call has in flight (batches of different
	// groups; one group never has two, unless UnorderedStandard). Default 64
	// (DefaultConcurrency): the 100 requests of a default relay batch (1,000 records, 10 per
	// request) go out in two waves, so a Send waits for about two broker round trips, not
	// dozens in sequence (100, one wave, measured no faster under BENCHMARKS.md's capacity
	// model: the slowest answers set a Send's time either way). A relay has RelayOptions.InFlight Sends at once: give the client's HTTP
	// transport that many times Concurrency idle connections per host (aws-sdk-go-v2 keeps
	// 10), or the requests beyond them open a new connection each time.
	Concurrency int
	// UnorderedStandard lets one group have several requests in flight to a standard queue
	// or topic (a queue URL or topic ARN not ending in ".fifo"), which keeps no order between
	// messages anyway: a Send's later batches no longer wait for the earlier batches of their
	// groups, so a later message of a partition key may reach the queue before an earlier
	// one. The outcomes still form a per-group prefix (core.Sink): a message acknowledged
	// behind a failed message of its group, in any request, is reported not acknowledged and
	// sent again (a duplicate). FIFO queues and topics keep the wait. Default false: every
	// destination receives the messages of a group in the order the relay hands them over.
	UnorderedStandard bool
	// StrictGroupOrder puts at most one message of a group in each request. SQS and SNS
	// handle the entries of a request independently: without this option, when an entry
	// fails, later entries of its group in the SAME request may have been accepted (the sink
	// reports them not acknowledged, so they are resent: duplicates, and possibly out of
	// order). The sinks check sizes and characters before sending, so such failures are rare.
	// Default false.
	StrictGroupOrder bool
	// RequestTimeout bounds each SendMessageBatch or PublishBatch call, the SDK's retries
	// included. The SDK's HTTP client has no overall timeout and the relay gives Send no
	// deadline, so without this bound an endpoint that stops answering with the connection left
	// open would hold the Send, and the relay's lanes, for ever. A request that times out fails
	// its entries with a retryable error (they may have been accepted: the relay sends them
	// again, and a FIFO destination's deduplication id makes that a no-op within its window).
	// Claim-check uploads to S3 are not bounded by it. Default DefaultRequestTimeout (10s); at
	// most MaxRequestTimeout.
	RequestTimeout time.Duration
	// ClaimCheck, when set, stores payloads that do not fit in a message in S3. Default off.
	ClaimCheck *ClaimCheck
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// ClaimCheck configures the claim check: a payload is stored in S3 under Prefix + the hex
// SHA-256 of its bytes, and the message carries the reference (bucket, key, digest, size)
// instead. Objects are never deleted by the sink (several messages may share one): expire them
// with a bucket lifecycle rule longer than the longest redelivery window.
type ClaimCheck struct {
	// Client is the S3 client. Required.
	Client *s3.Client
	// Bucket is the bucket. Required.
	Bucket string
	// Prefix is prepended to every key. Default "".
	Prefix string
	// Threshold: payloads larger than this many bytes always go to S3. Default 0: only the
	// payloads whose message would exceed MaxRequestBytes.
	Threshold int
}
