-- The PostgreSQL adapter's statements, loaded by queries.go (internal/sqlfile). {{name}} is an
-- identifier the adapter validated and quoted at construction (names in options.go); nothing
-- else is substituted. The pgx and database/sql paths run the same text.
--
-- Time: coalesce($n::timestamptz, now()) is the caller's injected time, else the database clock
-- (River's pattern). Durations travel as microseconds (bigint).

-- name: MigrateLock
SELECT pg_advisory_xact_lock($1)

-- name: IndexExists
SELECT to_regclass($1) IS NOT NULL

-- name: MetaTable
CREATE TABLE IF NOT EXISTS {{meta}} (name text PRIMARY KEY, value text NOT NULL)

-- name: MetaGet
SELECT value FROM {{meta}} WHERE name = $1

-- name: MetaPut
INSERT INTO {{meta}} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING

-- name: PendingDestinations
-- Pending (unpublished, not parked) records per destination among the first $1 of them in seq
-- order (the pending table, as Blocked), each joined to its outbox row by a primary key lookup
-- (LATERAL ... OFFSET 0 keeps the planner from hashing the whole outbox). Operators only
-- (outboxkit status).
WITH w AS MATERIALIZED (
	SELECT p.seq, p.created_at FROM {{pending}} AS p WHERE p.parked_at IS NULL ORDER BY p.seq LIMIT $1
)
SELECT o.destination, count(*) FROM w
CROSS JOIN LATERAL (SELECT o.destination FROM {{outbox}} AS o WHERE o.seq = w.seq AND o.created_at = w.created_at OFFSET 0) AS o
GROUP BY o.destination

-- name: PublishedRecent
-- The records published in the last $1 seconds, from the settle log (migration 0008; its index
-- on at): the records listed by the most recent entries, entries read until they list $2 records
-- (the last one whole), their oldest entry's time and the database's clock. Operators only
-- (outboxkit status).
WITH w AS MATERIALIZED (
	SELECT s.at, cardinality(s.seqs) AS n,
		sum(cardinality(s.seqs)) OVER (ORDER BY s.at DESC ROWS UNBOUNDED PRECEDING) AS total
	FROM {{settled}} AS s
	WHERE s.at > now() - make_interval(secs => $1)
	ORDER BY s.at DESC LIMIT $2
)
SELECT coalesce(sum(w.n), 0)::bigint, min(w.at), now() FROM w WHERE w.total - w.n < $2

-- name: LanesFill
INSERT INTO {{lanes}} (lane) SELECT g FROM generate_series(0, $1::int - 1) AS g
	ON CONFLICT (lane) DO NOTHING

-- name: ScriptMetaPut
-- MigrationSQL: MetaPut with the literals {{key}} and {{value}} the adapter quotes (a script has
-- no parameters).
INSERT INTO {{meta}} (name, value) VALUES ({{key}}, {{value}}) ON CONFLICT (name) DO NOTHING

-- name: ScriptLanesFill
-- MigrationSQL: LanesFill with the lane count {{value}} as a literal.
INSERT INTO {{lanes}} (lane) SELECT g FROM generate_series(0, {{value}} - 1) AS g
	ON CONFLICT (lane) DO NOTHING

-- name: LaneCount
SELECT count(*) FROM {{lanes}}

-- name: DropLegacyIndexes
-- A new outbox (migrations 0001 and 0008 applied by the same Migrate): the outbox's partial
-- indexes on published_at IS NULL serve only relays of versions before the pending layout, which
-- never ran on it. Left in place, the pending one would get an entry for every row (published_at
-- stays NULL since migration 0008). An upgraded outbox keeps them for the earlier relays still
-- running during the rollout.
DROP INDEX IF EXISTS {{schema}}.{{pending_idx}};
DROP INDEX IF EXISTS {{schema}}.{{failed_idx}}

-- name: AggverIndex
CREATE UNIQUE INDEX IF NOT EXISTS {{aggver_idx}}
	ON {{outbox}} (aggregate_type, aggregate_id, aggregate_version, type) WHERE aggregate_version > 0

-- name: Insert
-- One statement for any number of records: arrays unnested in order, so seq follows the
-- order of the call. $15 is the Store's database (NULL until LaneCount learns it: no check):
-- in a transaction on another database nothing is inserted (core.ErrInvalidTx). The pending rows
-- (migration 0008) are written by the same statement, from the outbox insert's RETURNING; the
-- transaction-local outboxkit.pending_layout, set before the first row is inserted (a one-time
-- filter), keeps the migration's trigger for writers of earlier versions from firing.
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE current_database() = coalesce($15::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertPartitioned
-- Insert on a partitioned outbox: the IDs first, in the same statement, so that a duplicate
-- violates the side table's key. $15 as in Insert.
WITH ids AS (INSERT INTO {{ids}} (id) SELECT unnest($1::text[]) WHERE current_database() = coalesce($15::text, current_database())),
o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE current_database() = coalesce($15::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: Heartbeat
-- $1 owner, $2 now, $3 ttl (µs). Expired registrations older than an hour are removed on the
-- way, skipping rows another heartbeat holds.
WITH up AS (
	INSERT INTO {{workers}} (owner, expires_at)
	VALUES ($1, coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond')
	ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
	RETURNING owner
), gc AS (
	DELETE FROM {{workers}} WHERE owner = ANY(ARRAY(
		SELECT owner FROM {{workers}}
		WHERE owner <> $1 AND expires_at < coalesce($2::timestamptz, now()) - interval '1 hour'
		FOR UPDATE SKIP LOCKED))
)
SELECT (SELECT count(*) FROM up) + count(*) FROM {{workers}}
WHERE owner <> $1 AND expires_at > coalesce($2::timestamptz, now())

-- name: HeartbeatLeave
WITH del AS (DELETE FROM {{workers}} WHERE owner = $1)
SELECT count(*) FROM {{workers}} WHERE owner <> $1 AND expires_at > coalesce($2::timestamptz, now())

-- name: ClaimSkipLocked
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when $5 is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- A lane is claimable when it is free, its lease expired, or the sign of life its lease was
-- taken with is gone (core.Liveness: no session holds the advisory lock ($6 class, live_pid) any
-- more). $1 owner, $2 now, $3 ttl (µs), $4 max, $5 publisher generation, $6 liveness class, $7
-- the claimer's live_pid (NULL without a sign of life). Rows: lane, owner, generation,
-- lease_until, taken_over (the lane had an owner: read from the statement's snapshot, before
-- the update; core.Lease.TakenOver, informational), fenced. ARRAY(...) keeps the LIMIT
-- however stale the statistics are (IN (SELECT ... LIMIT n) may lock every candidate); the outer
-- WHERE repeats the predicate for the row as updated.
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}}
	SET owner = $1, generation = generation + 1, live_pid = $7::int,
		lease_until = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT lane FROM {{lanes}}
		WHERE (owner = '' OR lease_until <= coalesce($2::timestamptz, now())
			OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
				WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
				  AND k.classid = $6::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
		  AND (SELECT generation FROM pub) = $5::bigint
		ORDER BY lane LIMIT $4
		FOR UPDATE SKIP LOCKED))
	  AND (owner = '' OR lease_until <= coalesce($2::timestamptz, now())
		OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
			WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
			  AND k.classid = $6::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
	  AND (SELECT generation FROM pub) = $5::bigint
	RETURNING lane, owner, generation, lease_until,
		(SELECT o.owner <> '' FROM {{lanes}} AS o WHERE o.lane = {{lanes}}.lane) AS taken_over
)
SELECT lane, owner, generation, lease_until, taken_over, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> $5::bigint

-- name: ClaimAdvisory
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when $5 is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- As ClaimSkipLocked; $8 is the advisory lock class of this outbox's claims. The candidates are read in
-- lane order and the lock function is evaluated lazily until $4 lanes are locked (OFFSET 0 keeps
-- the volatile filter out of the sorted subquery). Locks end with the statement's transaction.
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}}
	SET owner = $1, generation = generation + 1, live_pid = $7::int,
		lease_until = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT c.lane FROM (
			SELECT lane FROM {{lanes}}
			WHERE (owner = '' OR lease_until <= coalesce($2::timestamptz, now())
			OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
				WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
				  AND k.classid = $6::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
			  AND (SELECT generation FROM pub) = $5::bigint
			ORDER BY lane OFFSET 0) AS c
		WHERE pg_try_advisory_xact_lock($8::int, c.lane)
		LIMIT $4))
	  AND (owner = '' OR lease_until <= coalesce($2::timestamptz, now())
		OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
			WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
			  AND k.classid = $6::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
	  AND (SELECT generation FROM pub) = $5::bigint
	RETURNING lane, owner, generation, lease_until,
		(SELECT o.owner <> '' FROM {{lanes}} AS o WHERE o.lane = {{lanes}}.lane) AS taken_over
)
SELECT lane, owner, generation, lease_until, taken_over, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> $5::bigint

-- name: Renew
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when $5 is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- $1 lanes, $2 owners, $3 generations, $4 now, $6 ttl (µs), $5 publisher generation. The lane
-- rows are locked in lane order first (the ARRAY init plan), as Settle does, so the two cannot
-- deadlock; a fenced renewal locks none.
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}} AS l
	SET lease_until = coalesce($4::timestamptz, now()) + $6::bigint * interval '1 microsecond'
	FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
	  AND l.lease_until > coalesce($4::timestamptz, now())
	  AND (SELECT generation FROM pub) = $5::bigint
	  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY($1::int[])
		AND (SELECT generation FROM pub) = $5::bigint ORDER BY lane FOR UPDATE))
	RETURNING l.lane, l.owner, l.generation, l.lease_until
)
SELECT lane, owner, generation, lease_until, false, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> $5::bigint

-- name: PublisherGet
SELECT generation, kind, holder, since FROM {{publisher}}

-- name: PublisherLock
-- AcquireGeneration runs PublisherLock and, unless it joins, PublisherBump in one transaction.
SELECT generation, kind, holder, since FROM {{publisher}} FOR UPDATE

-- name: PublisherBump
-- $1 kind, $2 holder, $3 now.
UPDATE {{publisher}}
SET generation = generation + 1, kind = $1, holder = $2, since = coalesce($3::timestamptz, now())
RETURNING generation, kind, holder, since

-- name: CheckpointGet
SELECT source, position, generation, updated_at FROM {{checkpoint}}

-- name: CheckpointDelete
-- outboxkit cdc release: the next CDC relay starts as on its first run (a backfill).
DELETE FROM {{checkpoint}}

-- name: CheckpointPut
-- $1 source, $2 position, $3 generation. One statement: lock the publisher row FOR SHARE
-- (AcquireGeneration waits, and a waiting save reads the new generation), upsert only when $3 is
-- the current generation, and return the current generation.
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	INSERT INTO {{checkpoint}} AS c (singleton, source, position, generation)
	SELECT true, $1, $2, $3::bigint FROM pub WHERE generation = $3::bigint
	ON CONFLICT (singleton) DO UPDATE SET source = EXCLUDED.source, position = EXCLUDED.position,
		generation = EXCLUDED.generation, updated_at = now()
	RETURNING 1
)
SELECT generation, (SELECT count(*) FROM up) FROM pub

-- name: Release
UPDATE {{lanes}} AS l SET owner = '', live_pid = NULL
FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY($1::int[]) ORDER BY lane FOR UPDATE))

-- name: Fetch
-- $1 lanes, $2 now, $3 limit. The fetch function (migration 0008) walks the pending table in seq
-- order and joins the outbox; a record is skipped when an earlier pending record of its key is
-- parked or not yet due (the pending table's failed index).
SELECT {{cols}} FROM {{pending_fetch_fn}}($1::int[], $2::timestamptz, $3::int) ORDER BY seq

-- name: SettleMark
-- Settle is one statement, so one round trip and its own transaction: lock the leased lane rows
-- (in lane order), list the leases that are not held, and change outbox rows only when that list
-- is empty. $1 lanes, $2 owners, $3 generations, $4 now, $5 published seqs, $6..$9 failures
-- (seq, error, delay µs, park), $10 Options.AsyncSettle: a transaction-local set_config,
-- evaluated with the leases (always at least one row), makes the commit not wait for its WAL
-- flush. It returns the lost lanes.
-- Published rows lose their pending row, and one settle log entry lists them (at = now).
WITH want AS (
	SELECT w.* FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	CROSS JOIN (SELECT set_config('synchronous_commit',
		CASE WHEN $10::bool THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS async
), locked AS (
	SELECT lane, owner, generation, lease_until FROM {{lanes}}
	WHERE lane = ANY($1::int[]) ORDER BY lane FOR UPDATE
), lost AS (
	SELECT w.lane FROM want AS w LEFT JOIN locked AS k ON k.lane = w.lane
	WHERE k.lane IS NULL OR k.owner <> w.owner OR k.generation <> w.generation
	   OR k.lease_until <= coalesce($4::timestamptz, now())
), pub AS (
	DELETE FROM {{pending}}
	WHERE seq = ANY($5::bigint[]) AND lane = ANY($1::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING seq
), log AS (
	INSERT INTO {{settled}} (at, min_seq, max_seq, seqs)
	SELECT coalesce($4::timestamptz, now()), min(seq), max(seq), array_agg(seq) FROM pub
	HAVING count(*) > 0
), fail AS (
	UPDATE {{pending}} AS o
	SET attempts = o.attempts + 1, last_error = f.err,
		next_attempt_at = coalesce($4::timestamptz, now()) + f.delay * interval '1 microsecond',
		parked_at = CASE WHEN f.park THEN coalesce($4::timestamptz, now()) ELSE o.parked_at END
	FROM unnest($6::bigint[], $7::text[], $8::bigint[], $9::bool[]) AS f(seq, err, delay, park)
	WHERE o.seq = f.seq AND o.lane = ANY($1::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING 1
)
SELECT lane FROM lost ORDER BY lane

-- name: SettleDelete
-- As SettleMark, but published rows are deleted (their pending and outbox rows; no log entry).
WITH want AS (
	SELECT w.* FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	CROSS JOIN (SELECT set_config('synchronous_commit',
		CASE WHEN $10::bool THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS async
), locked AS (
	SELECT lane, owner, generation, lease_until FROM {{lanes}}
	WHERE lane = ANY($1::int[]) ORDER BY lane FOR UPDATE
), lost AS (
	SELECT w.lane FROM want AS w LEFT JOIN locked AS k ON k.lane = w.lane
	WHERE k.lane IS NULL OR k.owner <> w.owner OR k.generation <> w.generation
	   OR k.lease_until <= coalesce($4::timestamptz, now())
), pub AS (
	DELETE FROM {{pending}}
	WHERE seq = ANY($5::bigint[]) AND lane = ANY($1::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING seq
), del AS (
	DELETE FROM {{outbox}}
	WHERE seq = ANY(ARRAY(SELECT seq FROM pub))
	  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
), fail AS (
	UPDATE {{pending}} AS o
	SET attempts = o.attempts + 1, last_error = f.err,
		next_attempt_at = coalesce($4::timestamptz, now()) + f.delay * interval '1 microsecond',
		parked_at = CASE WHEN f.park THEN coalesce($4::timestamptz, now()) ELSE o.parked_at END
	FROM unnest($6::bigint[], $7::text[], $8::bigint[], $9::bool[]) AS f(seq, err, delay, park)
	WHERE o.seq = f.seq AND o.lane = ANY($1::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING 1
)
SELECT lane FROM lost ORDER BY lane

-- name: HorizonGet
-- No lock: Inbox.Process reads it after the record's insert, in a new statement (read committed).
SELECT horizon FROM {{horizons}} WHERE consumer = $1

-- name: InboxInsertMany
-- core.InboxBatchStore: InboxInsert for many records of consumer $1 (distinct event IDs), in
-- event ID order (one lock order for every batch); returns the event IDs inserted.
INSERT INTO {{inbox}} (consumer, event_id, digest, source_position, outcome, occurred_at)
SELECT $1, event_id, digest, source_position, outcome, occurred_at
FROM unnest($2::text[], $3::bytea[], $4::text[], $5::smallint[], $6::timestamptz[])
	AS r(event_id, digest, source_position, outcome, occurred_at)
ORDER BY event_id
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING event_id

-- name: InboxGetMany
SELECT event_id, digest, source_position, outcome, occurred_at, processed_at FROM {{inbox}}
WHERE consumer = $1 AND event_id = ANY($2::text[])

-- name: VersionLockMany
-- The rows of the entities $2, locked in entity order.
SELECT entity, version FROM {{versions}} WHERE consumer = $1 AND entity = ANY($2::text[])
ORDER BY entity FOR UPDATE

-- name: VersionEnsureMany
INSERT INTO {{versions}} (consumer, entity) SELECT $1, e FROM unnest($2::text[]) AS r(e) ORDER BY e
ON CONFLICT (consumer, entity) DO NOTHING

-- name: VersionSetMany
INSERT INTO {{versions}} (consumer, entity, version)
SELECT $1, e, v FROM unnest($2::text[], $3::bigint[]) AS r(e, v) ORDER BY e
ON CONFLICT (consumer, entity) DO UPDATE SET version = EXCLUDED.version

-- name: RaiseHorizon
-- Its own transaction, committed before PruneInbox deletes anything below the horizon.
INSERT INTO {{horizons}} AS h (consumer, horizon) VALUES ($1, $2)
ON CONFLICT (consumer) DO UPDATE SET horizon = greatest(h.horizon, EXCLUDED.horizon)
RETURNING horizon

-- name: PruneInbox
-- $2 is the horizon RaiseHorizon returned; delete up to $3 records older than it.
DELETE FROM {{inbox}} WHERE consumer = $1 AND event_id = ANY(ARRAY(
	SELECT event_id FROM {{inbox}}
	WHERE consumer = $1 AND occurred_at < $2::timestamptz
	ORDER BY occurred_at LIMIT $3))

-- name: PruneLock
-- PruneOutbox's first statement, in its transaction: a shared advisory lock that Replay takes
-- exclusively (ReplayLock), so that the deletion's snapshot, taken after it, sees every replay
-- that committed (a replayed row gets a pending row, which the outbox row does not show).
SELECT pg_advisory_xact_lock_shared($1::int, -1)

-- name: ReplayLock
SELECT pg_advisory_xact_lock($1::int, -1)

-- name: ReplayLockOutbox
-- Replay, before it reads the lane count: the outbox's ROW EXCLUSIVE lock (a writer's), which a
-- resize (ResizeLock) waits for and holds back, so no resize runs between the read and the
-- pending rows' insert.
LOCK TABLE {{outbox}} IN ROW EXCLUSIVE MODE

-- name: PruneOutbox
-- $1 published before, $2 seq bound (exclusive), $3 limit. Nothing at or above the lowest
-- pending seq is deleted (every row below it is published); a row published after migration
-- 0008 (published_at NULL) only below the lowest min_seq of the settle log entries at or after
-- $1 (none of them lists it), one published before it when its published_at is before $1 and
-- below that bound as well (a replay may have published it again). The pending table and the
-- log are read in one snapshot, the statement's. Settle log entries below every outbox row go.
WITH b AS MATERIALIZED (
	SELECT (SELECT min(seq) FROM {{pending}}) AS pending_min,
		(SELECT min(min_seq) FROM {{settled}} WHERE at >= $1::timestamptz) AS settled_min,
		set_config('outboxkit.pending_layout', 'on', true) AS layout
), m AS MATERIALIZED (
	-- No outbox row: every entry lists only deleted rows (an entry lists committed rows).
	SELECT coalesce(min(seq), 9223372036854775807) AS seq FROM {{outbox}}
), log AS (
	DELETE FROM {{settled}} WHERE min_seq < (SELECT seq FROM m) AND max_seq < (SELECT seq FROM m)
)
DELETE FROM {{outbox}} WHERE seq = ANY(ARRAY(
	SELECT o.seq FROM {{outbox}} AS o, b
	WHERE o.seq < $2::bigint AND o.seq < coalesce(b.pending_min, $2::bigint)
	  AND o.seq < coalesce(b.settled_min, $2::bigint)
	  AND (o.published_at IS NULL OR o.published_at < $1::timestamptz)
	ORDER BY o.seq LIMIT $3))

-- name: ListAll
-- $1 after seq, $2 limit. A record is unpublished while it has a pending row (migration 0008).
-- Every join is a primary key lookup per row (LATERAL ... OFFSET 0: never a hash of a table).
SELECT {{pcols}} FROM {{outbox}} AS o
LEFT JOIN LATERAL (SELECT * FROM {{pending}} AS q WHERE q.seq = o.seq OFFSET 0) AS p ON true
WHERE o.seq > $1 ORDER BY o.seq LIMIT $2

-- name: ListPending
SELECT {{pcols}} FROM (SELECT * FROM {{pending}} WHERE seq > $1 AND parked_at IS NULL ORDER BY seq LIMIT $2) AS p
CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = p.seq AND r.created_at = p.created_at OFFSET 0) AS o
ORDER BY p.seq

-- name: ListParked
SELECT {{pcols}} FROM (SELECT * FROM {{pending}} WHERE seq > $1 AND parked_at IS NOT NULL ORDER BY seq LIMIT $2) AS p
CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = p.seq AND r.created_at = p.created_at OFFSET 0) AS o
ORDER BY p.seq

-- name: ListPublished
SELECT {{pcols}} FROM {{outbox}} AS o LEFT JOIN {{pending}} AS p ON false
WHERE o.seq > $1 AND NOT EXISTS (SELECT 1 FROM {{pending}} AS q WHERE q.seq = o.seq)
ORDER BY o.seq LIMIT $2

-- name: Stats
-- Bounded cost (operators and the daemon's metrics call it often): never a scan of published
-- rows, and at most $1 rows of the pending table (migration 0008). The unpublished rows are
-- counted on the pending table up to $1 (Go's cap; beyond it Go takes the planner's estimate of
-- the pending table's rows), the parked ones on its failed index; the outbox's rows are
-- estimated as the planner does (reltuples per page at the last ANALYZE or vacuum, times the
-- pages the table has now; 0 before any), summed over the table and its partitions, with their
-- size in bytes (Go counts the published rows exactly, with StatsPublished, when the table is
-- small); the oldest pending record is the first pending row in seq order that is not parked.
WITH unpub AS (
	SELECT count(*) AS n FROM (SELECT 1 FROM {{pending}} LIMIT $1) AS u
), parked AS (
	SELECT count(*) AS n FROM {{pending}}
	WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL
), rel AS (
	SELECT c.reltuples, c.relpages, pg_catalog.pg_relation_size(c.oid) AS bytes FROM pg_catalog.pg_class AS c
	WHERE c.oid = '{{outbox}}'::regclass
	UNION ALL
	SELECT c.reltuples, c.relpages, pg_catalog.pg_relation_size(c.oid) FROM pg_catalog.pg_inherits AS i
	JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = '{{outbox}}'::regclass
), est AS (
	SELECT coalesce(sum(CASE WHEN reltuples > 0 AND relpages > 0
		THEN reltuples / relpages * (bytes / current_setting('block_size')::bigint) ELSE 0 END), 0)::bigint AS n,
		coalesce(sum(bytes), 0)::bigint AS bytes
	FROM rel
), pest AS (
	SELECT coalesce(sum(CASE WHEN c.reltuples > 0 AND c.relpages > 0
		THEN c.reltuples / c.relpages * (pg_catalog.pg_relation_size(c.oid) / current_setting('block_size')::bigint)
		ELSE 0 END), 0)::bigint AS n
	FROM pg_catalog.pg_class AS c WHERE c.oid = '{{pending}}'::regclass
)
SELECT unpub.n, parked.n, est.n, est.bytes, pest.n,
	(SELECT p.created_at FROM {{pending}} AS p WHERE p.parked_at IS NULL ORDER BY p.seq LIMIT 1)
FROM unpub, parked, est, pest

-- name: StatsPublished
-- The exact count of published rows (those without a pending row), for a small table only (see
-- Stats).
SELECT count(*) FROM {{outbox}} AS o WHERE NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)

-- name: Blocked
-- Pending records held back by an earlier parked record of their partition key, among the
-- first $1 unpublished records from the first parked one on (the pending index; a lower bound
-- beyond them). The parked keys come from the failed index. Operators only (outboxkit status),
-- and run only when something is parked.
WITH p AS MATERIALIZED (
	SELECT partition_key, min(seq) AS seq FROM {{pending}}
	WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL
	GROUP BY partition_key
), w AS MATERIALIZED (
	SELECT o.seq, o.partition_key FROM {{pending}} AS o
	WHERE o.parked_at IS NULL AND o.seq > (SELECT min(seq) FROM p)
	ORDER BY o.seq LIMIT $1
)
SELECT count(*) FROM w JOIN p ON w.partition_key = p.partition_key AND w.seq > p.seq

-- name: Lanes
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{pending}}
WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL

-- name: Unpark
-- Rows with something to clear always have parked_at or next_attempt_at set (a failure sets
-- next_attempt_at), so the pending table's failed index finds them.
UPDATE {{pending}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = $1 AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)

-- name: Notify
-- Sent without arguments: one simple-protocol round trip, its own small transaction that does
-- not wait for the WAL flush.
BEGIN; SET LOCAL synchronous_commit = off; NOTIFY {{channel}}; COMMIT

-- name: Listen
LISTEN {{channel}}

-- name: Partitions
-- Partitioned outbox. $1 the outbox (regclass text).
SELECT c.relname::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass ORDER BY c.relname

-- name: PartitionCheck
-- Whether {{partition}} holds only rows PruneOutbox would delete: every seq below $2, below the
-- lowest pending seq (so none unpublished) and below the lowest min_seq of the settle log entries
-- at or after $1, none published (before migration 0008) at or after $1. Index lookups only
-- (pending and settle log indexes, published_at index, primary key), so that it is cheap under
-- the table lock.
SELECT NOT EXISTS (SELECT 1 FROM {{partition}} WHERE published_at IS NOT NULL AND published_at >= $1::timestamptz)
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0) < $2::bigint
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0)
       < coalesce((SELECT min(seq) FROM {{pending}}), $2::bigint)
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0)
       < coalesce((SELECT min(min_seq) FROM {{settled}} WHERE at >= $1::timestamptz), $2::bigint)

-- name: PartitionIDs
DELETE FROM {{ids}} WHERE created_at >= $1::timestamptz AND created_at < $2::timestamptz

-- name: CreatePartition
-- The partition of the outbox for [{{from}}, {{to}}): DDL takes no parameters, so the bounds are
-- timestamp literals the adapter formats.
CREATE TABLE IF NOT EXISTS {{partition}} PARTITION OF {{outbox}} FOR VALUES FROM ({{from}}) TO ({{to}})

-- name: Now
SELECT now()

-- name: PartitionCount
SELECT count(*) FROM {{partition}}

-- name: PartitionLockTimeout
-- DropPartitions waits at most this long for the outbox's lock.
SET LOCAL lock_timeout = '5s'

-- name: PartitionLockOutbox
LOCK TABLE {{outbox}} IN ACCESS EXCLUSIVE MODE

-- name: PartitionDrop
DROP TABLE {{partition}}

-- name: ReplayByIDs
-- Replay's selection by ID ($1), locked so that a concurrent cleanup cannot delete it meanwhile;
-- published when it has no pending row.
SELECT o.seq, o.id, o.partition_key, NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)
FROM {{outbox}} AS o WHERE o.id = ANY($1::text[]) ORDER BY o.seq FOR UPDATE OF o

-- name: ReplayByKey
-- Replay's selection by key ($1), created at or after $2, at most $3 rows, locked.
SELECT o.seq, o.id, o.partition_key, true FROM {{outbox}} AS o
WHERE o.partition_key = $1 AND o.created_at >= $2::timestamptz
  AND NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT $3 FOR UPDATE OF o

-- name: KeyUnpublished
-- Whether key $1 has an unpublished row (a pending row; walks the pending table).
SELECT EXISTS (SELECT 1 FROM {{pending}} WHERE partition_key = $1)

-- name: Replay
-- Puts the published rows $1 back to pending, as never attempted: a pending row each, in lane
-- $2 (their key's lane under the current lane count). Their earlier publication is forgotten, so
-- that List reads the next one: each seq leaves the settle log entry that lists it (every seq is
-- in at most one entry, the one of its latest publication; the entry keeps its min_seq and
-- max_seq, which only makes cleanup's bound more careful), and a row published before migration
-- 0008 loses its published_at and status columns (grants.sql lets the operator role update them).
WITH unlog AS (
	UPDATE {{settled}} AS s SET seqs = ARRAY(SELECT x FROM unnest(s.seqs) AS x WHERE x <> ALL($1::bigint[]))
	WHERE s.ctid = ANY(ARRAY(
		SELECT e.ctid FROM unnest($1::bigint[]) AS r(seq)
		CROSS JOIN LATERAL (SELECT l.ctid FROM {{settled}} AS l
			WHERE l.min_seq <= r.seq AND l.max_seq >= r.seq AND r.seq = ANY(l.seqs)
			ORDER BY l.min_seq DESC LIMIT 1) AS e))
), unmark AS (
	UPDATE {{outbox}} SET published_at = NULL, attempts = 0, next_attempt_at = NULL, last_error = '', parked_at = NULL
	WHERE seq = ANY($1::bigint[]) AND published_at IS NOT NULL
)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at)
SELECT o.seq, r.lane, o.partition_key, o.created_at
FROM unnest($1::bigint[], $2::int[]) AS r(seq, lane) JOIN {{outbox}} AS o ON o.seq = r.seq
ON CONFLICT (seq) DO NOTHING

-- name: AuditInsert
-- $1 actor, $2 command, $3 arguments (JSON text), $4 rows affected (-1: an inbox prune's row
-- until its last deletion sets it, AuditSetRows); returns the row's id.
INSERT INTO {{audit}} (actor, command, arguments, rows_affected) VALUES ($1, $2, $3, $4)
RETURNING id

-- name: AuditList
-- $1 since (NULL: all), $2 limit: the latest rows, newest first.
SELECT id, at, actor, command, arguments, rows_affected FROM {{audit}}
WHERE $1::timestamptz IS NULL OR at >= $1::timestamptz
ORDER BY id DESC LIMIT $2

-- name: AuditSetRows
-- $1 id, $2 rows: fills in the rows of a row AuditInsert wrote with -1, once.
UPDATE {{audit}} SET rows_affected = $2 WHERE id = $1 AND rows_affected = -1

-- name: ResetLanes
-- outboxkit lanes reset: end the leases of the selected lanes that have an owner. $1 lanes
-- (empty: any), $2 owner ('': any). The rows are locked in lane order first (the ARRAY init
-- plan), as Settle and Renew do, so that none of them deadlocks with it; the outer WHERE
-- repeats the predicate for a row that changed while the lock was awaited. The lease expires
-- at the transaction's start (a settle or renewal of the old lease is refused: owner,
-- generation and expiry all differ), live_pid (the sign of life) is cleared, and the new
-- generation fences the old owner's marks; any claimer takes the lane as a free one.
UPDATE {{lanes}}
SET owner = '', live_pid = NULL, lease_until = now(), generation = generation + 1
WHERE lane = ANY(ARRAY(
	SELECT lane FROM {{lanes}}
	WHERE owner <> '' AND (cardinality($1::int[]) = 0 OR lane = ANY($1::int[]))
	  AND ($2::text = '' OR owner = $2::text)
	ORDER BY lane FOR UPDATE))
  AND owner <> '' AND ($2::text = '' OR owner = $2::text)

-- name: InsertChecked
-- Insert (InsertLanes) checked against the lane count the lanes were computed with: $15 is that
-- count; nothing is inserted when the recorded count differs. The count is read once per
-- statement, after the statement's table lock: under READ COMMITTED in the statement's snapshot
-- (taken after that lock), otherwise by the migration 0007 function, FOR SHARE. $16 as Insert's
-- $15. The pending rows as in Insert.
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = $15::text
  AND current_database() = coalesce($16::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertPartitionedChecked
-- InsertPartitioned checked as InsertChecked; the IDs go to the side table only when the count
-- and the database ($16) match.
WITH ok AS MATERIALIZED (SELECT current_database() = coalesce($16::text, current_database()) AND (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = $15::text AS ok),
ids AS (INSERT INTO {{ids}} (id) SELECT unnest($1::text[]) FROM ok WHERE ok.ok),
o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
	$8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE (SELECT ok FROM ok) AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: LaneCountChecked
-- The recorded lane count, whether migration 0007 (checked inserts, resizes) is applied, and
-- the database (the inserts' $15/$16).
SELECT m.value, EXISTS (SELECT 1 FROM {{meta}} WHERE name = 'migration:0007_lanes_resize'), current_database()
FROM {{meta}} AS m WHERE m.name = 'lanes'

-- name: CurrentDatabase
SELECT current_database()

-- name: ResizeLock
-- A resize's first step: wait for the writer transactions that inserted (and for settles and
-- cleanups in flight) and hold the next ones back until it ends; reads (the relays' fetches) go
-- on. See migration 0007. The outbox alone: writers write the pending table in the same
-- statement (locking the two tables in an order that depends on the plan's cache, so locking
-- both here could deadlock with them), and Replay takes the outbox's lock too (ReplayLockOutbox).
LOCK TABLE {{outbox}} IN SHARE ROW EXCLUSIVE MODE

-- name: LaneCountLocked
-- The lane count's meta row FOR UPDATE: REPEATABLE READ and SERIALIZABLE writers read it FOR
-- SHARE (migration 0007).
SELECT value FROM {{meta}} WHERE name = 'lanes' FOR UPDATE

-- name: LaneCountShared
-- The lane count read as a checked insert reads it (Replay, after ReplayLockOutbox took the
-- outbox's ROW EXCLUSIVE lock: rows put back to pending get their key's lane under the
-- count a resize cannot change until the replay ends).
SELECT {{lane_count_fn}}()

-- name: LaneCountSet
UPDATE {{meta}} SET value = $1 WHERE name = 'lanes'

-- name: ResizeLeases
-- A resize ends every lease as ResetLanes does (owner and sign of life cleared, lease expired,
-- generation incremented), every lane row locked in lane order first, so that a relay's settle
-- of a batch fetched under the old lanes is refused. It returns the lanes that had an owner.
WITH l AS (
	UPDATE {{lanes}}
	SET owner = '', live_pid = NULL, lease_until = now(), generation = generation + 1
	WHERE lane = ANY(ARRAY(SELECT lane FROM {{lanes}} ORDER BY lane FOR UPDATE))
	RETURNING lane, (SELECT o.owner <> '' FROM {{lanes}} AS o WHERE o.lane = {{lanes}}.lane) AS held
)
SELECT count(*) FILTER (WHERE held) FROM l

-- name: ResizeDropLanes
-- $1 the new lane count: the lanes at or above it go.
DELETE FROM {{lanes}} WHERE lane >= $1

-- name: ResizeRows
-- The unpublished rows after seq $1, $2 at a time (the pending table), with their key and lane.
SELECT seq, partition_key, lane FROM {{pending}}
WHERE seq > $1 ORDER BY seq LIMIT $2

-- name: ResizeMove
-- $1 seqs, $2 their new lanes: the rows whose lane changes.
UPDATE {{pending}} AS o SET lane = m.lane
FROM unnest($1::bigint[], $2::int[]) AS m(seq, lane)
WHERE o.seq = m.seq AND o.lane <> m.lane


-- name: InsertOne
-- Insert of a single record (most producer transactions): the same statement with scalar
-- parameters instead of 14 one-element arrays, whose binary encoding and unnest cost a
-- saturated server and client 14-23% of a one-event transaction (BENCHMARKS.md, "Producer
-- cost"). $1..$14 as Insert's arrays' elements, $15 as Insert's.
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT $1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::text, $9::bytea,
	$10::text::jsonb, $11::text, $12::text, $13::text, $14::int
WHERE current_database() = coalesce($15::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertOneChecked
-- InsertChecked of a single record, with scalar parameters as InsertOne: $15 the lane count,
-- $16 the database, as InsertChecked's.
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT $1::text, $2::text, $3::text, $4::bigint, $5::text, $6::text, $7::text, $8::text, $9::bytea,
	$10::text::jsonb, $11::text, $12::text, $13::text, $14::int
WHERE (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = $15::text
  AND current_database() = coalesce($16::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o
