// Package webhook is a core.Sink that posts outbox messages as HTTP webhooks signed by the
// Standard Webhooks specification, and the http.Handler of the receiving endpoint
// (NewHandler), which verifies them and processes each through a core.Inbox.
// core.Message.Destination is the endpoint URL (http or https) the relay's core.Router chose:
// trusted configuration only, never the payload.
//
// # Request
//
// One POST per message; the body is the payload, byte for byte. The headers:
//
//	webhook-id           the event ID (the same on every resend: the receiver's idempotency key)
//	webhook-timestamp    unix seconds of this attempt
//	webhook-signature    "v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">",
//	                     one per Options.Secrets entry, space-separated
//	ce-specversion       "1.0"
//	ce-id                event ID
//	ce-source            Options.Source (default "outboxkit")
//	ce-type              event Type
//	ce-time              outbox CreatedAt, RFC 3339 with nanoseconds, UTC (when known)
//	ce-subject           AggregateType + "/" + AggregateID
//	Content-Type         the event's "content-type" header, else Options.ContentType (left
//	                     out when both are empty)
//	ce-aggregatetype     extension: AggregateType
//	ce-aggregateid       extension: AggregateID
//	ce-aggregateversion  extension: AggregateVersion in decimal, when > 0
//	ce-partitionkey      extension (CloudEvents partitioning): the partition key
//	ce-schemaid          extension: SchemaID, when set
//	ce-tenant            extension: Tenant, when set
//	ce-causationid       extension: CausationID, when set
//	ce-correlationid     extension: CorrelationID, when set
//	ce-traceparent       extension (CloudEvents distributed tracing): the event's
//	                     "traceparent" header, when set
//	ce-tracestate        the event's "tracestate" header, when set
//	Outbox-H-<name>      every other event header <name>, among them the transaction group
//	                     headers outbox.tx_id, outbox.tx_index and outbox.tx_count
//
// The ce- headers are the CloudEvents HTTP protocol binding in binary content mode (package
// sinks/internal/ce holds the mapping every sink shares), so any CloudEvents SDK reads the
// request as a CloudEvent. HTTP header names are case-insensitive (Go sends them
// canonicalised, Ce-Id): the Handler decodes them without regard to case, and the other event
// headers' names come back lowercased (Headers["X-Region"] is received as "x-region"). An
// event header whose name is not an HTTP token, or any header value with a control character
// or leading or trailing space or tab (which HTTP would change), is refused before sending
// (permanent ErrUnsendableHeader).
//
// Secrets are given as in the specification, "whsec_" followed by the standard base64 of the
// key. Several secrets rotate without downtime: the request carries a signature by each, and a
// receiver accepts any one it knows. The signature covers webhook-id, webhook-timestamp and
// the body, not the ce- headers: the Handler requires ce-id to equal the signed webhook-id,
// and TLS (an https destination) protects the other headers in transit.
//
// # Sink guarantees
//
//   - One outcome per message: nil only once the endpoint answered 2xx. Up to
//     Options.Concurrency requests are in flight per Send, never two of one partition key;
//     per key a message is sent only after the previous one was acknowledged, and per key the
//     acknowledged messages form a prefix (core.Sink, kept by package sinks/batcher).
//   - 408, 409, 425, 429 and 5xx are retryable: the outcome is a *StatusError whose
//     RetryAfter holds the answer's Retry-After, wrapped in core.RetryAfter when there is one.
//     The relay retries after its own backoff (core.RetryPolicy), or after the Retry-After
//     when that is longer, up to RetryPolicy.Max; the sink never retries itself. Timeouts (Options.Timeout, default
//     10s, from sending to reading the answer), refused or reset connections, TLS failures
//     and a cancelled Send are retryable too.
//   - Every other 4xx, and every 3xx, is permanent (core.Permanent wrapping the
//     *StatusError): the relay parks the event. Redirects are not followed: the destination
//     is the configured URL, and a moved endpoint is a configuration to fix.
//   - A destination that is not an absolute http or https URL is permanent
//     (core.ErrUnknownDestination), and so is a payload over Options.MaxBodyBytes (default
//     1 MiB; ErrMessageTooLarge). Neither is sent, and the later messages of the key in the
//     same Send are held back.
//   - A resend is a duplicate, never a loss: an endpoint that applied a message but whose
//     answer was lost (a timeout) gets it again with the same webhook-id. The Handler's inbox
//     makes that a no-op.
//   - https endpoints are verified against the system's roots, or those of Options.CAFile.
//
// # Batch mode
//
// Options.BatchSize 2 or more turns batch mode on (default off: one request per event, as
// above). A request then carries up to BatchSize events of one destination (and at most
// Options.BatchMaxBytes of body) in the CloudEvents HTTP binding's batched content mode:
// Content-Type application/cloudevents-batch+json, the body a JSON array of events in the
// JSON event format. Each event has the attributes above as JSON strings (no ce- prefix; the
// content type as datacontenttype), the other event headers in the string extension
// "outboxheaders" (a JSON object of strings written as a string, since an attribute cannot be
// an object), and data when the payload is JSON (no leading or trailing whitespace) under an
// absent or JSON content type, else data_base64. The Standard Webhooks headers sign the whole
// body; webhook-id is BatchID of the events: "batch_" + hex of the first 16 bytes of the SHA-256
// of the ids, each followed by a newline.
//
//   - The endpoint's answer is the outcome of every event of the request: 2xx acknowledges
//     them all, a retryable answer (or a timeout) makes them all retryable.
//   - A permanent answer to a batch (e.g. 422 for a poison event in it, 400, 413) sends its
//     events again one request each (single-event requests), so that only the events the
//     endpoint refuses on their own are parked; later events of a refused event's key are held
//     back.
//   - Per key order is kept (package sinks/batcher): two requests holding events of one key
//     are never in flight at once, and a later event of a key is never acknowledged while an
//     earlier one failed.
//   - A batch that would hold one event (the last of a Send, or one whose JSON is over
//     BatchMaxBytes) is sent as a single-event request.
//
// Why: one request per event is bounded by Concurrency / latency (64 connections to an
// endpoint answering in 20 ms: 3,200 events/s); batches are not (see BenchmarkWebhook).
//
// # Receiving: NewHandler
//
// NewHandler returns the http.Handler of an endpoint. It verifies the signature with any of
// HandlerOptions.Secrets and the timestamp within HandlerOptions.Tolerance of its clock
// (default 5 minutes, either way: the replay window), rebuilds the event from the ce- headers,
// and runs it through core.Inbox with the Handler in the inbox's transaction (the package
// sinks/internal/consume every consumer shares). It answers 2xx only after the inbox
// transaction committed (applied, duplicate or stale), 401 for a bad signature or timestamp,
// 400 for an undecodable request, 422 for a poison message (an event ID recorded with another
// payload, a message the inbox refuses, one older than the retention horizon), 500 for a
// handler or database error and 503 when the request ended before the commit. The Sink parks
// the 4xx and resends the 5xx; see NewHandler. A batch request (Content-Type
// application/cloudevents-batch+json) is processed in one inbox transaction
// (core.Inbox.ProcessBatch, all or nothing) and answered once for all its events: 204 after
// the commit (the Outbox-Outcome header lists each event's outcome), 400 when an event does
// not decode, 422 when one is poison and 500 for a handler error, with nothing of the batch
// recorded.
package webhook
