-- What a relay's batch costs the server (issue 36, item 6).
--
-- The fetch without copying records twice. The fetch function of migration
-- 0008 returns whole outbox rows: PostgreSQL collects a set-returning function's rows in a
-- tuplestore before the calling statement reads them, and the statement then sorted them again
-- (ORDER BY seq), so each ~1 KiB record was copied twice in the server on its way to the relay:
-- a fifth of the server's time in a drain. This function walks the pending table as that one
-- does, with the same pinned plan (the pending table's primary key in seq order, no sort, no
-- bitmap scan, no JIT: migration 0010), and returns only the narrow pending rows (in PL/pgSQL with
-- a generic plan, so that a session plans it once: a SQL function with SET clauses is planned
-- again on every call, and PL/pgSQL would plan it for each call's parameters, whose estimates
-- cannot change the plan these settings pin); the fetch
-- statement looks each record up in the outbox by its primary key (LATERAL ... OFFSET 0: one
-- lookup per row, in the walk's order). A partitioned outbox keeps the fetch of migration 0008,
-- whose lookups run inside the function (with jit = off): the same join in a statement is
-- priced over every partition and could pass the JIT thresholds.
--
-- {{pending_fetch_fn}} stays for relays of the earlier versions during a rolling upgrade.
CREATE OR REPLACE FUNCTION {{pending_walk_fn}}(p_lanes integer[], p_now timestamptz, p_limit integer)
RETURNS TABLE (seq bigint, lane integer, created_at timestamptz, attempts integer,
    next_attempt_at timestamptz, last_error text, parked_at timestamptz)
LANGUAGE plpgsql STABLE ROWS 1000
SET enable_sort = off SET enable_bitmapscan = off SET jit = off SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH blocked AS MATERIALIZED (
        SELECT DISTINCT ON (b.partition_key) b.partition_key, b.seq FROM {{pending}} AS b
        WHERE (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
          AND (b.parked_at IS NOT NULL OR b.next_attempt_at > coalesce(p_now, now()))
          AND b.lane = ANY(p_lanes)
        ORDER BY b.partition_key, b.seq
    )
    SELECT p.seq, p.lane, p.created_at, p.attempts, p.next_attempt_at, p.last_error, p.parked_at
    FROM {{pending}} AS p
    WHERE p.lane = ANY(p_lanes)
      AND p.parked_at IS NULL
      AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= coalesce(p_now, now()))
      AND NOT EXISTS (SELECT 1 FROM blocked WHERE blocked.partition_key = p.partition_key AND blocked.seq < p.seq)
    ORDER BY p.seq
    LIMIT p_limit;
END
$fn$;

-- The settle log's seq lists with lz4 instead of pglz: each settle's list (8 KiB for 1,000
-- records) is compressed on insert, and pglz took ~1.5% of the server's time in a drain. A server
-- built without lz4 keeps pglz.
DO $do$
BEGIN
    ALTER TABLE {{settled}} ALTER COLUMN seqs SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'outboxkit: this server has no lz4; the settle log stays compressed with pglz';
END
$do$;
