-- Options.Partitioning: the outbox partitioned by created_at, created before 0001_outbox (whose
-- CREATE TABLE IF NOT EXISTS then keeps it, and which adds the same indexes, fetch function and
-- trigger to it). A partitioned table's unique keys must contain the partition key, so:
--   * the primary key is (seq, created_at) (seq alone stays unique: one sequence);
--   * event IDs are kept unique by the narrow side table {{ids}}, written by the same INSERT
--     statement; its rows leave with their partition (DropPartitions), so an ID is refused
--     again for as long as the partition of its first event exists.

CREATE TABLE IF NOT EXISTS {{outbox}} (
    seq               bigserial   NOT NULL,
    id                text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL DEFAULT 0,
    type              text        NOT NULL,
    schema_id         text        NOT NULL DEFAULT '',
    partition_key     text        NOT NULL,
    destination       text        NOT NULL DEFAULT '',
    payload           bytea       NOT NULL DEFAULT '\x',
    headers           jsonb       NOT NULL DEFAULT '{}',
    tenant            text        NOT NULL DEFAULT '',
    causation_id      text        NOT NULL DEFAULT '',
    correlation_id    text        NOT NULL DEFAULT '',
    lane              integer     NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    published_at      timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_error        text        NOT NULL DEFAULT '',
    parked_at         timestamptz,
    PRIMARY KEY (seq, created_at)
) PARTITION BY RANGE (created_at);

-- Published rows by publication time: DropPartitions checks "all published before the cut-off"
-- of a partition with an index lookup, not a scan, while it holds the table lock.
CREATE INDEX IF NOT EXISTS {{pub_idx}} ON {{outbox}} (published_at) WHERE published_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS {{ids}} (
    id         text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS {{ids_idx}} ON {{ids}} (created_at);
