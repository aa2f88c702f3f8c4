// Package kafka is a core.Sink that produces outbox messages to Apache Kafka with franz-go
// (kgo), and a Consumer that reads them in a consumer group and processes each through a
// core.Inbox. core.Message.Destination is the topic the relay's core.Router chose (trusted
// configuration, never the payload).
//
// # Sink guarantees
//
//   - The record key is the partition key (core.Message.GroupID), so with the client's
//     partitioner (franz-go's default hashes keys like the Java client) one key stays in one
//     partition, and the idempotent producer (acks=all; New refuses a client without it)
//     keeps the order of a partition without duplicates from its own retries.
//   - One outcome per message: nil only once the broker acknowledged the record. Per key the
//     acknowledged messages form a prefix (core.Sink, kept by package sinks/batcher): when
//     record n of a key fails, the key's later records of the same Send call are reported
//     core.ErrNotAcknowledged even if the broker took them (the resend is a duplicate, never a
//     loss). A Send produces to at most Options.Concurrency topics at once.
//   - A record larger than the client's kgo.ProducerBatchMaxBytes (default about 1 MB; key,
//     value and headers) is not sent: permanent ErrMessageTooLarge, and the later messages of
//     its key are not sent. There is no claim check for Kafka. A broker refuses whole batches:
//     when it refuses one as too large (a topic's max.message.bytes below the client's
//     ProducerBatchMaxBytes, a configuration error), every record of the batch gets a
//     retryable ErrMessageTooLarge, so that small records are not parked for a large
//     neighbour; the relay's retry policy parks them if the configuration is not fixed.
//   - Errors: Kafka errors that no retry can fix (invalid record, not authorised, unknown
//     topic) are permanent (core.Permanent); timeouts, cancellation, leadership changes and
//     anything unknown are retryable. The sink never retries itself; franz-go's own
//     produce retries run as the client was configured.
//   - Compression is the client's: kgo.ProducerBatchCompression(kgo.ZstdCompression()) or
//     kgo.Lz4Compression().
//
// # Headers: CloudEvents, Kafka protocol binding, binary content mode
//
// The record value is the payload, byte for byte. The headers:
//
//	ce_specversion       "1.0"
//	ce_id                event ID
//	ce_source            Options.Source (default "outboxkit")
//	ce_type              event Type
//	ce_time              outbox CreatedAt, RFC 3339 with nanoseconds, UTC (when known)
//	ce_subject           AggregateType + "/" + AggregateID
//	content-type         the event's "content-type" header, else Options.ContentType (left
//	                     out when both are empty)
//	ce_aggregatetype     extension: AggregateType
//	ce_aggregateid       extension: AggregateID
//	ce_aggregateversion  extension: AggregateVersion in decimal, when > 0
//	ce_partitionkey      extension (CloudEvents partitioning): the partition key
//	ce_schemaid          extension: SchemaID, when set
//	ce_tenant            extension: Tenant, when set
//	ce_causationid       extension: CausationID, when set
//	ce_correlationid     extension: CorrelationID, when set
//	ce_traceparent       extension (CloudEvents distributed tracing): the event's
//	                     "traceparent" header, when set
//	ce_tracestate        the event's "tracestate" header, when set
//	outbox.h.<name>      every other event header <name>, among them the transaction
//	                     group headers outbox.tx_id, outbox.tx_index and outbox.tx_count
//
// Any CloudEvents SDK reads these records as CloudEvents (the tests decode them with
// github.com/cloudevents/sdk-go/v2). The Consumer rebuilds the event from the same headers
// (content-type becomes the event header "content-type").
//
// # Consumer
//
// Consumer[TTx] joins a consumer group (Run), polls records and processes them through
// core.Inbox (ProcessBatch: up to ConsumerOptions.MaxBatch queued records of a partition per
// inbox transaction) with the Handler in the inbox's transaction. See Consumer for its
// guarantees: per-partition order, offsets committed only after the inbox transaction
// committed, revoked partitions finished or abandoned before the revoke completes, a
// dead-letter topic (at once for a record the inbox refuses for good, after
// ConsumerOptions.MaxAttempts otherwise), pausing partitions that fall behind,
// Pause and Resume.
//
// Compressed batches are bounded: one that would decompress to more than
// ConsumerOptions.MaxDecompressedBytes (default 64 MiB) stops Run with a *DecompressError
// before anything of it is applied or committed past. The bound is on size, not on the
// compression ratio: franz-go decompresses a batch with its own bounded readers, and a size
// bound is what keeps a small bomb from reaching memory.
package kafka
