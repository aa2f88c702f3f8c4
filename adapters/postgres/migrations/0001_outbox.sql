-- The outbox, its lanes and its relay workers. Identifiers in double braces are substituted,
-- validated and quoted, when the Store is constructed.

CREATE TABLE IF NOT EXISTS {{outbox}} (
    seq               bigserial   PRIMARY KEY,
    id                text        NOT NULL UNIQUE,
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
    -- The relay's status columns: the only ones that may change after insert.
    published_at      timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz,
    last_error        text        NOT NULL DEFAULT '',
    parked_at         timestamptz
);

-- Unpublished rows in delivery order: the relay's fetch walks this index and never reads a
-- published row. It shrinks back to nothing when the relay keeps up.
CREATE INDEX IF NOT EXISTS {{pending_idx}} ON {{outbox}} (seq) WHERE published_at IS NULL;

-- Failed or parked unpublished rows, by partition key: the per-key blocking check of the fetch
-- and Unpark. Normally (almost) empty.
CREATE INDEX IF NOT EXISTS {{failed_idx}} ON {{outbox}} (partition_key, seq)
    WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL);

-- The relay's fetch: deliverable records of the given lanes in seq order. It walks the pending
-- index in order and stops at the limit. It is a function only to pin that plan: an outbox is
-- usually analysed while (nearly) empty, and with such statistics the planner prefers to read
-- every pending row and sort them, which costs the whole backlog per batch. Sorting is
-- disabled for this query alone (the SET clauses of the function).
CREATE OR REPLACE FUNCTION {{fetch_fn}}(p_lanes integer[], p_now timestamptz, p_limit integer)
RETURNS SETOF {{outbox}} LANGUAGE sql STABLE
SET enable_sort = off SET enable_bitmapscan = off
AS $fn$
    -- The blocked keys (each with its first parked or not-yet-due record) are computed once per
    -- fetch, never probed per candidate row: with statistics taken right after a drain, a
    -- correlated probe was planned on the pending index and read the backlog once per row.
    -- DISTINCT ON ... ORDER BY partition_key, seq (with sorting disabled) can only be served by
    -- the failed index, which is (almost) empty, so this costs nothing in the normal case.
    WITH blocked AS MATERIALIZED (
        SELECT DISTINCT ON (b.partition_key) b.partition_key, b.seq FROM {{outbox}} AS b
        WHERE b.published_at IS NULL AND (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
          AND (b.parked_at IS NOT NULL OR b.next_attempt_at > coalesce(p_now, now()))
          AND b.lane = ANY(p_lanes)
        ORDER BY b.partition_key, b.seq
    )
    SELECT o.* FROM {{outbox}} AS o
    WHERE o.published_at IS NULL
      AND o.lane = ANY(p_lanes)
      AND o.parked_at IS NULL
      AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= coalesce(p_now, now()))
      AND NOT EXISTS (SELECT 1 FROM blocked WHERE blocked.partition_key = o.partition_key AND blocked.seq < o.seq)
    ORDER BY o.seq
    LIMIT p_limit
$fn$;

CREATE TABLE IF NOT EXISTS {{lanes}} (
    lane        integer     PRIMARY KEY,
    owner       text        NOT NULL DEFAULT '',
    generation  bigint      NOT NULL DEFAULT 0,
    lease_until timestamptz NOT NULL DEFAULT '1970-01-01 00:00:00+00'
);

CREATE TABLE IF NOT EXISTS {{workers}} (
    owner      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- Semantic columns are immutable after insert. The trigger fires only for UPDATEs that name one
-- of them (UPDATE OF ...), so the relay's updates of status columns do not pay for it.
CREATE OR REPLACE FUNCTION {{fn}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF (NEW.seq, NEW.id, NEW.aggregate_type, NEW.aggregate_id, NEW.aggregate_version, NEW.type,
        NEW.schema_id, NEW.partition_key, NEW.destination, NEW.payload, NEW.headers, NEW.tenant,
        NEW.causation_id, NEW.correlation_id, NEW.lane, NEW.created_at)
       IS DISTINCT FROM
       (OLD.seq, OLD.id, OLD.aggregate_type, OLD.aggregate_id, OLD.aggregate_version, OLD.type,
        OLD.schema_id, OLD.partition_key, OLD.destination, OLD.payload, OLD.headers, OLD.tenant,
        OLD.causation_id, OLD.correlation_id, OLD.lane, OLD.created_at) THEN
        RAISE EXCEPTION 'outbox: only published_at, attempts, next_attempt_at, last_error and parked_at may change'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$fn$;

DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = '{{outbox}}'::regclass AND tgname = '{{trigger_name}}') THEN
        CREATE TRIGGER {{trigger}}
            BEFORE UPDATE OF seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
                partition_key, destination, payload, headers, tenant, causation_id, correlation_id,
                lane, created_at
            ON {{outbox}} FOR EACH ROW EXECUTE FUNCTION {{fn}}();
    END IF;
END
$do$;
