// Package sqs is a core.Sink that sends outbox messages to Amazon SQS queues with
// SendMessageBatch, and a Consumer that receives them and processes each through a core.Inbox.
// core.Message.Destination is the queue URL the relay's core.Router chose (trusted
// configuration, never the payload).
//
// # Sink guarantees
//
//   - One outcome per message; per core.Message.GroupID the acknowledged messages form a prefix
//     (see core.Sink). An entry missing from a SendMessageBatch response is
//     core.ErrNotAcknowledged (retryable).
//   - Up to 10 entries and Options.MaxRequestBytes (default 256 KiB, at most 1 MiB) per request.
//     Requests for different groups run in parallel (Options.Concurrency, default 64); two
//     requests holding one group are never in flight at once, and a group's messages are sent
//     in order (to a standard queue, Options.UnorderedStandard lets them be in flight at
//     once: a standard queue keeps no order between messages anyway). Once a message of a group fails, the group's later messages of the same Send
//     call are not sent (core.ErrNotAcknowledged). SQS handles the entries of one request
//     independently, so when an entry fails, later entries of its group in that same request
//     may have been accepted; they are reported core.ErrNotAcknowledged and resent (a
//     duplicate). Options.StrictGroupOrder avoids this at the price of one message per group
//     per request.
//   - FIFO queues (URL ending in ".fifo"): MessageGroupId is the GroupID (the partition key;
//     when it is not a valid group id, 1-128 characters of ASCII 0x21-0x7E, it becomes
//     "sha256-" + its hex SHA-256) and MessageDeduplicationId is the event ID (same rule), so a
//     resend inside SQS's 5-minute deduplication window is dropped by SQS.
//   - Errors: throttling, 5xx, timeouts, cancellation and unknown errors are retryable;
//     QueueDoesNotExist, invalid parameters, sender-fault batch entries (e.g. larger than the
//     queue's MaximumMessageSize) and messages larger than MaxRequestBytes without a claim
//     check (ErrMessageTooLarge) are permanent (core.Permanent). The sink never retries
//     itself; the AWS SDK client's retryer still runs as the caller configured it.
//
// # Wire format (version 1)
//
// Shared by this package and package sinks/sns. Message attributes (at most ten, the SQS
// limit; empty optional ones are left out):
//
//	outbox.id                 String  event ID (always)
//	outbox.type               String  event type (always)
//	outbox.aggregate          String  AggregateType + "/" + AggregateID (always; the type has no "/")
//	outbox.aggregate_version  Number  AggregateVersion, when > 0
//	outbox.schema_id          String  SchemaID, when set
//	outbox.tenant             String  Tenant, when set
//	outbox.causation_id       String  CausationID, when set
//	outbox.correlation_id     String  CorrelationID, when set
//	traceparent               String  the event's W3C "traceparent" header, when present
//	outbox.meta               String  JSON object (always), below
//
// outbox.meta holds everything else:
//
//	{"v":1,                                  format version; readers refuse other versions
//	 "created_at":"2026-11-30T05:00:00.123456Z", outbox CreatedAt, UTC, when known
//	 "partition_key":"order/42",             the partition key (FIFO group before hashing)
//	 "headers":{"k":"v"},                    every header except traceparent, when any (the
//	                                         transaction group headers outbox.tx_id,
//	                                         outbox.tx_index and outbox.tx_count among them)
//	 "encoding":"base64",                    how the body holds the payload, below
//	 "claim_check":{"bucket":"b","key":"<sha256 hex>","sha256":"<hex>","size":123}}
//
// Body, by "encoding":
//
//	absent    the payload bytes as is: they are valid UTF-8 made only of XML 1.0 characters
//	          other than carriage return (SQS refuses other characters in a body)
//	"base64"  standard base64 (with padding) of the payload, for any other payload
//	"empty"   the payload is empty; the body is "-" (SQS and SNS refuse empty bodies)
//	"s3"      the payload is in S3 at claim_check (bucket, key = optional prefix + hex SHA-256
//	          of the payload); the body repeats the reference as JSON. Readers fetch the object
//	          and verify its size and SHA-256 before use.
//
// # Claim check
//
// With Options.ClaimCheck, a payload whose message would exceed MaxRequestBytes (or any payload
// above ClaimCheck.Threshold) is written to S3 with PutObject before its batch is sent; a
// failed upload is that message's (retryable) outcome. Keys are content addressed, so a resend
// rewrites the same object. The sink never deletes objects: expire them with a bucket lifecycle
// rule longer than any redelivery window.
//
// Each object carries S3 user metadata (x-amz-meta-<key>; keys lower-case):
//
//	outboxkit-sha256        lowercase hex SHA-256 of the object's bytes (always)
//	outboxkit-encryption    "aes-256-gcm/v1" when the payload is an envelope of package
//	                        encryption (version 1, AES-256-GCM); absent for clear payloads
//	outboxkit-content-type  the event's "content-type" header, else "application/octet-stream"
//	                        (the type of the plaintext when the payload is encrypted)
//	outboxkit-event-id      the event ID
//	outboxkit-type          the event type
//	outboxkit-schema-id     the event's SchemaID, when set
//	outboxkit-key-id        the envelope's key ID (encryption.Parse; nothing is decrypted)
//
// The object's Content-Type is the content type above, or "application/octet-stream" for an
// envelope (the object holds ciphertext). A payload that starts with the envelope's magic but
// does not parse is described as clear. S3 user metadata must be ASCII and at most 2 KB (keys
// and values together): the fields are added in the order above, and one whose value is not
// printable ASCII (or has a space at either end), or that would take the total over 2 KB, is
// left out whole, never truncated. With the core's limits on event fields only a key ID can be
// left out for size (envelopes allow 2048 bytes; one of up to 952 bytes always fits); the
// envelope at the start of the object still names it. The metadata is a pure function of the
// event, so a resend writes the same; but objects are content addressed, so two events with the
// same clear payload share one object, whose event ID and type are those of the last one sent
// (an encrypted payload is never shared: each has its own random nonce).
//
// # Consumer
//
// Claim checks are read only from the buckets listed in ConsumerOptions.ClaimCheckBuckets
// (deny by default: a message names its bucket, and the consumer reads it with its own
// credentials), and only up to ConsumerOptions.MaxClaimCheckBytes: the claimed size is checked
// before the request and the object's length before its body is read.
//
// Consumer[TTx] long-polls one queue (ReceiveMessage with WaitTime, all attributes), decodes
// each message (fetching and verifying claim-checked payloads), and runs core.Inbox.Process
// with the Handler in the inbox's transaction. A message is deleted only after Process returned
// without error, i.e. after its inbox record committed: Applied, Duplicate and Stale messages
// are all deleted. Everything else is left on the queue and is NEVER deleted by the consumer:
// undecodable messages (ErrUndecodable), claim-check failures (ErrClaimCheckDigest,
// ErrClaimCheckBucket, ErrClaimCheckTooLarge, S3 errors), core.ErrDigestMismatch,
// core.ErrBeyondRetention, core.ErrInvalidMessage,
// core.ErrVersionGap and handler errors. They become visible again after the visibility
// timeout and are retried; give the queue a redrive policy (maxReceiveCount) so that messages
// that keep failing move to a dead-letter queue instead of cycling. Every such failure is
// logged at level Error with the message id and receive count.
//
// While a handler runs, the visibility of the batch's unfinished messages is renewed every
// ConsumerOptions.ExtendEvery. Groups (FIFO message groups; every message of a standard queue
// alone) are processed in parallel up to ConsumerOptions.Concurrency; the messages of one group
// in a received batch are processed one after another, in order, and after a failure the
// group's later messages are left in flight untouched so they reappear behind it. When Run's
// context is cancelled, receiving stops and the handlers' context is cancelled; messages whose
// inbox transaction committed are still deleted, and those not processed yet or interrupted by
// the cancellation get visibility 0 (released at once). Run returns after that.
//
// Messages published through SNS (package sinks/sns) are read the same way: with raw message
// delivery the attributes arrive as SQS message attributes; without it the consumer unwraps
// SNS's JSON notification envelope.
package sqs
