// Package sqsdeploy is a complete, small SQS-based deployment of outboxkit, meant to be copied:
//
//	orders service                                   order-views service
//	┌────────────────────────────┐                   ┌──────────────────────────────┐
//	│ Producer: orders row +     │  Relay   SNS FIFO │ Consumer: SQS FIFO queue ->  │
//	│ outbox event, one tx ──────┼────────► topic ──►│ inbox + order_views row,     │
//	│ (PostgreSQL, OutboxSchema) │                   │ one tx (PostgreSQL,          │
//	└────────────────────────────┘                   │ InboxSchema)                 │
//	                                                 └──────────────────────────────┘
//
// The producer changes an order and appends an "order.status_changed" event in the same pgx
// transaction, then wakes the relays (Producer.SetStatus). The relay (RunRelay) leases lanes of
// the PostgreSQL outbox and publishes committed events, in order per order, to the SNS FIFO
// topic that configuration routes their type to (core.StaticRouter). The queue is subscribed to
// the topic with raw message delivery. The consumer (RunConsumer) records every message in a
// PostgreSQL inbox and updates the order_views projection in the same transaction, and deletes
// the message only after that transaction committed.
//
// Guarantees: an event is published if and only if its producer transaction committed; it
// reaches the queue at least once (a relay that dies between the broker's acknowledgement and
// the outbox update resends it; SNS and SQS FIFO drop a resend within their 5-minute
// deduplication window); the consumer applies it exactly once (the inbox absorbs redeliveries),
// per order in version order (FIFO group = partition key = "order/<id>"; the inbox's version
// gate skips anything older than what was applied).
//
// Each side owns its own schema (its own database in production). Run RunRelay in as many
// processes as you like: lanes are leased, so each order has one publisher at a time. With
// Config.CDC set, RunRelay runs a CDC relay on the outbox's logical replication slot instead
// (one per outbox; starting it takes the outbox over from the polling relays, and a polling
// relay started later takes it back). The tests run both, the CDC one as a cutover right after
// a polling relay was killed mid-batch. In
// production also run core.CleanupOutbox periodically on the outbox store and give the queue a
// redrive policy (dead-letter queue).
package sqsdeploy
