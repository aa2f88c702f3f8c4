-- Lane count changes (Store.ResizeLanes, `outboxkit lanes resize`).
--
-- {{lane_count_fn}}() returns the recorded lane count: every checked insert (Store.InsertLanes,
-- used by core.Outbox.Write) compares it with the count its lanes were computed with. A resize
-- first locks the outbox table IN SHARE ROW EXCLUSIVE MODE, so it waits for the writer
-- transactions that inserted (their ROW EXCLUSIVE lock lasts until they end) and the inserts
-- that come next wait for it. Under READ COMMITTED that is enough: the insert takes its table
-- lock before the function reads, and the function's read takes a snapshot of its own (VOLATILE),
-- so a waiting insert reads the count the resize committed. A REPEATABLE READ or SERIALIZABLE
-- transaction reads with its first snapshot, which may be older than the resize: there the row
-- is read FOR SHARE (the resize locks it FOR UPDATE), which fails with a serialization error
-- when the resize changed it after that snapshot. SECURITY DEFINER: writers need no UPDATE
-- privilege on the meta table for that lock.
CREATE OR REPLACE FUNCTION {{lane_count_fn}}() RETURNS text LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v text;
BEGIN
    IF current_setting('transaction_isolation') = 'read committed' THEN
        SELECT value INTO v FROM {{meta}} WHERE name = 'lanes';
    ELSE
        SELECT value INTO v FROM {{meta}} WHERE name = 'lanes' FOR SHARE;
    END IF;
    RETURN v;
END
$fn$;

-- The immutability trigger allows one more change: the lane alone, in a transaction that set
-- outboxkit.lanes_resize (a resize moving the unpublished rows to their new lanes, or a replay
-- putting rows back to pending in their key's lane under the current count).
CREATE OR REPLACE FUNCTION {{fn}}() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF (NEW.seq, NEW.id, NEW.aggregate_type, NEW.aggregate_id, NEW.aggregate_version, NEW.type,
        NEW.schema_id, NEW.partition_key, NEW.destination, NEW.payload, NEW.headers, NEW.tenant,
        NEW.causation_id, NEW.correlation_id, NEW.created_at)
       IS DISTINCT FROM
       (OLD.seq, OLD.id, OLD.aggregate_type, OLD.aggregate_id, OLD.aggregate_version, OLD.type,
        OLD.schema_id, OLD.partition_key, OLD.destination, OLD.payload, OLD.headers, OLD.tenant,
        OLD.causation_id, OLD.correlation_id, OLD.created_at)
       OR (NEW.lane IS DISTINCT FROM OLD.lane
           AND coalesce(current_setting('outboxkit.lanes_resize', true), '') <> 'on') THEN
        RAISE EXCEPTION 'outbox: only published_at, attempts, next_attempt_at, last_error and parked_at may change'
            USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END
$fn$;
