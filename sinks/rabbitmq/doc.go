// Package rabbitmq is a core.Sink that publishes outbox messages to RabbitMQ (AMQP 0-9-1, with
// github.com/rabbitmq/amqp091-go) with publisher confirms, and a Consumer that reads a queue and
// processes each message through a core.Inbox.
//
// # Destinations
//
// core.Message.Destination is the address the relay's core.Router chose (trusted
// configuration, never the payload):
//
//	"exchange/routing-key"  publish to exchange with routing-key (split at the first "/":
//	                        the routing key may hold more "/"), e.g. "orders/order.created"
//	"/routing-key"          the default exchange with that routing key
//	"queue"                 (no "/") the default exchange with routing key queue: the queue
//	                        of that name
//
// The sink declares nothing: exchanges, queues and bindings are the operator's.
//
// # Sink guarantees
//
//   - Every message is published with mandatory set and persistent delivery (delivery mode 2)
//     on a channel in confirm mode. Its outcome is nil only once the broker confirmed it
//     (basic.ack) without returning it; a persistent message routed to durable queues is
//     confirmed once those queues wrote it.
//   - Outcomes: a returned message (basic.return, e.g. 312 NO_ROUTE: no binding matches) is
//     permanent (core.Permanent) wrapping ErrUnroutable; a channel closed by the broker
//     because the exchange does not exist (404) is permanent wrapping
//     core.ErrUnknownDestination, and 403 ACCESS_REFUSED is permanent too; an empty
//     destination or a name over 255 bytes is permanent core.ErrUnknownDestination before
//     anything is sent; a message larger than Options.MaxMessageBytes is permanent
//     ErrMessageTooLarge and is not sent. Retryable: a basic.nack (ErrNacked: a queue at its
//     x-max-length with x-overflow=reject-publish, an internal error), a closed channel or
//     connection (ErrChannelClosed), no confirm within Options.ConfirmTimeout
//     (ErrConfirmTimeout), no connection (ErrUnavailable), a cancelled context. The sink never
//     retries itself.
//   - Order per key: a Send's messages of one destination go in batches of up to 256 on one
//     channel, in order, and their confirms are awaited; package sinks/batcher runs the
//     batches of a partition key one after another, so one key is never in flight on two
//     channels at once, and a queue receives a key's messages in the order of the call. Per
//     key the acknowledged messages form a prefix (core.Sink): behind a failed message of a
//     key, its later messages of the call are reported core.ErrNotAcknowledged even if the
//     broker took them (the relay's resend is a duplicate, never a loss). One exception to
//     the order: a message nacked while a later one of its key on the same channel was taken
//     (reject-publish overflow while consumers drain the queue) reaches the queue after that
//     later one when the relay resends it.
//   - Recovery: amqp091's own recovery (Config.Recovery) stays off (New refuses it), so that
//     no reconnect hides a close from the messages in flight. One connection is shared by the
//     sink's channels; when it or a channel closes, its unconfirmed messages are reported
//     retryable and the channel is dropped. The next Send dials again; after a failed dial,
//     Sends fail at once with ErrUnavailable for a backoff (100ms doubling to 5s). A silent
//     broker is detected by amqp091's heartbeats (10s by default) or ConfirmTimeout.
//   - The broker's message size limit (max_message_size, 128 MiB by default) closes the
//     channel over a larger message: keep Options.MaxMessageBytes at or below it.
//
// # Wire format: CloudEvents, AMQP binding, binary content mode
//
// The body is the payload, byte for byte. Properties: message-id = the event ID,
// delivery-mode 2 (persistent), timestamp = the outbox CreatedAt (seconds), content-type =
// the event's "content-type" header, else Options.ContentType (absent when both are empty).
// Headers (the application properties of the CloudEvents AMQP binding, prefix
// "cloudEvents:"), the mapping of package sinks/internal/ce shared with the other sinks:
//
//	cloudEvents:specversion       "1.0"
//	cloudEvents:id                event ID
//	cloudEvents:source            Options.Source (default "outboxkit")
//	cloudEvents:type              event Type
//	cloudEvents:time              outbox CreatedAt, RFC 3339 with nanoseconds, UTC (when known)
//	cloudEvents:subject           AggregateType + "/" + AggregateID
//	cloudEvents:aggregatetype     extension: AggregateType
//	cloudEvents:aggregateid       extension: AggregateID
//	cloudEvents:aggregateversion  extension: AggregateVersion in decimal, when > 0
//	cloudEvents:partitionkey      extension (partitioning): the partition key
//	cloudEvents:schemaid          extension: SchemaID, when set
//	cloudEvents:tenant            extension: Tenant, when set
//	cloudEvents:causationid       extension: CausationID, when set
//	cloudEvents:correlationid     extension: CorrelationID, when set
//	cloudEvents:traceparent       the event's "traceparent" header, when set
//	cloudEvents:tracestate        the event's "tracestate" header, when set
//	outbox.h.<name>               every other event header <name> (among them outbox.tx_id,
//	                              outbox.tx_index and outbox.tx_count)
//
// Every header value is an AMQP long string. The Consumer rebuilds the event from them (the
// content-type property becomes the event header "content-type").
//
// # Consumer
//
// Consumer[TTx] consumes one queue (Run) with manual acknowledgements and a QoS prefetch
// (ConsumerOptions.Prefetch), processing messages in queue order with the Handler in the
// inbox's transaction: the delivery it waits for and those handed over within
// ConsumerOptions.BatchWait (default 2ms) after it, up to ConsumerOptions.MaxBatch (default
// 100, at most Prefetch: 32 with the default Prefetch), go through core.Inbox.ProcessBatch in
// one transaction (one message alone through core.Inbox.Process; MaxBatch 1 gives every message
// its own transaction). A message is acknowledged only after its inbox transaction committed
// (or the inbox found it Duplicate or Stale); a batch with one basic.ack (multiple) on its last
// delivery tag when nothing before it on the channel is unsettled, else one by one. A failed
// batch is tried again one message at a time in order, the batch counting as the first attempt
// of the message that failed it, so a poison message is rejected alone and the others are
// applied. A failed attempt is retried in place (RetryDelay apart, up to MaxAttempts) rather than
// requeued, since a requeued message would come back behind the messages already prefetched
// and break the queue's order; then, and at once for a message no attempt can get past
// (undecodable, digest conflict, invalid, beyond retention), it is rejected without requeue
// (basic.nack, requeue=false), which the broker routes to the queue's x-dead-letter-exchange.
// The user declares that exchange: without one, RabbitMQ drops a rejected message.
// DeclareQueue declares a queue with a dead-letter exchange queue+".dlx" and queue
// queue+".dlq". On shutdown the consumer is cancelled and what it holds unprocessed is handed
// back (basic.nack, requeue=true); a lost connection hands back its unacknowledged messages by
// itself, and Run dials again with a backoff.
package rabbitmq
