-- Options.InboxPartitioning: the inbox partitioned by processed_at (the database clock when its
-- record was written), created before 0002_inbox (whose CREATE TABLE IF NOT EXISTS then keeps
-- it, and which adds the (consumer, occurred_at) index and the horizons and versions tables to
-- it) with the columns of 0009_inbox_scope (which then finds them and leaves it). A
-- partitioned table's unique keys must contain the partition key, so the primary key is
-- (consumer, event_id, source, tenant, processed_at): a record's key is kept unique across
-- partitions by a transaction-level advisory lock on its hash while the store looks for it
-- and inserts it (InboxLockKeys). Partitions hold the records written in their range, so
-- inserts only ever go to the current one; PruneInbox drops a partition once every record in
-- it is older than its consumer's horizon.

CREATE TABLE IF NOT EXISTS {{inbox}} (
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    digest          bytea       NOT NULL,
    source_position text        NOT NULL DEFAULT '',
    outcome         smallint    NOT NULL,
    -- The zero time (0001-01-01) when the message carried none: older than any horizon.
    occurred_at     timestamptz NOT NULL,
    processed_at    timestamptz NOT NULL DEFAULT now(),
    source          text        NOT NULL DEFAULT '',
    tenant          text        NOT NULL DEFAULT '',
    CONSTRAINT {{inbox_pkey}} PRIMARY KEY (consumer, event_id, source, tenant, processed_at)
) PARTITION BY RANGE (processed_at);
