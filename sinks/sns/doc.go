// Package sns is a core.Sink that publishes outbox messages to Amazon SNS topics with
// PublishBatch. core.Message.Destination is the topic ARN the relay's core.Router chose.
//
// # Wire format
//
// Messages use exactly the wire format of package sinks/sqs (see its documentation): the same
// message attributes (outbox.id, outbox.type, outbox.aggregate, ..., outbox.meta), the payload
// as the message (base64 or a claim-check reference when it cannot travel as is). Subscribe SQS
// queues with raw message delivery (RawMessageDelivery=true) so the attributes arrive as SQS
// message attributes; the sqs.Consumer also unwraps the JSON envelope SNS sends without raw
// delivery.
//
// # Guarantees
//
//   - One outcome per message; per core.Message.GroupID the acknowledged messages form a prefix
//     (core.Sink). A message missing from a PublishBatch response is core.ErrNotAcknowledged.
//   - Up to 10 entries and Options.MaxRequestBytes (default 256 KiB) per request. Requests of
//     different groups run in parallel (Options.Concurrency); two requests holding one group
//     are never in flight at once (to a standard topic they may be, with
//     Options.UnorderedStandard), and once a message of a group fails, the group's later
//     messages of the same Send call are not sent (core.ErrNotAcknowledged).
//   - FIFO topics (ARN ending in ".fifo"): MessageGroupId is the GroupID (the partition key;
//     hashed to "sha256-<hex>" when it is not a valid group id) and MessageDeduplicationId the
//     event ID, so a resend within SNS's 5-minute window is dropped by SNS.
//   - Errors: throttling, 5xx, timeouts and unknown errors are retryable; unknown topics
//     (NotFound), invalid parameters, sender-fault entries and oversize messages are permanent
//     (core.Permanent). The sink never retries itself (the AWS SDK's own retryer still runs as
//     configured on the client).
//   - Claim check (Options.ClaimCheck): oversize payloads are stored in S3 under their SHA-256
//     and the message carries the reference; consumers verify the digest. The objects carry the
//     digest, content type, event ID, type, schema id and encryption metadata as S3 user
//     metadata, as package sinks/sqs documents ("Claim check").
package sns
