-- The SQLite adapter's statements, loaded by queries.go (internal/sqlfile). {{name}} is an
-- identifier the adapter validated and quoted at construction (names in options.go); {{cols}} is
-- the record column list. Lists (lanes, seqs, failures) are bound as one JSON array parameter
-- and read with json_each, so every statement has a fixed text whatever the list length.
-- Parameters are written :name and declared by the block's "-- param: name GoType description"
-- lines (or taken from another statement by "-- params: Other"); go generate writes their Go
-- structs to queries_gen.go, and the loader numbers them ?1, ?2, ... in declaration order.
--
-- dialect: sqlite

-- name: Bootstrap
CREATE TABLE IF NOT EXISTS {{migrations}} (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS {{inbox_migrations}} (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS {{meta}} (
    name  TEXT    PRIMARY KEY,
    value INTEGER NOT NULL
);

-- name: AppliedVersionOutbox
SELECT coalesce(max(version), 0) FROM {{migrations}}

-- name: AppliedVersionInbox
SELECT coalesce(max(version), 0) FROM {{inbox_migrations}}

-- name: RecordVersionOutbox
-- param: version int
-- param: name string
-- param: applied_at int64 unix microseconds
INSERT INTO {{migrations}} (version, name, applied_at) VALUES (:version, :name, :applied_at)

-- name: RecordVersionInbox
-- params: RecordVersionOutbox
INSERT INTO {{inbox_migrations}} (version, name, applied_at) VALUES (:version, :name, :applied_at)

-- name: GetLanes
SELECT value FROM {{meta}} WHERE name = 'lanes'

-- name: Ingress
-- The relay's reading of the producers' rate (driver.IngressCounter): the highest seq committed,
-- the last entry of the primary key.
SELECT coalesce(max(seq), 0) FROM {{outbox}}

-- name: SetLanes
-- param: lanes int the lane count
INSERT INTO {{meta}} (name, value) VALUES ('lanes', :lanes)

-- name: SeedLanes
-- params: SetLanes
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :lanes)
INSERT INTO {{lanes}} (lane, owner, generation, lease_until) SELECT i, '', 0, 0 FROM n

-- name: ScriptRecordVersionOutbox
-- MigrationSQL: RecordVersionOutbox with the literals {{version}} and {{name}} the adapter
-- writes, at the time the script runs.
INSERT INTO {{migrations}} (version, name, applied_at)
    VALUES ({{version}}, {{name}}, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))

-- name: ScriptRecordVersionInbox
INSERT INTO {{inbox_migrations}} (version, name, applied_at)
    VALUES ({{version}}, {{name}}, CAST((julianday('now') - 2440587.5) * 86400000000 AS INTEGER))

-- name: ScriptSetLanes
INSERT INTO {{meta}} (name, value) VALUES ('lanes', {{version}})

-- name: ScriptSeedLanes
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {{version}})
INSERT INTO {{lanes}} (lane, owner, generation, lease_until) SELECT i, '', 0, 0 FROM n

-- name: DropEarlierIdx
-- A new outbox (migrated from version 0 in one run) drops the earlier layout's partial indexes on
-- the outbox's status columns, which only relays of an earlier version (they name them in
-- INDEXED BY) read: since migration 0007 nothing sets published_at, so its pending index would
-- get an entry per row written. An upgraded outbox keeps them for the earlier relays (drop them
-- by hand once none runs: README).
DROP INDEX IF EXISTS {{outbox_pending}};
DROP INDEX IF EXISTS {{outbox_blocked}};
DROP INDEX IF EXISTS {{outbox_published}};

-- name: AggVersionIdx
CREATE UNIQUE INDEX IF NOT EXISTS {{outbox_aggregate_version}}
    ON {{outbox}} (aggregate_type, aggregate_id, aggregate_version, type) WHERE aggregate_version > 0

-- name: WriteLock
-- A write statement that changes nothing: as the first statement of a transaction it
-- takes SQLite's write lock at once, as BEGIN IMMEDIATE does, whatever _txlock says.
UPDATE {{meta}} SET value = value WHERE 0

-- name: InboxWriteLock
-- WriteLock on a table of the inbox's (the lock is the database's either way), for the inbox's
-- transactions: an inbox-only database (MigrateInbox) has no meta table.
UPDATE {{inbox_migrations}} SET version = version WHERE 0

-- name: PublisherGet
SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1

-- name: PublisherBump
-- param: kind string
-- param: holder string
-- param: since int64 unix microseconds
UPDATE {{publisher}} SET generation = generation + 1, kind = :kind, holder = :holder, since = :since
WHERE id = 1
RETURNING generation, kind, holder, since

-- name: InsertPrefix
INSERT INTO {{outbox}} ({{insert_cols}}) VALUES 

-- name: SpSave
SAVEPOINT outboxkit_insert

-- name: MainFile
SELECT file FROM pragma_database_list WHERE name = 'main'

-- name: SpRelease
RELEASE outboxkit_insert

-- name: SpRollback
ROLLBACK TO outboxkit_insert

-- name: HeartbeatUpsert
-- param: owner string
-- param: expires_at int64 unix microseconds
INSERT INTO {{workers}} (owner, expires_at) VALUES (:owner, :expires_at)
    ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at

-- name: HeartbeatDelete
-- param: owner string
DELETE FROM {{workers}} WHERE owner = :owner

-- name: HeartbeatExpired
-- param: now int64 unix microseconds
DELETE FROM {{workers}} WHERE expires_at <= :now

-- name: HeartbeatCount
-- params: HeartbeatExpired
SELECT count(*) FROM {{workers}} WHERE expires_at > :now

-- name: ClaimOwned
-- The claimable lanes that still have an owner (its lease expired): ClaimLanes runs it
-- in the same write transaction before Claim and marks their leases TakenOver.
-- params: HeartbeatExpired
SELECT lane FROM {{lanes}} WHERE owner <> '' AND lease_until <= :now

-- name: Claim
-- param: owner string
-- param: lease_until int64 unix microseconds
-- param: now int64 unix microseconds
-- param: max int lanes claimed at most
UPDATE {{lanes}} SET owner = :owner, generation = generation + 1, lease_until = :lease_until
WHERE lane IN (SELECT lane FROM {{lanes}} WHERE owner = '' OR lease_until <= :now ORDER BY lane LIMIT :max)
RETURNING lane, generation

-- name: Renew
-- param: lease_until int64 unix microseconds
-- param: lane int
-- param: owner string
-- param: generation int64
-- param: now int64 unix microseconds
UPDATE {{lanes}} SET lease_until = :lease_until
WHERE lane = :lane AND owner = :owner AND generation = :generation AND lease_until > :now AND owner <> ''

-- name: ReleaseLane
-- param: lane int
-- param: owner string
-- param: generation int64
UPDATE {{lanes}} SET owner = '', lease_until = 0
WHERE lane = :lane AND owner = :owner AND generation = :generation AND owner <> ''

-- name: Fetch
-- The outer scan walks the queue (migration 0007) in
-- seq order (its rowid) and stops after :limit deliverable rows, then reads each row's record by
-- the outbox's rowid (CROSS JOIN keeps the queue outer). The NOT EXISTS probe reads the queue's
-- small failed index (empty when nothing failed). The status columns come from the queue row.
-- param: lanes string JSON array
-- param: now int64 unix microseconds
-- param: limit int
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, p.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error,
    p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq
  AND p.lane IN (SELECT value FROM json_each(:lanes))
  AND p.parked_at IS NULL
  AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= :now)
  AND NOT EXISTS (
    SELECT 1 FROM {{queue}} AS b INDEXED BY {{queue_failed}}
    WHERE b.partition_key = p.partition_key AND b.seq < p.seq
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at > :now))
ORDER BY p.seq
LIMIT :limit

-- name: LeaseState
-- param: lanes string JSON array
SELECT lane, owner, generation, lease_until FROM {{lanes}}
WHERE lane IN (SELECT value FROM json_each(:lanes))

-- name: Publish
-- The publication rows of the given queue
-- rows in the held lanes; PublishDequeue then removes those queue rows, in the same fenced
-- transaction.
-- param: now int64 unix microseconds
-- param: seqs string JSON array
-- param: lanes string JSON array of the held lanes
INSERT OR REPLACE INTO {{publications}} (seq, at)
SELECT seq, :now FROM {{queue}}
WHERE seq IN (SELECT value FROM json_each(:seqs))
  AND lane IN (SELECT value FROM json_each(:lanes))

-- name: PublishDequeue
-- param: seqs string JSON array
-- param: lanes string JSON array of the held lanes
DELETE FROM {{queue}}
WHERE seq IN (SELECT value FROM json_each(:seqs))
  AND lane IN (SELECT value FROM json_each(:lanes))

-- name: DeletePublished
-- The outbox rows of the given queue rows in the
-- held lanes; the delete trigger (migration 0007) removes their queue rows.
-- params: PublishDequeue
DELETE FROM {{outbox}}
WHERE seq IN (SELECT seq FROM {{queue}}
              WHERE seq IN (SELECT value FROM json_each(:seqs))
                AND lane IN (SELECT value FROM json_each(:lanes)))

-- name: Fail
-- Only the queue row changes.
-- param: now int64 unix microseconds
-- param: failures string JSON array of {"s":seq,"d":delay_us,"p":0|1,"e":error}
-- param: lanes string JSON array of the held lanes
UPDATE {{queue}} SET
    attempts = attempts + 1,
    last_error = f.value ->> '$.e',
    next_attempt_at = :now + (f.value ->> '$.d'),
    parked_at = CASE WHEN f.value ->> '$.p' THEN :now ELSE parked_at END
FROM json_each(:failures) AS f
WHERE {{queue}}.seq = f.value ->> '$.s'
  AND {{queue}}.lane IN (SELECT value FROM json_each(:lanes))

-- name: MinPending
SELECT min(seq) FROM {{queue}}

-- name: Prune
-- Rows published before :before (the publications' time index) below :below, which Go bounds
-- by the lowest queued seq; the delete trigger (migration 0007) removes their publication rows.
-- param: before int64 published before, unix microseconds
-- param: below int64 seq bound, exclusive
-- param: limit int
DELETE FROM {{outbox}} WHERE seq IN (
    SELECT seq FROM {{publications}} INDEXED BY {{publications_at}}
    WHERE at < :before AND seq < :below
    LIMIT :limit)

-- name: Stats
-- Bounded cost: never a scan of all published rows. Unpublished rows are counted on the queue,
-- parked ones on its failed index; published rows are counted on the publications up to :limit (Go's
-- cap), and beyond it estimated from the seq range (AUTOINCREMENT: max - min + 1, less the rows
-- deleted in between); the oldest pending record is the first queue row in seq order that is not
-- parked.
-- param: limit int publications counted at most
SELECT
    (SELECT count(*) FROM {{queue}}),
    (SELECT count(*) FROM {{queue}}
        WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL),
    (SELECT count(*) FROM (SELECT 1 FROM {{publications}} LIMIT :limit)),
    coalesce((SELECT max(seq) FROM {{outbox}}) - (SELECT min(seq) FROM {{outbox}}) + 1, 0),
    (SELECT o.created_at FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
        WHERE o.seq = p.seq AND p.parked_at IS NULL ORDER BY p.seq LIMIT 1)

-- name: Blocked
-- Pending records held back by an earlier parked record of their partition key: the parked keys
-- from the queue's failed index, then (CROSS JOIN keeps that order) their queue rows after the
-- first parked one.
WITH p AS (
    SELECT partition_key, min(seq) AS seq FROM {{queue}}
    WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL
    GROUP BY partition_key
)
SELECT count(*) FROM p CROSS JOIN {{queue}} AS o
WHERE o.seq > p.seq AND o.partition_key = p.partition_key AND o.parked_at IS NULL

-- name: PendingDest
-- Pending (unpublished, not parked) records per destination among the first :limit of them in seq
-- order (the queue). Operators only (outboxkit status).
-- param: limit int pending records read
SELECT destination, count(*) FROM (
    SELECT o.destination FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
    WHERE o.seq = p.seq AND p.parked_at IS NULL ORDER BY p.seq LIMIT :limit
) GROUP BY destination

-- name: PubRecent
-- The records published after :after, at most :limit of the most recent ones (the
-- publications' time index): their count and the oldest publication time among them. Operators
-- only (outboxkit status).
-- param: after int64 unix microseconds
-- param: limit int publications read
SELECT count(*), min(at) FROM (
    SELECT at FROM {{publications}} WHERE at > :after
    ORDER BY at DESC LIMIT :limit
)

-- name: LanesList
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{queue}} WHERE parked_at IS NOT NULL

-- name: Unpark
-- param: partition_key string
UPDATE {{queue}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = :partition_key
  AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)

-- name: InboxConsumerNames
-- The inbox's consumers (with records or a horizon) and their horizons (NULL: none), in name
-- order, at most :consumers of them (DISTINCT on the primary key's first column).
-- param: consumers int consumers returned at most
SELECT n.consumer, h.horizon FROM (
	SELECT consumer FROM {{inbox}} UNION SELECT consumer FROM {{inbox_horizons}}
	ORDER BY consumer LIMIT :consumers
) AS n LEFT JOIN {{inbox_horizons}} AS h ON h.consumer = n.consumer
ORDER BY n.consumer

-- name: InboxConsumerCount
-- How many records the consumer holds, counted up to :limit (a range of the primary key).
-- param: consumer string
-- param: limit int records counted at most
SELECT count(*) FROM (SELECT 1 FROM {{inbox}} WHERE consumer = :consumer LIMIT :limit)

-- name: Horizon
-- param: consumer string
SELECT horizon FROM {{inbox_horizons}} WHERE consumer = :consumer

-- name: InsertInbox
-- The key is (consumer, source, tenant, event_id) (inbox migration 0002).
-- param: consumer string
-- param: source string "" when unset
-- param: tenant string "" when unset
-- param: event_id string
-- param: digest []byte
-- param: source_position string
-- param: outcome int
-- param: occurred_at any nullMicros
-- param: processed_at int64 unix microseconds
INSERT INTO {{inbox}}
    (consumer, source, tenant, event_id, digest, source_position, outcome, occurred_at, processed_at)
VALUES (:consumer, :source, :tenant, :event_id, :digest, :source_position, :outcome, :occurred_at, :processed_at)
ON CONFLICT (consumer, source, tenant, event_id) DO NOTHING

-- name: SelectInbox
-- One record by its key.
-- param: consumer string
-- param: source string
-- param: tenant string
-- param: event_id string
SELECT digest, source_position, outcome, occurred_at, processed_at
FROM {{inbox}} WHERE consumer = :consumer AND source = :source AND tenant = :tenant AND event_id = :event_id

-- name: SelectInboxByIDs
-- The consumer's records of the event IDs in :ids (a JSON array), whatever their source and
-- tenant: one row per record, so an ID recorded under several scopes has several. Each ID is a
-- seek on the primary key's prefix (consumer, event_id).
-- param: consumer string
-- param: ids string JSON array of event IDs
SELECT r.event_id, r.source, r.tenant, r.digest, r.source_position, r.outcome, r.occurred_at, r.processed_at
FROM json_each(:ids) AS j CROSS JOIN {{inbox}} AS r
WHERE r.consumer = :consumer AND r.event_id = j.value

-- name: LockVersion
-- param: consumer string
-- param: entity string
SELECT version FROM {{inbox_versions}} WHERE consumer = :consumer AND entity = :entity

-- name: SetVersion
-- params: LockVersion
-- param: version int64
INSERT INTO {{inbox_versions}} (consumer, entity, version) VALUES (:consumer, :entity, :version)
ON CONFLICT (consumer, entity) DO UPDATE SET version = excluded.version

-- name: RaiseHorizon
-- Returns the horizon in force.
-- param: consumer string
-- param: before int64 unix microseconds
INSERT INTO {{inbox_horizons}} (consumer, horizon) VALUES (:consumer, :before)
ON CONFLICT (consumer) DO UPDATE SET horizon = max(horizon, excluded.horizon)
RETURNING horizon

-- name: PruneInbox
-- param: consumer string
-- param: horizon int64 as RaiseHorizon returned
-- param: limit int
DELETE FROM {{inbox}} WHERE rowid IN (
    SELECT rowid FROM {{inbox}}
    WHERE consumer = :consumer AND (occurred_at IS NULL OR occurred_at < :horizon)
    LIMIT :limit)

-- name: ListAll
-- A record is unpublished while it has a queue row (migration 0007), published with its
-- publication row's time otherwise; the status columns of a published record are the ones an
-- earlier version's relay left in the outbox row (as they were at migration 0007).
-- param: after int64 seq
-- param: limit int
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at,
    CASE WHEN p.seq IS NULL THEN d.at END,
    coalesce(p.attempts, o.attempts), coalesce(p.next_attempt_at, CASE WHEN p.seq IS NULL THEN o.next_attempt_at END),
    coalesce(p.last_error, o.last_error), CASE WHEN p.seq IS NULL THEN o.parked_at ELSE p.parked_at END
FROM {{outbox}} AS o
LEFT JOIN {{queue}} AS p ON p.seq = o.seq
LEFT JOIN {{publications}} AS d ON d.seq = o.seq
WHERE o.seq > :after ORDER BY o.seq LIMIT :limit

-- name: ListPending
-- params: ListAll
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error, p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq AND p.seq > :after AND p.parked_at IS NULL ORDER BY p.seq LIMIT :limit

-- name: ListParked
-- params: ListAll
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error, p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq AND p.seq > :after AND p.parked_at IS NOT NULL ORDER BY p.seq LIMIT :limit

-- name: ListPublished
-- params: ListAll
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, d.at, o.attempts, o.next_attempt_at, o.last_error, o.parked_at
FROM {{outbox}} AS o
LEFT JOIN {{publications}} AS d ON d.seq = o.seq
WHERE o.seq > :after AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT :limit

-- name: ReplayByIDs
-- Published when it has no queue row.
-- param: ids string JSON array
SELECT o.seq, o.id, o.partition_key, NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
FROM {{outbox}} AS o
WHERE o.id IN (SELECT value FROM json_each(:ids)) ORDER BY o.seq

-- name: ReplayByKey
-- param: partition_key string
-- param: since int64 created at or after, unix microseconds
-- param: limit int
SELECT o.seq, o.id, o.partition_key, 1 FROM {{outbox}} AS o
WHERE o.partition_key = :partition_key AND o.created_at >= :since
  AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT :limit

-- name: KeyUnpublished
-- param: partition_key string
SELECT EXISTS (SELECT 1 FROM {{queue}} WHERE partition_key = :partition_key)

-- name: Replay
-- Back to pending, as never attempted (a queue row each, in the
-- outbox row's lane; replayLanes then moves it to its key's lane). ReplayForget then drops
-- their publication rows, so that List reads the next publication.
-- param: seqs string JSON array
INSERT INTO {{queue}} (seq, lane, partition_key)
SELECT o.seq, o.lane, o.partition_key FROM {{outbox}} AS o
WHERE o.seq IN (SELECT value FROM json_each(:seqs))
  AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)

-- name: ReplayForget
-- params: Replay
DELETE FROM {{publications}} WHERE seq IN (SELECT value FROM json_each(:seqs))

-- name: AuditInsert
-- param: at int64 unix microseconds
-- param: actor string
-- param: command string
-- param: arguments string JSON text
-- param: rows int64 rows affected
INSERT INTO {{audit}} (at, actor, command, arguments, rows_affected) VALUES (:at, :actor, :command, :arguments, :rows)

-- name: AuditSetRows
-- Fills in the rows of an audit row written with -1, once (the audit guard
-- allows that one update).
-- param: id int64
-- param: rows int64
UPDATE {{audit}} SET rows_affected = :rows WHERE id = :id AND rows_affected = -1

-- name: AuditList
-- The latest rows, newest first.
-- param: since int64 unix microseconds
-- param: limit int
SELECT id, at, actor, command, arguments, rows_affected FROM {{audit}}
WHERE at >= :since ORDER BY id DESC LIMIT :limit

-- name: ResetLanes
-- outboxkit lanes reset: end the leases of the selected lanes that have an owner. The lease
-- expires now (a settle or renewal of the old lease is refused: owner, generation and expiry
-- all differ) and the new generation fences the old owner's marks; a claimer takes the lane as
-- a free one.
-- param: now int64 unix microseconds
-- param: all bool every lane
-- param: lanes string JSON array, unless all
-- param: owner string '': any
UPDATE {{lanes}} SET owner = '', lease_until = :now, generation = generation + 1
WHERE owner <> '' AND (:all OR lane IN (SELECT value FROM json_each(:lanes))) AND (:owner = '' OR owner = :owner)

-- name: LanesUpdate
-- A resize records the new lane count.
-- param: lanes int the new lane count
UPDATE {{meta}} SET value = :lanes WHERE name = 'lanes'

-- name: ResizeAllow
-- The marker the immutability trigger (migration 0006) allows a lane change under, inserted
-- and deleted (ResizeDone) in one write transaction.
INSERT INTO {{meta}} (name, value) VALUES ('lanes_resize', 1)

-- name: ResizeDone
DELETE FROM {{meta}} WHERE name = 'lanes_resize'

-- name: ResizeLeases
-- A resize ends every lease as ResetLanes does, free lanes too.
-- param: now int64 unix microseconds
UPDATE {{lanes}} SET owner = '', lease_until = :now, generation = generation + 1

-- name: ResizeDropLanes
-- param: lanes int the new lane count
DELETE FROM {{lanes}} WHERE lane >= :lanes

-- name: ResizeAddLanes
-- The lanes below :lanes that are missing.
-- params: ResizeDropLanes
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :lanes)
INSERT OR IGNORE INTO {{lanes}} (lane, owner, generation, lease_until) SELECT i, '', 0, 0 FROM n

-- name: ResizeRows
-- The unpublished rows after seq :after, :limit at a time (the queue), with key and lane.
-- param: after int64 seq
-- param: limit int
SELECT seq, partition_key, lane FROM {{queue}}
WHERE seq > :after ORDER BY seq LIMIT :limit

-- name: ResizeMove
-- One row :seq to :lane (in-process: a statement per row costs no round trip), unless it is
-- there already (a replay passes no lane): the row is not rewritten. The lane trigger (migration
-- 0007) moves its queue row.
-- param: seq int64
-- param: lane int
UPDATE {{outbox}} SET lane = :lane WHERE seq = :seq AND lane <> :lane
