// Package nats is a core.Sink that publishes outbox messages to NATS JetStream with nats.go
// (package jetstream), and a Consumer that reads them through a durable pull consumer and
// processes each through a core.Inbox. core.Message.Destination is the subject the relay's
// core.Router chose (trusted configuration, never the payload).
//
// # Streams
//
// The sink does not create streams: a JetStream stream must cover every subject the router
// names (e.g. a stream ORDERS with subjects "orders.>"), created by the operator (nats
// stream add, or jetstream.JetStream.CreateStream). A publish to a subject no stream covers
// gets "no responders" from the server: that is a configuration error, reported as a
// permanent ErrNoStream, so the relay parks the event; create the stream, then unpark.
// (nats.go retries "no responders" twice, 250ms apart, before the sink sees it, which rides
// out a stream leader election.)
//
// # Sink guarantees
//
//   - One outcome per message: nil only once the stream's PubAck arrived. A PubAck marked
//     Duplicate (the stream already stored this Nats-Msg-Id within its duplicate window) is
//     an acknowledgement too.
//   - Deduplication: every message carries its event ID (core.Message.DedupID) as
//     Nats-Msg-Id, so a relay's resend within the stream's duplicate window (the stream's
//     Duplicates setting, default 2 minutes) is stored once. A resend after the window is
//     stored again; the consumer's inbox makes it a no-op.
//   - Order: per partition key, one message is in flight at a time. A Send publishes in
//     rounds (package sinks/batcher, one subject per round): a round holds at most one
//     message of each key, up to Options.MaxInFlight messages published at once with
//     PublishMsgAsync, and up to Options.Concurrency rounds run at once; a key's next
//     message is published only after the PubAck of its previous one. Once a message fails,
//     the later messages of its key in the same Send are not published and are reported
//     core.ErrNotAcknowledged (the per-key prefix rule of core.Sink), so a failed message is
//     never overtaken by the next one of its key.
//   - Atomic batches (Options.AtomicBatch, nats-server 2.12 or later, a stream that allows
//     atomic publishes): a Send's messages of one subject go out as atomic batches of up to
//     MaxAtomicBatch, whole keys together, each stored whole, in order, or not at all; one
//     PubAck (the commit's) acknowledges every message of a batch. A batch the server
//     refused stored nothing: its messages are then published in rounds as above, each with
//     its own outcome (a message the refused batch held that the stream had stored already
//     gets a Duplicate PubAck). Subjects whose stream does not allow atomic publishes are
//     always published in rounds.
//   - Size: a message whose payload plus header block is larger than the server's
//     max_payload (the connection's MaxPayload, default 1 MiB) is not sent: permanent
//     ErrMessageTooLarge, and the later messages of its key are not sent. A stream refusing
//     a message as larger than its max_msg_size is the same permanent error. There is no
//     claim check for NATS.
//   - Errors: no stream (ErrNoStream), too large (ErrMessageTooLarge) and a destination that
//     is no publish subject (ErrInvalidSubject: empty, whitespace, an empty or wildcard
//     token) are permanent (core.Permanent); a PubAck not received within
//     Options.AckTimeout, a disconnect, a cancelled context, a stream full with the
//     discard-new policy and any other JetStream error are retryable. The sink never
//     retries itself.
//
// # Headers: CloudEvents, NATS protocol binding, binary content mode
//
// The message data is the payload, byte for byte. The headers (package sinks/internal/ce,
// with the prefix "ce-"):
//
//	Nats-Msg-Id          event ID (JetStream deduplication)
//	ce-specversion       "1.0"
//	ce-id                event ID
//	ce-source            Options.Source (default "outboxkit")
//	ce-type              event Type
//	ce-time              outbox CreatedAt, RFC 3339 with nanoseconds, UTC (when known)
//	ce-subject           AggregateType + "/" + AggregateID
//	content-type         the event's "content-type" header, else Options.ContentType (left
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
//	outbox-h-<name>      every other event header <name>, among them the transaction
//	                     group headers outbox.tx_id, outbox.tx_index and outbox.tx_count
//
// NATS header names are case-sensitive; the sink writes them exactly as above. The
// Consumer rebuilds the event from the same headers (content-type becomes the event header
// "content-type"). NATS header syntax has one loss: a value's leading spaces and tabs are
// dropped by readers (nats.go among them), so an event header value (or ce-source) that
// starts with whitespace reaches consumers without it.
//
// # Consumer
//
// Consumer[TTx] creates or updates a durable pull consumer on a stream (explicit acks,
// ConsumerOptions.AckWait, no server-side MaxDeliver), fetches messages and processes each
// through core.Inbox with the Handler in the inbox's transaction. It acknowledges a message
// only after its inbox transaction committed, Naks it with ConsumerOptions.RetryBackoff after
// a failed attempt, and after ConsumerOptions.MaxDeliver failed deliveries (at once for a
// message no attempt can get past) publishes it to its dead-letter subject
// (ConsumerOptions.DeadLetterSubject, default "dlq." + subject; a stream must cover it) and
// terminates it. See Consumer for its guarantees, among them how per-key order holds across
// a retry (through the inbox's version gate).
//
// The messages of one pull that have arrived (up to ConsumerOptions.MaxBatch, default 100) are
// applied in one inbox transaction (core.Inbox.ProcessBatch) and each acknowledged after its
// commit; a failed batch is tried again one message at a time, so a poison message reaches the
// dead-letter subject alone. MaxBatch 1 applies one message per transaction.
package nats
