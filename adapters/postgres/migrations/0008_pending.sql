-- The narrow pending layout (issue 15, item 3). The outbox row no longer changes after insert:
-- the relay's status lives in a narrow table with one row per unpublished record, and a record
-- is published when its pending row is gone.
--
-- {{pending}}: one row per unpublished record, written by the writer's own INSERT statement (a
-- CTE on the outbox insert's RETURNING). The relay's fetch walks it in seq order and joins the
-- outbox for the record; a settle deletes the published rows, and failures and parking update
-- only it (never a ~1 KiB outbox row).
CREATE TABLE IF NOT EXISTS {{pending}} (
    seq             bigint      PRIMARY KEY,
    lane            integer     NOT NULL,
    partition_key   text        NOT NULL,
    -- The outbox row's created_at: with it a lookup of the row finds the partition of a
    -- partitioned outbox (run-time pruning) instead of probing every partition's index.
    created_at      timestamptz NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    parked_at       timestamptz
);

-- No index on (lane, seq): the fetch wants seq order across the lanes it holds, which such an
-- index gives only through a sort of those lanes' whole backlog (the plan the fetch function
-- forbids), and nothing else looks rows up by lane; it would cost an entry per insert and delete.
-- The fetch walks the primary key in seq order and filters the lanes, as the earlier fetch walked
-- the outbox's pending index.

-- Failed or parked pending rows by partition key: the fetch's per-key blocking rule, Unpark and
-- the operators' parked counts. Normally (almost) empty.
CREATE INDEX IF NOT EXISTS {{pending_fail_idx}} ON {{pending}} (partition_key, seq)
    WHERE parked_at IS NOT NULL OR next_attempt_at IS NOT NULL;

-- {{settled}}: the settle log, one row per settle that published (written by the settle's own
-- statement, under the same lease fence). A record published after this migration was published
-- at the `at` of the entry with min_seq <= seq <= max_seq and seq = ANY(seqs) (the latest, if a
-- replay published it again); one published before keeps its published_at. Cleanup bounds
-- itself with it (no row at or above the lowest min_seq of the entries at or after the cut-off
-- is deleted) and removes the entries below every outbox row.
CREATE TABLE IF NOT EXISTS {{settled}} (
    at      timestamptz NOT NULL,
    min_seq bigint      NOT NULL,
    max_seq bigint      NOT NULL,
    seqs    bigint[]    NOT NULL
);

CREATE INDEX IF NOT EXISTS {{settled_at_idx}} ON {{settled}} (at);
CREATE INDEX IF NOT EXISTS {{settled_min_idx}} ON {{settled}} (min_seq);

-- Writers and relays of earlier versions, during a rolling upgrade: their INSERTs into the
-- outbox get their pending row from this trigger (unless inserted with published_at set), and their DELETEs (delete-on-publish settles,
-- cleanup) take the pending row with them. This version's statements set the transaction-local
-- setting outboxkit.pending_layout, which the WHEN clause reads per row: for them the trigger
-- never fires (they write and delete the pending rows themselves), so it costs them nothing.
-- SECURITY DEFINER: writer and relay roles of the earlier version lack grants on {{pending}}.
CREATE OR REPLACE FUNCTION {{pending_sync_fn}}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.published_at IS NOT NULL THEN
            RETURN NULL; -- inserted as published: no pending row
        END IF;
        INSERT INTO {{pending}} (seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at)
        VALUES (NEW.seq, NEW.lane, NEW.partition_key, NEW.created_at, NEW.attempts, NEW.next_attempt_at, NEW.last_error, NEW.parked_at)
        ON CONFLICT (seq) DO NOTHING;
        RETURN NULL;
    END IF;
    DELETE FROM {{pending}} WHERE seq = OLD.seq;
    RETURN NULL;
END
$fn$;

-- The new relay's fetch: deliverable pending rows of the given lanes in seq order, joined to
-- the outbox for the record, the status columns from the pending row. As the earlier fetch
-- function, it pins the plan that stale statistics would otherwise lose: the pending table's
-- primary key in seq order up to the limit, then one lookup of the outbox's primary key per row
-- (in one partition of a partitioned outbox: created_at prunes the others at run time)
-- (LATERAL ... OFFSET 0: with a pending table analysed while empty, a plain join was planned
-- with the outbox as the outer side, reading it whole). The rows come in w's order; Fetch sorts
-- them again outside the function (an ORDER BY here would be a sort, which the function's
-- setting prices at 1e10, enough to JIT-compile every fetch).
CREATE OR REPLACE FUNCTION {{pending_fetch_fn}}(p_lanes integer[], p_now timestamptz, p_limit integer)
RETURNS SETOF {{outbox}} LANGUAGE sql STABLE
SET enable_sort = off SET enable_bitmapscan = off
AS $fn$
    WITH blocked AS MATERIALIZED (
        SELECT DISTINCT ON (b.partition_key) b.partition_key, b.seq FROM {{pending}} AS b
        WHERE (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
          AND (b.parked_at IS NOT NULL OR b.next_attempt_at > coalesce(p_now, now()))
          AND b.lane = ANY(p_lanes)
        ORDER BY b.partition_key, b.seq
    ), w AS MATERIALIZED (
        SELECT p.* FROM {{pending}} AS p
        WHERE p.lane = ANY(p_lanes)
          AND p.parked_at IS NULL
          AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= coalesce(p_now, now()))
          AND NOT EXISTS (SELECT 1 FROM blocked WHERE blocked.partition_key = p.partition_key AND blocked.seq < p.seq)
        ORDER BY p.seq
        LIMIT p_limit
    )
    SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
        o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
        o.correlation_id, w.lane, o.created_at, NULL::timestamptz, w.attempts, w.next_attempt_at,
        w.last_error, w.parked_at
    FROM w CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = w.seq AND r.created_at = w.created_at OFFSET 0) AS o
$fn$;

-- Backfill, then the trigger, in Migrate's transaction. CREATE TRIGGER locks the outbox
-- (SHARE ROW EXCLUSIVE): it waits for the writer transactions in flight and holds new inserts
-- back until the migration commits, so the backfill below (a statement, hence a snapshot, taken
-- after the lock) sees every committed row and later inserts fire the trigger.
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_trigger
                   WHERE tgrelid = '{{outbox}}'::regclass AND tgname = '{{pending_sync_name}}') THEN
        CREATE TRIGGER {{pending_sync}}
            AFTER INSERT OR DELETE ON {{outbox}} FOR EACH ROW
            WHEN (current_setting('outboxkit.pending_layout', true) IS DISTINCT FROM 'on')
            EXECUTE FUNCTION {{pending_sync_fn}}();
    END IF;
END
$do$;

INSERT INTO {{pending}} (seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at)
SELECT seq, lane, partition_key, created_at, attempts, next_attempt_at, last_error, parked_at
FROM {{outbox}} WHERE published_at IS NULL
ON CONFLICT (seq) DO NOTHING;

ANALYZE {{pending}};
