-- The PostgreSQL adapter's statements, loaded by queries.go (internal/sqlfile). {{name}} is an
-- identifier the adapter validated and quoted at construction (names in options.go); nothing
-- else is substituted. The pgx and database/sql paths run the same text. Parameters are written
-- :name and declared by the block's "-- param: name GoType description" lines (or taken from
-- another statement by "-- params: Other"); go generate writes their Go structs to
-- queries_gen.go, and the loader numbers them $1, $2, ... in declaration order.
--
-- Time: coalesce(:now::timestamptz, now()) is the caller's injected time, else the database clock
-- (River's pattern). Durations travel as microseconds (bigint).
--
-- dialect: postgres

-- name: MigrateLock
-- param: key int64 the advisory lock of Migrate
SELECT pg_advisory_xact_lock(:key)

-- name: IndexExists
-- param: index string schema-qualified index name
SELECT to_regclass(:index) IS NOT NULL

-- name: MetaTable
CREATE TABLE IF NOT EXISTS {{meta}} (name text PRIMARY KEY, value text NOT NULL)

-- name: MetaGet
-- param: name string
SELECT value FROM {{meta}} WHERE name = :name

-- name: MetaPut
-- param: name string
-- param: value string
INSERT INTO {{meta}} (name, value) VALUES (:name, :value) ON CONFLICT (name) DO NOTHING

-- name: PendingDest
-- Pending (unpublished, not parked) records per destination among the first :limit of them in seq
-- order (the pending table, as Blocked), each joined to its outbox row by a primary key lookup
-- (LATERAL ... OFFSET 0 keeps the planner from hashing the whole outbox). Operators only
-- (outboxkit status).
-- param: limit int pending records read
WITH w AS MATERIALIZED (
	SELECT p.seq, p.created_at FROM {{pending}} AS p WHERE p.parked_at IS NULL ORDER BY p.seq LIMIT :limit
)
SELECT o.destination, count(*) FROM w
CROSS JOIN LATERAL (SELECT o.destination FROM {{outbox}} AS o WHERE o.seq = w.seq AND o.created_at = w.created_at OFFSET 0) AS o
GROUP BY o.destination

-- name: PublishedRecent
-- The records published in the last :window seconds, from the settle log (migration 0008; its index
-- on at): the records listed by the most recent entries, entries read until they list :limit records
-- (the last one whole), their oldest entry's time and the database's clock. Operators only
-- (outboxkit status).
-- param: window float64 seconds
-- param: limit int records read from the log
WITH w AS MATERIALIZED (
	SELECT s.at, cardinality(s.seqs) AS n,
		sum(cardinality(s.seqs)) OVER (ORDER BY s.at DESC ROWS UNBOUNDED PRECEDING) AS total
	FROM {{settled}} AS s
	WHERE s.at > now() - make_interval(secs => :window)
	ORDER BY s.at DESC LIMIT :limit
)
SELECT coalesce(sum(w.n), 0)::bigint, min(w.at), now() FROM w WHERE w.total - w.n < :limit

-- name: LanesFill
-- param: lanes int the lane count
INSERT INTO {{lanes}} (lane) SELECT g FROM generate_series(0, :lanes::int - 1) AS g
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

-- name: Ingress
-- The relay's reading of the producers' rate (driver.IngressCounter): the highest seq committed,
-- the last entry of the primary key.
SELECT coalesce(max(seq), 0) FROM {{outbox}}

-- name: DropLegacy
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
-- order of the call. :database is the Store's database (NULL until LaneCount learns it: no check):
-- in a transaction on another database nothing is inserted (core.ErrInvalidTx). The pending rows
-- (migration 0008) are written by the same statement, from the outbox insert's RETURNING; the
-- transaction-local outboxkit.pending_layout, set before the first row is inserted (a one-time
-- filter), keeps the migration's trigger for writers of earlier versions from firing.
-- param: ids []string
-- param: aggregate_types []string
-- param: aggregate_ids []string
-- param: aggregate_versions []int64
-- param: types []string
-- param: schema_ids []string
-- param: partition_keys []string
-- param: destinations []string
-- param: payloads [][]byte
-- param: headers []string JSON objects
-- param: tenants []string
-- param: causation_ids []string
-- param: correlation_ids []string
-- param: lanes []int32
-- param: database *string the Store's database; nil: no check
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest(:ids::text[], :aggregate_types::text[], :aggregate_ids::text[], :aggregate_versions::bigint[], :types::text[], :schema_ids::text[], :partition_keys::text[],
	:destinations::text[], :payloads::bytea[], :headers::text[], :tenants::text[], :causation_ids::text[], :correlation_ids::text[], :lanes::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE current_database() = coalesce(:database::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertPartitioned
-- Insert on a partitioned outbox: the IDs first, in the same statement, so that a duplicate
-- violates the side table's key.
-- params: Insert
WITH ids AS (INSERT INTO {{ids}} (id) SELECT unnest(:ids::text[]) WHERE current_database() = coalesce(:database::text, current_database())),
o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest(:ids::text[], :aggregate_types::text[], :aggregate_ids::text[], :aggregate_versions::bigint[], :types::text[], :schema_ids::text[], :partition_keys::text[],
	:destinations::text[], :payloads::bytea[], :headers::text[], :tenants::text[], :causation_ids::text[], :correlation_ids::text[], :lanes::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE current_database() = coalesce(:database::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: Heartbeat
-- Expired registrations older than an hour are removed on the
-- way, skipping rows another heartbeat holds.
-- param: owner string
-- param: now any the caller's time (tsIn), NULL: the database clock
-- param: ttl int64 microseconds
WITH up AS (
	INSERT INTO {{workers}} (owner, expires_at)
	VALUES (:owner, coalesce(:now::timestamptz, now()) + :ttl::bigint * interval '1 microsecond')
	ON CONFLICT (owner) DO UPDATE SET expires_at = EXCLUDED.expires_at
	RETURNING owner
), gc AS (
	DELETE FROM {{workers}} WHERE owner = ANY(ARRAY(
		SELECT owner FROM {{workers}}
		WHERE owner <> :owner AND expires_at < coalesce(:now::timestamptz, now()) - interval '1 hour'
		FOR UPDATE SKIP LOCKED))
)
SELECT (SELECT count(*) FROM up) + count(*) FROM {{workers}}
WHERE owner <> :owner AND expires_at > coalesce(:now::timestamptz, now())

-- name: HeartbeatLeave
-- param: owner string
-- param: now any the caller's time (tsIn), NULL: the database clock
WITH del AS (DELETE FROM {{workers}} WHERE owner = :owner)
SELECT count(*) FROM {{workers}} WHERE owner <> :owner AND expires_at > coalesce(:now::timestamptz, now())

-- name: ClaimSkipLocked
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when :generation is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- A lane is claimable when it is free, its lease expired, or the sign of life its lease was
-- taken with is gone (core.Liveness: no session holds the advisory lock (:live_class, live_pid) any
-- more). Rows: lane, owner, generation,
-- lease_until, taken_over (the lane had an owner: read from the statement's snapshot, before
-- the update; core.Lease.TakenOver, informational), fenced. ARRAY(...) keeps the LIMIT
-- however stale the statistics are (IN (SELECT ... LIMIT n) may lock every candidate); the outer
-- WHERE repeats the predicate for the row as updated.
-- param: owner string
-- param: now any the caller's time (tsIn), NULL: the database clock
-- param: ttl int64 microseconds
-- param: max int lanes claimed at most
-- param: generation int64 the publisher generation
-- param: live_class int32 the advisory lock class of liveness
-- param: live_pid *int32 the claimer's sign of life (core.Liveness); nil: none
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}}
	SET owner = :owner, generation = generation + 1, live_pid = :live_pid::int,
		lease_until = coalesce(:now::timestamptz, now()) + :ttl::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT lane FROM {{lanes}}
		WHERE (owner = '' OR lease_until <= coalesce(:now::timestamptz, now())
			OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
				WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
				  AND k.classid = :live_class::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
		  AND (SELECT generation FROM pub) = :generation::bigint
		ORDER BY lane LIMIT :max
		FOR UPDATE SKIP LOCKED))
	  AND (owner = '' OR lease_until <= coalesce(:now::timestamptz, now())
		OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
			WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
			  AND k.classid = :live_class::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
	  AND (SELECT generation FROM pub) = :generation::bigint
	RETURNING lane, owner, generation, lease_until,
		(SELECT o.owner <> '' FROM {{lanes}} AS o WHERE o.lane = {{lanes}}.lane) AS taken_over
)
SELECT lane, owner, generation, lease_until, taken_over, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> :generation::bigint

-- name: ClaimAdvisory
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when :generation is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- As ClaimSkipLocked. The candidates are read in
-- lane order and the lock function is evaluated lazily until :max lanes are locked (OFFSET 0 keeps
-- the volatile filter out of the sorted subquery). Locks end with the statement's transaction.
-- params: ClaimSkipLocked
-- param: claim_class int32 the advisory lock class of this outbox's claims
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}}
	SET owner = :owner, generation = generation + 1, live_pid = :live_pid::int,
		lease_until = coalesce(:now::timestamptz, now()) + :ttl::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT c.lane FROM (
			SELECT lane FROM {{lanes}}
			WHERE (owner = '' OR lease_until <= coalesce(:now::timestamptz, now())
			OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
				WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
				  AND k.classid = :live_class::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
			  AND (SELECT generation FROM pub) = :generation::bigint
			ORDER BY lane OFFSET 0) AS c
		WHERE pg_try_advisory_xact_lock(:claim_class::int, c.lane)
		LIMIT :max))
	  AND (owner = '' OR lease_until <= coalesce(:now::timestamptz, now())
		OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
			WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
			  AND k.classid = :live_class::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))
	  AND (SELECT generation FROM pub) = :generation::bigint
	RETURNING lane, owner, generation, lease_until,
		(SELECT o.owner <> '' FROM {{lanes}} AS o WHERE o.lane = {{lanes}}.lane) AS taken_over
)
SELECT lane, owner, generation, lease_until, taken_over, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> :generation::bigint

-- name: Renew
-- Publisher fencing of claims and renewals: the statement first locks the publisher row FOR
-- SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction, and a
-- statement that waited reads the new generation), changes lanes only when :generation is the current
-- generation, and otherwise returns one row whose last column is true (fenced).
-- The lane
-- rows are locked in lane order first (the ARRAY init plan), as Settle does, so the two cannot
-- deadlock; a fenced renewal locks none.
-- param: lanes []int32
-- param: owners []string
-- param: generations []int64
-- param: now any the caller's time (tsIn), NULL: the database clock
-- param: generation int64 the publisher generation
-- param: ttl int64 microseconds
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	UPDATE {{lanes}} AS l
	SET lease_until = coalesce(:now::timestamptz, now()) + :ttl::bigint * interval '1 microsecond'
	FROM unnest(:lanes::int[], :owners::text[], :generations::bigint[]) AS w(lane, owner, generation)
	WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
	  AND l.lease_until > coalesce(:now::timestamptz, now())
	  AND (SELECT generation FROM pub) = :generation::bigint
	  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY(:lanes::int[])
		AND (SELECT generation FROM pub) = :generation::bigint ORDER BY lane FOR UPDATE))
	RETURNING l.lane, l.owner, l.generation, l.lease_until
)
SELECT lane, owner, generation, lease_until, false, false FROM up
UNION ALL
SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, false, true FROM pub WHERE generation <> :generation::bigint

-- name: PublisherGet
SELECT generation, kind, holder, since FROM {{publisher}}

-- name: PublisherLock
-- AcquireGeneration runs PublisherLock and, unless it joins, PublisherBump in one transaction.
SELECT generation, kind, holder, since FROM {{publisher}} FOR UPDATE

-- name: PublisherBump
-- param: kind string
-- param: holder string
-- param: now any the caller's time (tsIn), NULL: the database clock
UPDATE {{publisher}}
SET generation = generation + 1, kind = :kind, holder = :holder, since = coalesce(:now::timestamptz, now())
RETURNING generation, kind, holder, since

-- name: CheckpointGet
SELECT source, position, generation, updated_at FROM {{checkpoint}}

-- name: CheckpointDelete
-- outboxkit cdc release: the next CDC relay starts as on its first run (a backfill).
DELETE FROM {{checkpoint}}

-- name: CheckpointPut
-- One statement: lock the publisher row FOR SHARE
-- (AcquireGeneration waits, and a waiting save reads the new generation), upsert only when :generation is
-- the current generation, and return the current generation.
-- param: source string
-- param: position string
-- param: generation int64 the publisher generation
WITH pub AS MATERIALIZED (
	SELECT generation FROM {{publisher}} FOR SHARE
), up AS (
	INSERT INTO {{checkpoint}} AS c (singleton, source, position, generation)
	SELECT true, :source, :position, :generation::bigint FROM pub WHERE generation = :generation::bigint
	ON CONFLICT (singleton) DO UPDATE SET source = EXCLUDED.source, position = EXCLUDED.position,
		generation = EXCLUDED.generation, updated_at = now()
	RETURNING 1
)
SELECT generation, (SELECT count(*) FROM up) FROM pub

-- name: Release
-- param: lanes []int32
-- param: owners []string
-- param: generations []int64
UPDATE {{lanes}} AS l SET owner = '', live_pid = NULL
FROM unnest(:lanes::int[], :owners::text[], :generations::bigint[]) AS w(lane, owner, generation)
WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY(:lanes::int[]) ORDER BY lane FOR UPDATE))

-- name: Fetch
-- The walk function (migration 0011) returns the deliverable pending rows of the lanes in seq
-- order; a record is skipped when an earlier pending record of its key is parked or not yet due
-- (the pending table's failed index). Each is looked up in the outbox by its primary key, one
-- lookup per row in the walk's order (LATERAL ... OFFSET 0), so the rows come in seq order
-- without a sort (Store.Fetch checks).
-- param: lanes []int32
-- param: now any the caller's time (tsIn), NULL: the database clock
-- param: limit int
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
	o.partition_key, o.destination, o.payload, o.headers::text, o.tenant, o.causation_id,
	o.correlation_id, w.lane, o.created_at, NULL::timestamptz, w.attempts, w.next_attempt_at,
	w.last_error, w.parked_at
FROM {{pending_walk_fn}}(:lanes::int[], :now::timestamptz, :limit::int) AS w
CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = w.seq OFFSET 0) AS o

-- name: FetchPartitioned
-- Fetch on a partitioned outbox: the fetch function of migration 0008 walks the pending table
-- and looks each record up in its partition (created_at prunes the others at run time) inside
-- the function, with jit = off. As a statement, that lookup is priced over every partition,
-- which can pass the JIT thresholds on every fetch.
-- params: Fetch
SELECT {{cols}} FROM {{pending_fetch_fn}}(:lanes::int[], :now::timestamptz, :limit::int) ORDER BY seq

-- name: SettleMark
-- Settle is one statement, so one round trip and its own transaction: lock the leased lane rows
-- (in lane order), list the leases that are not held, and change outbox rows only when that list
-- is empty. :async (Options.AsyncSettle): a transaction-local set_config,
-- evaluated with the leases (always at least one row), makes the commit not wait for its WAL
-- flush. It returns the lost lanes.
-- Published rows lose their pending row, and one settle log entry lists them (at = now).
-- param: lanes []int32
-- param: owners []string
-- param: generations []int64
-- param: now any the caller's time (tsIn), NULL: the database clock
-- param: published []int64 seqs
-- param: failed []int64 seqs
-- param: errors []string of the failed
-- param: delays []int64 of the failed, microseconds
-- param: park []bool of the failed
-- param: async bool Options.AsyncSettle
WITH want AS (
	SELECT w.* FROM unnest(:lanes::int[], :owners::text[], :generations::bigint[]) AS w(lane, owner, generation)
	CROSS JOIN (SELECT set_config('synchronous_commit',
		CASE WHEN :async::bool THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS async
), locked AS (
	SELECT lane, owner, generation, lease_until FROM {{lanes}}
	WHERE lane = ANY(:lanes::int[]) ORDER BY lane FOR UPDATE
), lost AS (
	SELECT w.lane FROM want AS w LEFT JOIN locked AS k ON k.lane = w.lane
	WHERE k.lane IS NULL OR k.owner <> w.owner OR k.generation <> w.generation
	   OR k.lease_until <= coalesce(:now::timestamptz, now())
), pub AS (
	DELETE FROM {{pending}}
	WHERE seq = ANY(:published::bigint[]) AND lane = ANY(:lanes::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING seq
), log AS (
	INSERT INTO {{settled}} (at, min_seq, max_seq, seqs)
	SELECT coalesce(:now::timestamptz, now()), min(seq), max(seq), array_agg(seq) FROM pub
	HAVING count(*) > 0
), fail AS (
	UPDATE {{pending}} AS o
	SET attempts = o.attempts + 1, last_error = f.err,
		next_attempt_at = coalesce(:now::timestamptz, now()) + f.delay * interval '1 microsecond',
		parked_at = CASE WHEN f.park THEN coalesce(:now::timestamptz, now()) ELSE o.parked_at END
	FROM unnest(:failed::bigint[], :errors::text[], :delays::bigint[], :park::bool[]) AS f(seq, err, delay, park)
	WHERE o.seq = f.seq AND o.lane = ANY(:lanes::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING 1
)
SELECT lane FROM lost ORDER BY lane

-- name: SettleDelete
-- As SettleMark, but published rows are deleted (their pending and outbox rows; no log entry).
-- params: SettleMark
WITH want AS (
	SELECT w.* FROM unnest(:lanes::int[], :owners::text[], :generations::bigint[]) AS w(lane, owner, generation)
	CROSS JOIN (SELECT set_config('synchronous_commit',
		CASE WHEN :async::bool THEN 'off' ELSE current_setting('synchronous_commit') END, true)) AS async
), locked AS (
	SELECT lane, owner, generation, lease_until FROM {{lanes}}
	WHERE lane = ANY(:lanes::int[]) ORDER BY lane FOR UPDATE
), lost AS (
	SELECT w.lane FROM want AS w LEFT JOIN locked AS k ON k.lane = w.lane
	WHERE k.lane IS NULL OR k.owner <> w.owner OR k.generation <> w.generation
	   OR k.lease_until <= coalesce(:now::timestamptz, now())
), pub AS (
	DELETE FROM {{pending}}
	WHERE seq = ANY(:published::bigint[]) AND lane = ANY(:lanes::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING seq
), del AS (
	DELETE FROM {{outbox}}
	WHERE seq = ANY(ARRAY(SELECT seq FROM pub))
	  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
), fail AS (
	UPDATE {{pending}} AS o
	SET attempts = o.attempts + 1, last_error = f.err,
		next_attempt_at = coalesce(:now::timestamptz, now()) + f.delay * interval '1 microsecond',
		parked_at = CASE WHEN f.park THEN coalesce(:now::timestamptz, now()) ELSE o.parked_at END
	FROM unnest(:failed::bigint[], :errors::text[], :delays::bigint[], :park::bool[]) AS f(seq, err, delay, park)
	WHERE o.seq = f.seq AND o.lane = ANY(:lanes::int[])
	  AND NOT EXISTS (SELECT 1 FROM lost)
	RETURNING 1
)
SELECT lane FROM lost ORDER BY lane

-- name: HorizonGet
-- No lock: Inbox.Process reads it after the record's insert, in a new statement (read committed).
-- param: consumer string
SELECT horizon FROM {{horizons}} WHERE consumer = :consumer

-- name: InboxInsertMany
-- core.InboxBatchStore: InboxInsert for many records of consumer :consumer and source :source
-- (distinct tenant and event ID pairs), in key order (one lock order for every batch); returns
-- the keys inserted.
-- param: consumer string
-- param: source string
-- param: tenants []string
-- param: event_ids []string
-- param: digests [][]byte
-- param: positions []string
-- param: outcomes []int16
-- param: occurred []time.Time occurredIn
INSERT INTO {{inbox}} (consumer, event_id, source, tenant, digest, source_position, outcome, occurred_at)
SELECT :consumer, event_id, :source, tenant, digest, source_position, outcome, occurred_at
FROM unnest(:tenants::text[], :event_ids::text[], :digests::bytea[], :positions::text[], :outcomes::smallint[], :occurred::timestamptz[])
	AS r(tenant, event_id, digest, source_position, outcome, occurred_at)
ORDER BY event_id, tenant
ON CONFLICT (consumer, event_id, source, tenant) DO NOTHING
RETURNING tenant, event_id

-- name: InboxLockKeys
-- Partitioned inbox: a transaction-level advisory lock on the hash of each record's key, taken
-- in the order of :keys (sorted and distinct: one lock order for every batch), so that two
-- transactions never record one key in two partitions (a unique index of a partitioned table
-- must hold the partition key). unnest returns the keys in order, and count takes them in
-- that order.
-- param: class int32 the inbox's lock class
-- param: keys []int32 sorted, distinct
SELECT count(pg_advisory_xact_lock(:class::int4, k)) FROM unnest(:keys::int4[]) AS k

-- name: InboxInsertPartitioned
-- InboxInsertMany on a partitioned inbox, for records that InboxGetMany found in no partition
-- while their keys were locked (InboxLockKeys): no conflict can arise, and one would fail.
-- param: consumer string
-- param: source string
-- param: tenants []string
-- param: event_ids []string
-- param: digests [][]byte
-- param: positions []string
-- param: outcomes []int16
-- param: occurred []time.Time occurredIn
INSERT INTO {{inbox}} (consumer, event_id, source, tenant, digest, source_position, outcome, occurred_at)
SELECT :consumer, event_id, :source, tenant, digest, source_position, outcome, occurred_at
FROM unnest(:tenants::text[], :event_ids::text[], :digests::bytea[], :positions::text[], :outcomes::smallint[], :occurred::timestamptz[])
	AS r(tenant, event_id, digest, source_position, outcome, occurred_at)
ORDER BY event_id, tenant

-- name: InboxGetMany
-- The records of consumer :consumer and source :source among the (tenant, event ID) pairs: one
-- primary key look-up per pair (in every partition of a partitioned inbox). The LATERAL
-- subquery with its LIMIT keeps that shape in the generic plan, whatever the statistics: as a
-- join, a plan made while the table (or the current partition) was small or not yet analysed
-- hashed the pairs and read every record of the consumer, at each call.
-- param: consumer string
-- param: source string
-- param: tenants []string
-- param: event_ids []string
SELECT i.source, i.tenant, i.event_id, i.digest, i.source_position, i.outcome, i.occurred_at, i.processed_at
FROM unnest(:tenants::text[], :event_ids::text[]) AS k(tenant, event_id)
CROSS JOIN LATERAL (
	SELECT * FROM {{inbox}} AS i
	WHERE i.consumer = :consumer AND i.event_id = k.event_id AND i.source = :source AND i.tenant = k.tenant
	LIMIT 1) AS i

-- name: InboxGetByID
-- reconcile.InboxReader: the records of consumer :consumer among event IDs, of any source and
-- tenant (the primary key's prefix).
-- param: consumer string
-- param: event_ids []string
SELECT source, tenant, event_id, digest, source_position, outcome, occurred_at, processed_at FROM {{inbox}}
WHERE consumer = :consumer AND event_id = ANY(:event_ids::text[])

-- name: VersionLockMany
-- The rows of the entities, locked in entity order.
-- param: consumer string
-- param: entities []string
SELECT entity, version FROM {{versions}} WHERE consumer = :consumer AND entity = ANY(:entities::text[])
ORDER BY entity FOR UPDATE

-- name: VersionEnsureMany
-- params: VersionLockMany
INSERT INTO {{versions}} (consumer, entity) SELECT :consumer, e FROM unnest(:entities::text[]) AS r(e) ORDER BY e
ON CONFLICT (consumer, entity) DO NOTHING

-- name: VersionSetMany
-- param: consumer string
-- param: entities []string
-- param: versions []int64
INSERT INTO {{versions}} (consumer, entity, version)
SELECT :consumer, e, v FROM unnest(:entities::text[], :versions::bigint[]) AS r(e, v) ORDER BY e
ON CONFLICT (consumer, entity) DO UPDATE SET version = EXCLUDED.version

-- name: RaiseHorizon
-- Its own transaction, committed before PruneInbox deletes anything below the horizon.
-- param: consumer string
-- param: before time.Time occurredIn
INSERT INTO {{horizons}} AS h (consumer, horizon) VALUES (:consumer, :before)
ON CONFLICT (consumer) DO UPDATE SET horizon = greatest(h.horizon, EXCLUDED.horizon)
RETURNING horizon

-- name: PruneInbox
-- Deletes up to :limit records older than :horizon.
-- param: consumer string
-- param: horizon time.Time as RaiseHorizon returned
-- param: limit int
-- By whole keys: records of other sources or tenants that share an event ID stay.
DELETE FROM {{inbox}} AS i USING (
	SELECT event_id, source, tenant FROM {{inbox}}
	WHERE consumer = :consumer AND occurred_at < :horizon::timestamptz
	ORDER BY occurred_at LIMIT :limit) AS d
WHERE i.consumer = :consumer AND i.event_id = d.event_id AND i.source = d.source AND i.tenant = d.tenant
	AND i.occurred_at < :horizon::timestamptz

-- name: PruneLock
-- PruneOutbox's first statement, in its transaction: a shared advisory lock that Replay takes
-- exclusively (ReplayLock), so that the deletion's snapshot, taken after it, sees every replay
-- that committed (a replayed row gets a pending row, which the outbox row does not show).
-- param: class int32 the advisory lock class of this outbox
SELECT pg_advisory_xact_lock_shared(:class::int, -1)

-- name: ReplayLock
-- params: PruneLock
SELECT pg_advisory_xact_lock(:class::int, -1)

-- name: ReplayLockOutbox
-- Replay, before it reads the lane count: the outbox's ROW EXCLUSIVE lock (a writer's), which a
-- resize (ResizeLock) waits for and holds back, so no resize runs between the read and the
-- pending rows' insert.
LOCK TABLE {{outbox}} IN ROW EXCLUSIVE MODE

-- name: PruneOutbox
-- Nothing at or above the lowest
-- pending seq is deleted (every row below it is published); a row published after migration
-- 0008 (published_at NULL) only below the lowest min_seq of the settle log entries at or after
-- :before (none of them lists it), one published before it when its published_at is before :before and
-- below that bound as well (a replay may have published it again). The pending table and the
-- log are read in one snapshot, the statement's. Settle log entries below every outbox row go.
-- param: before time.Time published before (occurredIn)
-- param: below int64 seq bound, exclusive
-- param: limit int
WITH b AS MATERIALIZED (
	SELECT (SELECT min(seq) FROM {{pending}}) AS pending_min,
		(SELECT min(min_seq) FROM {{settled}} WHERE at >= :before::timestamptz) AS settled_min,
		set_config('outboxkit.pending_layout', 'on', true) AS layout
), m AS MATERIALIZED (
	-- No outbox row: every entry lists only deleted rows (an entry lists committed rows).
	SELECT coalesce(min(seq), 9223372036854775807) AS seq FROM {{outbox}}
), log AS (
	DELETE FROM {{settled}} WHERE min_seq < (SELECT seq FROM m) AND max_seq < (SELECT seq FROM m)
)
DELETE FROM {{outbox}} WHERE seq = ANY(ARRAY(
	SELECT o.seq FROM {{outbox}} AS o, b
	WHERE o.seq < :below::bigint AND o.seq < coalesce(b.pending_min, :below::bigint)
	  AND o.seq < coalesce(b.settled_min, :below::bigint)
	  AND (o.published_at IS NULL OR o.published_at < :before::timestamptz)
	ORDER BY o.seq LIMIT :limit))

-- name: ListAll
-- A record is unpublished while it has a pending row (migration 0008).
-- Every join is a primary key lookup per row (LATERAL ... OFFSET 0: never a hash of a table).
-- param: after int64 seq
-- param: limit int
SELECT {{pcols}} FROM {{outbox}} AS o
LEFT JOIN LATERAL (SELECT * FROM {{pending}} AS q WHERE q.seq = o.seq OFFSET 0) AS p ON true
WHERE o.seq > :after ORDER BY o.seq LIMIT :limit

-- name: ListPending
-- params: ListAll
SELECT {{pcols}} FROM (SELECT * FROM {{pending}} WHERE seq > :after AND parked_at IS NULL ORDER BY seq LIMIT :limit) AS p
CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = p.seq AND r.created_at = p.created_at OFFSET 0) AS o
ORDER BY p.seq

-- name: ListParked
-- params: ListAll
SELECT {{pcols}} FROM (SELECT * FROM {{pending}} WHERE seq > :after AND parked_at IS NOT NULL ORDER BY seq LIMIT :limit) AS p
CROSS JOIN LATERAL (SELECT * FROM {{outbox}} AS r WHERE r.seq = p.seq AND r.created_at = p.created_at OFFSET 0) AS o
ORDER BY p.seq

-- name: ListPublished
-- params: ListAll
SELECT {{pcols}} FROM {{outbox}} AS o LEFT JOIN {{pending}} AS p ON false
WHERE o.seq > :after AND NOT EXISTS (SELECT 1 FROM {{pending}} AS q WHERE q.seq = o.seq)
ORDER BY o.seq LIMIT :limit

-- name: Stats
-- Bounded cost (operators and the daemon's metrics call it often): never a scan of published
-- rows, and at most :limit rows of the pending table (migration 0008). The unpublished rows are
-- counted on the pending table up to :limit (Go's cap; beyond it Go takes the planner's estimate of
-- the pending table's rows), the parked ones on its failed index; the outbox's rows are
-- estimated as the planner does (reltuples per page at the last ANALYZE or vacuum, times the
-- pages the table has now; 0 before any), summed over the table and its partitions, with their
-- size in bytes (Go counts the published rows exactly, with StatsPublished, when the table is
-- small); the oldest pending record is the first pending row in seq order that is not parked.
-- param: limit int pending rows counted at most
WITH unpub AS (
	SELECT count(*) AS n FROM (SELECT 1 FROM {{pending}} LIMIT :limit) AS u
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
-- first :limit unpublished records from the first parked one on (the pending index; a lower bound
-- beyond them). The parked keys come from the failed index. Operators only (outboxkit status),
-- and run only when something is parked.
-- param: limit int unpublished records read at most
WITH p AS MATERIALIZED (
	SELECT partition_key, min(seq) AS seq FROM {{pending}}
	WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL
	GROUP BY partition_key
), w AS MATERIALIZED (
	SELECT o.seq, o.partition_key FROM {{pending}} AS o
	WHERE o.parked_at IS NULL AND o.seq > (SELECT min(seq) FROM p)
	ORDER BY o.seq LIMIT :limit
)
SELECT count(*) FROM w JOIN p ON w.partition_key = p.partition_key AND w.seq > p.seq

-- name: InboxConsumers
-- The inbox's consumers (with records or a horizon), in name order, at most :consumers of them,
-- each with its horizon and its record count read up to :limit records. The names come from a
-- loose scan of the primary key (one index probe per consumer) and the horizons table.
-- param: consumers int consumers returned at most
-- param: limit int records counted at most per consumer
WITH RECURSIVE c(consumer) AS (
	(SELECT consumer FROM {{inbox}} ORDER BY consumer LIMIT 1)
	UNION ALL
	SELECT (SELECT i.consumer FROM {{inbox}} AS i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
	FROM c WHERE c.consumer IS NOT NULL
), n AS (
	SELECT consumer FROM (SELECT consumer FROM c WHERE consumer IS NOT NULL UNION SELECT consumer FROM {{horizons}}) AS u
	ORDER BY consumer LIMIT :consumers
)
SELECT n.consumer, h.horizon,
	(SELECT count(*) FROM (SELECT 1 FROM {{inbox}} AS i WHERE i.consumer = n.consumer LIMIT :limit) AS x)
FROM n LEFT JOIN {{horizons}} AS h ON h.consumer = n.consumer
ORDER BY n.consumer

-- name: Lanes
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{pending}}
WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL

-- name: Unpark
-- Rows with something to clear always have parked_at or next_attempt_at set (a failure sets
-- next_attempt_at), so the pending table's failed index finds them.
-- param: partition_key string
UPDATE {{pending}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = :partition_key AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)

-- name: Notify
-- Sent without arguments: one simple-protocol round trip, its own small transaction that does
-- not wait for the WAL flush.
BEGIN; SET LOCAL synchronous_commit = off; NOTIFY {{channel}}; COMMIT

-- name: Listen
LISTEN {{channel}}

-- name: Partitions
-- The partitions of a partitioned outbox or inbox, by name (so by lower bound).
-- param: parent string the partitioned table (regclass text)
SELECT c.relname::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
WHERE i.inhparent = :parent::regclass ORDER BY c.relname

-- name: PartitionCheck
-- Whether {{partition}} holds only rows PruneOutbox would delete: every seq below :below, below the
-- lowest pending seq (so none unpublished) and below the lowest min_seq of the settle log entries
-- at or after :before, none published (before migration 0008) at or after :before. Index lookups only
-- (pending and settle log indexes, published_at index, primary key), so that it is cheap under
-- the table lock.
-- param: before time.Time published before
-- param: below int64 seq bound, exclusive
SELECT NOT EXISTS (SELECT 1 FROM {{partition}} WHERE published_at IS NOT NULL AND published_at >= :before::timestamptz)
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0) < :below::bigint
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0)
       < coalesce((SELECT min(seq) FROM {{pending}}), :below::bigint)
   AND coalesce((SELECT max(seq) FROM {{partition}}), 0)
       < coalesce((SELECT min(min_seq) FROM {{settled}} WHERE at >= :before::timestamptz), :below::bigint)

-- name: PartitionIDs
-- param: from time.Time
-- param: to time.Time
DELETE FROM {{ids}} WHERE created_at >= :from::timestamptz AND created_at < :to::timestamptz

-- name: CreatePartition
-- The partition of the outbox or inbox {{parent}} for [{{from}}, {{to}}): DDL takes no
-- parameters, so the bounds are timestamp literals the adapter formats.
CREATE TABLE IF NOT EXISTS {{partition}} PARTITION OF {{parent}} FOR VALUES FROM ({{from}}) TO ({{to}})

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

-- name: InboxPartitionCheck
-- Partitioned inbox: whether every record of {{partition}} occurred before its consumer's
-- horizon, so that PruneInbox would delete each of them. Per consumer (a loose scan of the
-- (consumer, occurred_at) index: one probe per consumer) its latest occurred_at against its
-- horizon; a consumer without one (never pruned) keeps the partition. Index lookups only, so
-- that it is cheap under the table lock.
WITH RECURSIVE c(consumer) AS (
	(SELECT consumer FROM {{partition}} ORDER BY consumer LIMIT 1)
	UNION ALL
	SELECT (SELECT p.consumer FROM {{partition}} AS p WHERE p.consumer > c.consumer ORDER BY p.consumer LIMIT 1)
	FROM c WHERE c.consumer IS NOT NULL
)
SELECT NOT EXISTS (
	SELECT 1 FROM c WHERE c.consumer IS NOT NULL
	AND (SELECT max(p.occurred_at) FROM {{partition}} AS p WHERE p.consumer = c.consumer)
		>= coalesce((SELECT h.horizon FROM {{horizons}} AS h WHERE h.consumer = c.consumer), '-infinity'::timestamptz))

-- name: InboxPartitionCount
-- The records of one consumer in {{partition}}.
-- param: consumer string
SELECT count(*) FROM {{partition}} WHERE consumer = :consumer

-- name: InboxLockTable
LOCK TABLE {{inbox}} IN ACCESS EXCLUSIVE MODE

-- name: Savepoint
-- An operator transaction's inbox partition drop (a lock timeout rolls back to it).
SAVEPOINT outboxkit_drop

-- name: RollbackToSavepoint
ROLLBACK TO SAVEPOINT outboxkit_drop

-- name: ReleaseSavepoint
RELEASE SAVEPOINT outboxkit_drop

-- name: ReplayByIDs
-- Replay's selection by ID, locked so that a concurrent cleanup cannot delete it meanwhile;
-- published when it has no pending row.
-- param: ids []string
SELECT o.seq, o.id, o.partition_key, NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)
FROM {{outbox}} AS o WHERE o.id = ANY(:ids::text[]) ORDER BY o.seq FOR UPDATE OF o

-- name: ReplayByKey
-- Replay's selection by key, created at or after :since, at most :limit rows, locked.
-- param: partition_key string
-- param: since time.Time occurredIn
-- param: limit int
SELECT o.seq, o.id, o.partition_key, true FROM {{outbox}} AS o
WHERE o.partition_key = :partition_key AND o.created_at >= :since::timestamptz
  AND NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT :limit FOR UPDATE OF o

-- name: KeyUnpublished
-- Whether the key has an unpublished row (a pending row; walks the pending table).
-- param: partition_key string
SELECT EXISTS (SELECT 1 FROM {{pending}} WHERE partition_key = :partition_key)

-- name: Replay
-- Puts the published rows :seqs back to pending, as never attempted: a pending row each, in
-- :lanes. Their earlier publication is forgotten, so
-- that List reads the next one: each seq leaves the settle log entry that lists it (every seq is
-- in at most one entry, the one of its latest publication; the entry keeps its min_seq and
-- max_seq, which only makes cleanup's bound more careful), and a row published before migration
-- 0008 loses its published_at and status columns (grants.sql lets the operator role update them).
-- param: seqs []int64
-- param: lanes []int32 their key's lane under the current lane count
WITH unlog AS (
	UPDATE {{settled}} AS s SET seqs = ARRAY(SELECT x FROM unnest(s.seqs) AS x WHERE x <> ALL(:seqs::bigint[]))
	WHERE s.ctid = ANY(ARRAY(
		SELECT e.ctid FROM unnest(:seqs::bigint[]) AS r(seq)
		CROSS JOIN LATERAL (SELECT l.ctid FROM {{settled}} AS l
			WHERE l.min_seq <= r.seq AND l.max_seq >= r.seq AND r.seq = ANY(l.seqs)
			ORDER BY l.min_seq DESC LIMIT 1) AS e))
), unmark AS (
	UPDATE {{outbox}} SET published_at = NULL, attempts = 0, next_attempt_at = NULL, last_error = '', parked_at = NULL
	WHERE seq = ANY(:seqs::bigint[]) AND published_at IS NOT NULL
)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at)
SELECT o.seq, r.lane, o.partition_key, o.created_at
FROM unnest(:seqs::bigint[], :lanes::int[]) AS r(seq, lane) JOIN {{outbox}} AS o ON o.seq = r.seq
ON CONFLICT (seq) DO NOTHING

-- name: AuditInsert
-- Returns the row's id.
-- param: actor string
-- param: command string
-- param: arguments string JSON text
-- param: rows int64 rows affected; -1: an inbox prune's row until AuditSetRows
INSERT INTO {{audit}} (actor, command, arguments, rows_affected) VALUES (:actor, :command, :arguments, :rows)
RETURNING id

-- name: AuditList
-- The latest rows, newest first.
-- param: since any tsIn; NULL: all
-- param: limit int
SELECT id, at, actor, command, arguments, rows_affected FROM {{audit}}
WHERE :since::timestamptz IS NULL OR at >= :since::timestamptz
ORDER BY id DESC LIMIT :limit

-- name: AuditSetRows
-- Fills in the rows of a row AuditInsert wrote with -1, once.
-- param: id int64
-- param: rows int64
UPDATE {{audit}} SET rows_affected = :rows WHERE id = :id AND rows_affected = -1

-- name: ResetLanes
-- outboxkit lanes reset: end the leases of the selected lanes that have an owner. The rows are locked in lane order first (the ARRAY init
-- plan), as Settle and Renew do, so that none of them deadlocks with it; the outer WHERE
-- repeats the predicate for a row that changed while the lock was awaited. The lease expires
-- at the transaction's start (a settle or renewal of the old lease is refused: owner,
-- generation and expiry all differ), live_pid (the sign of life) is cleared, and the new
-- generation fences the old owner's marks; any claimer takes the lane as a free one.
-- param: lanes []int32 empty: any
-- param: owner string '': any
UPDATE {{lanes}}
SET owner = '', live_pid = NULL, lease_until = now(), generation = generation + 1
WHERE lane = ANY(ARRAY(
	SELECT lane FROM {{lanes}}
	WHERE owner <> '' AND (cardinality(:lanes::int[]) = 0 OR lane = ANY(:lanes::int[]))
	  AND (:owner::text = '' OR owner = :owner::text)
	ORDER BY lane FOR UPDATE))
  AND owner <> '' AND (:owner::text = '' OR owner = :owner::text)

-- name: InsertChecked
-- Insert (InsertLanes) checked against the lane count the lanes were computed with:
-- :lane_count; nothing is inserted when the recorded count differs. The count is read once per
-- statement, after the statement's table lock: under READ COMMITTED in the statement's snapshot
-- (taken after that lock), otherwise by the migration 0007 function, FOR SHARE. The pending rows as in
-- Insert.
-- params: Insert
-- param: lane_count string the lane count the lanes were computed with
-- param: database
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest(:ids::text[], :aggregate_types::text[], :aggregate_ids::text[], :aggregate_versions::bigint[], :types::text[], :schema_ids::text[], :partition_keys::text[],
	:destinations::text[], :payloads::bytea[], :headers::text[], :tenants::text[], :causation_ids::text[], :correlation_ids::text[], :lanes::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = :lane_count::text
  AND current_database() = coalesce(:database::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertPartitionedChecked
-- InsertPartitioned checked as InsertChecked; the IDs go to the side table only when the count
-- and the database match.
-- params: InsertChecked
WITH ok AS MATERIALIZED (SELECT current_database() = coalesce(:database::text, current_database()) AND (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = :lane_count::text AS ok),
ids AS (INSERT INTO {{ids}} (id) SELECT unnest(:ids::text[]) FROM ok WHERE ok.ok),
o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
FROM unnest(:ids::text[], :aggregate_types::text[], :aggregate_ids::text[], :aggregate_versions::bigint[], :types::text[], :schema_ids::text[], :partition_keys::text[],
	:destinations::text[], :payloads::bytea[], :headers::text[], :tenants::text[], :causation_ids::text[], :correlation_ids::text[], :lanes::int[])
	WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
		partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
WHERE (SELECT ok FROM ok) AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
ORDER BY ord
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: LaneCountChecked
-- The recorded lane count, whether migration 0007 (checked inserts, resizes) is applied, and
-- the database (the inserts' :lane_count and :database).
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
-- param: value string
UPDATE {{meta}} SET value = :value WHERE name = 'lanes'

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
-- The lanes at or above the new lane count go.
-- param: lanes int the new lane count
DELETE FROM {{lanes}} WHERE lane >= :lanes

-- name: ResizeRows
-- The unpublished rows after seq :after, :limit at a time (the pending table), with their key and lane.
-- param: after int64 seq
-- param: limit int
SELECT seq, partition_key, lane FROM {{pending}}
WHERE seq > :after ORDER BY seq LIMIT :limit

-- name: ResizeMove
-- The rows whose lane changes.
-- param: seqs []int64
-- param: lanes []int32 their new lanes
UPDATE {{pending}} AS o SET lane = m.lane
FROM unnest(:seqs::bigint[], :lanes::int[]) AS m(seq, lane)
WHERE o.seq = m.seq AND o.lane <> m.lane


-- name: InsertOne
-- Insert of a single record (most producer transactions): the same statement with scalar
-- parameters instead of 14 one-element arrays, whose binary encoding and unnest cost a
-- saturated server and client 14-23% of a one-event transaction (BENCHMARKS.md, "Producer
-- cost"): the elements of Insert's arrays.
-- param: id string
-- param: aggregate_type string
-- param: aggregate_id string
-- param: aggregate_version int64
-- param: type string
-- param: schema_id string
-- param: partition_key string
-- param: destination string
-- param: payload []byte
-- param: headers string a JSON object
-- param: tenant string
-- param: causation_id string
-- param: correlation_id string
-- param: lane int32
-- param: database *string the Store's database; nil: no check
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT :id::text, :aggregate_type::text, :aggregate_id::text, :aggregate_version::bigint, :type::text, :schema_id::text, :partition_key::text, :destination::text, :payload::bytea,
	:headers::text::jsonb, :tenant::text, :causation_id::text, :correlation_id::text, :lane::int
WHERE current_database() = coalesce(:database::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o

-- name: InsertOneChecked
-- InsertChecked of a single record, with scalar parameters as InsertOne.
-- params: InsertOne
-- param: lane_count string the lane count the lanes were computed with
-- param: database
WITH o AS (
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
SELECT :id::text, :aggregate_type::text, :aggregate_id::text, :aggregate_version::bigint, :type::text, :schema_id::text, :partition_key::text, :destination::text, :payload::bytea,
	:headers::text::jsonb, :tenant::text, :causation_id::text, :correlation_id::text, :lane::int
WHERE (SELECT CASE WHEN current_setting('transaction_isolation') = 'read committed'
	THEN (SELECT value FROM {{meta}} WHERE name = 'lanes') ELSE {{lane_count_fn}}() END) = :lane_count::text
  AND current_database() = coalesce(:database::text, current_database())
  AND (SELECT set_config('outboxkit.pending_layout', 'on', true)) IS NOT NULL
RETURNING seq, lane, partition_key, created_at)
INSERT INTO {{pending}} (seq, lane, partition_key, created_at) SELECT seq, lane, partition_key, created_at FROM o
