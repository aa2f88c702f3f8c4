-- The SQLite adapter's statements, loaded by queries.go (internal/sqlfile). {{name}} is an
-- identifier the adapter validated and quoted at construction (names in options.go); {{cols}} is
-- the record column list. Lists (lanes, seqs, failures) are bound as one JSON array parameter
-- and read with json_each, so every statement has a fixed text whatever the list length.

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
INSERT INTO {{migrations}} (version, name, applied_at) VALUES (?, ?, ?)

-- name: RecordVersionInbox
INSERT INTO {{inbox_migrations}} (version, name, applied_at) VALUES (?, ?, ?)

-- name: GetLanes
SELECT value FROM {{meta}} WHERE name = 'lanes'

-- name: SetLanes
INSERT INTO {{meta}} (name, value) VALUES ('lanes', ?)

-- name: SeedLanes
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
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

-- name: DropEarlierIndexes
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

-- name: PublisherGet
SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1

-- name: PublisherBump
-- ?1 kind, ?2 holder, ?3 since
UPDATE {{publisher}} SET generation = generation + 1, kind = ?1, holder = ?2, since = ?3
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
INSERT INTO {{workers}} (owner, expires_at) VALUES (?1, ?2)
    ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at

-- name: HeartbeatDelete
DELETE FROM {{workers}} WHERE owner = ?

-- name: HeartbeatExpired
DELETE FROM {{workers}} WHERE expires_at <= ?

-- name: HeartbeatCount
SELECT count(*) FROM {{workers}} WHERE expires_at > ?

-- name: ClaimOwned
-- ?1 now. The claimable lanes that still have an owner (its lease expired): ClaimLanes runs it
-- in the same write transaction before Claim and marks their leases TakenOver.
SELECT lane FROM {{lanes}} WHERE owner <> '' AND lease_until <= ?1

-- name: Claim
-- ?1 owner, ?2 lease_until, ?3 now, ?4 max
UPDATE {{lanes}} SET owner = ?1, generation = generation + 1, lease_until = ?2
WHERE lane IN (SELECT lane FROM {{lanes}} WHERE owner = '' OR lease_until <= ?3 ORDER BY lane LIMIT ?4)
RETURNING lane, generation

-- name: Renew
-- ?1 lease_until, ?2 lane, ?3 owner, ?4 generation, ?5 now
UPDATE {{lanes}} SET lease_until = ?1
WHERE lane = ?2 AND owner = ?3 AND generation = ?4 AND lease_until > ?5 AND owner <> ''

-- name: ReleaseLane
-- ?1 lane, ?2 owner, ?3 generation
UPDATE {{lanes}} SET owner = '', lease_until = 0
WHERE lane = ?1 AND owner = ?2 AND generation = ?3 AND owner <> ''

-- name: Fetch
-- ?1 lanes (JSON array), ?2 now, ?3 limit. The outer scan walks the queue (migration 0007) in
-- seq order (its rowid) and stops after ?3 deliverable rows, then reads each row's record by
-- the outbox's rowid (CROSS JOIN keeps the queue outer). The NOT EXISTS probe reads the queue's
-- small failed index (empty when nothing failed). The status columns come from the queue row.
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, p.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error,
    p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq
  AND p.lane IN (SELECT value FROM json_each(?1))
  AND p.parked_at IS NULL
  AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= ?2)
  AND NOT EXISTS (
    SELECT 1 FROM {{queue}} AS b INDEXED BY {{queue_failed}}
    WHERE b.partition_key = p.partition_key AND b.seq < p.seq
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at > ?2))
ORDER BY p.seq
LIMIT ?3

-- name: LeaseState
-- ?1 lanes (JSON array)
SELECT lane, owner, generation, lease_until FROM {{lanes}}
WHERE lane IN (SELECT value FROM json_each(?1))

-- name: Publish
-- ?1 now, ?2 seqs (JSON array), ?3 lanes (JSON array): the publication rows of the given queue
-- rows in the held lanes; PublishDequeue then removes those queue rows, in the same fenced
-- transaction.
INSERT OR REPLACE INTO {{publications}} (seq, at)
SELECT seq, ?1 FROM {{queue}}
WHERE seq IN (SELECT value FROM json_each(?2))
  AND lane IN (SELECT value FROM json_each(?3))

-- name: PublishDequeue
-- ?1 seqs (JSON array), ?2 lanes (JSON array)
DELETE FROM {{queue}}
WHERE seq IN (SELECT value FROM json_each(?1))
  AND lane IN (SELECT value FROM json_each(?2))

-- name: DeletePublished
-- ?1 seqs (JSON array), ?2 lanes (JSON array): the outbox rows of the given queue rows in the
-- held lanes; the delete trigger (migration 0007) removes their queue rows.
DELETE FROM {{outbox}}
WHERE seq IN (SELECT seq FROM {{queue}}
              WHERE seq IN (SELECT value FROM json_each(?1))
                AND lane IN (SELECT value FROM json_each(?2)))

-- name: Fail
-- ?1 now, ?2 failures (JSON array of {"s":seq,"d":delay_us,"p":0|1,"e":error}),
-- ?3 lanes (JSON array). Only the queue row changes.
UPDATE {{queue}} SET
    attempts = attempts + 1,
    last_error = f.value ->> '$.e',
    next_attempt_at = ?1 + (f.value ->> '$.d'),
    parked_at = CASE WHEN f.value ->> '$.p' THEN ?1 ELSE parked_at END
FROM json_each(?2) AS f
WHERE {{queue}}.seq = f.value ->> '$.s'
  AND {{queue}}.lane IN (SELECT value FROM json_each(?3))

-- name: MinPending
SELECT min(seq) FROM {{queue}}

-- name: Prune
-- ?1 published before, ?2 seq below (exclusive), ?3 limit. Rows published before ?1 (the
-- publications' time index) below ?2, which Go bounds by the lowest queued seq; the delete
-- trigger (migration 0007) removes their publication rows.
DELETE FROM {{outbox}} WHERE seq IN (
    SELECT seq FROM {{publications}} INDEXED BY {{publications_at}}
    WHERE at < ?1 AND seq < ?2
    LIMIT ?3)

-- name: Stats
-- Bounded cost: never a scan of all published rows. Unpublished rows are counted on the queue,
-- parked ones on its failed index; published rows are counted on the publications up to ? (Go's
-- cap), and beyond it estimated from the seq range (AUTOINCREMENT: max - min + 1, less the rows
-- deleted in between); the oldest pending record is the first queue row in seq order that is not
-- parked.
SELECT
    (SELECT count(*) FROM {{queue}}),
    (SELECT count(*) FROM {{queue}}
        WHERE (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL),
    (SELECT count(*) FROM (SELECT 1 FROM {{publications}} LIMIT ?)),
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

-- name: PendingDestinations
-- Pending (unpublished, not parked) records per destination among the first ? of them in seq
-- order (the queue). Operators only (outboxkit status).
SELECT destination, count(*) FROM (
    SELECT o.destination FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
    WHERE o.seq = p.seq AND p.parked_at IS NULL ORDER BY p.seq LIMIT ?
) GROUP BY destination

-- name: PublishedRecent
-- The records published after ? (unix microseconds), at most ? of the most recent ones (the
-- publications' time index): their count and the oldest publication time among them. Operators
-- only (outboxkit status).
SELECT count(*), min(at) FROM (
    SELECT at FROM {{publications}} WHERE at > ?
    ORDER BY at DESC LIMIT ?
)

-- name: Lanes
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{queue}} WHERE parked_at IS NOT NULL

-- name: Unpark
UPDATE {{queue}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = ?
  AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)

-- name: Horizon
SELECT horizon FROM {{inbox_horizons}} WHERE consumer = ?

-- name: InsertInbox
INSERT INTO {{inbox}}
    (consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer, event_id) DO NOTHING

-- name: SelectInbox
SELECT digest, source_position, outcome, occurred_at, processed_at
FROM {{inbox}} WHERE consumer = ? AND event_id = ?

-- name: LockVersion
SELECT version FROM {{inbox_versions}} WHERE consumer = ? AND entity = ?

-- name: SetVersion
INSERT INTO {{inbox_versions}} (consumer, entity, version) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer, entity) DO UPDATE SET version = excluded.version

-- name: RaiseHorizon
-- ?1 consumer, ?2 before; returns the horizon in force
INSERT INTO {{inbox_horizons}} (consumer, horizon) VALUES (?1, ?2)
ON CONFLICT (consumer) DO UPDATE SET horizon = max(horizon, excluded.horizon)
RETURNING horizon

-- name: PruneInbox
-- ?1 consumer, ?2 horizon, ?3 limit
DELETE FROM {{inbox}} WHERE rowid IN (
    SELECT rowid FROM {{inbox}}
    WHERE consumer = ?1 AND (occurred_at IS NULL OR occurred_at < ?2)
    LIMIT ?3)

-- name: ListAll
-- A record is unpublished while it has a queue row (migration 0007), published with its
-- publication row's time otherwise; the status columns of a published record are the ones an
-- earlier version's relay left in the outbox row (as they were at migration 0007).
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at,
    CASE WHEN p.seq IS NULL THEN d.at END,
    coalesce(p.attempts, o.attempts), coalesce(p.next_attempt_at, CASE WHEN p.seq IS NULL THEN o.next_attempt_at END),
    coalesce(p.last_error, o.last_error), CASE WHEN p.seq IS NULL THEN o.parked_at ELSE p.parked_at END
FROM {{outbox}} AS o
LEFT JOIN {{queue}} AS p ON p.seq = o.seq
LEFT JOIN {{publications}} AS d ON d.seq = o.seq
WHERE o.seq > ?1 ORDER BY o.seq LIMIT ?2

-- name: ListPending
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error, p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq AND p.seq > ?1 AND p.parked_at IS NULL ORDER BY p.seq LIMIT ?2

-- name: ListParked
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, NULL, p.attempts, p.next_attempt_at, p.last_error, p.parked_at
FROM {{queue}} AS p CROSS JOIN {{outbox}} AS o
WHERE o.seq = p.seq AND p.seq > ?1 AND p.parked_at IS NOT NULL ORDER BY p.seq LIMIT ?2

-- name: ListPublished
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
    o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id,
    o.correlation_id, o.lane, o.created_at, d.at, o.attempts, o.next_attempt_at, o.last_error, o.parked_at
FROM {{outbox}} AS o
LEFT JOIN {{publications}} AS d ON d.seq = o.seq
WHERE o.seq > ?1 AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT ?2

-- name: ReplayByIDs
-- ?1 the IDs as a JSON array. Published when it has no queue row.
SELECT o.seq, o.id, o.partition_key, NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
FROM {{outbox}} AS o
WHERE o.id IN (SELECT value FROM json_each(?1)) ORDER BY o.seq

-- name: ReplayByKey
-- ?1 key, ?2 created at or after (unix µs), ?3 limit.
SELECT o.seq, o.id, o.partition_key, 1 FROM {{outbox}} AS o
WHERE o.partition_key = ?1 AND o.created_at >= ?2
  AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)
ORDER BY o.seq LIMIT ?3

-- name: KeyUnpublished
SELECT EXISTS (SELECT 1 FROM {{queue}} WHERE partition_key = ?1)

-- name: Replay
-- ?1 the seqs as a JSON array: back to pending, as never attempted (a queue row each, in the
-- outbox row's lane; replayLanes then moves it to its key's lane). ReplayForget then drops
-- their publication rows, so that List reads the next publication.
INSERT INTO {{queue}} (seq, lane, partition_key)
SELECT o.seq, o.lane, o.partition_key FROM {{outbox}} AS o
WHERE o.seq IN (SELECT value FROM json_each(?1))
  AND NOT EXISTS (SELECT 1 FROM {{queue}} AS p WHERE p.seq = o.seq)

-- name: ReplayForget
DELETE FROM {{publications}} WHERE seq IN (SELECT value FROM json_each(?1))

-- name: AuditInsert
-- ?1 at (unix µs), ?2 actor, ?3 command, ?4 arguments, ?5 rows affected.
INSERT INTO {{audit}} (at, actor, command, arguments, rows_affected) VALUES (?1, ?2, ?3, ?4, ?5)

-- name: AuditSetRows
-- ?1 id, ?2 rows: fills in the rows of an audit row written with -1, once (the audit guard
-- allows that one update).
UPDATE {{audit}} SET rows_affected = ?2 WHERE id = ?1 AND rows_affected = -1

-- name: AuditList
-- ?1 since (unix µs), ?2 limit: the latest rows, newest first.
SELECT id, at, actor, command, arguments, rows_affected FROM {{audit}}
WHERE at >= ?1 ORDER BY id DESC LIMIT ?2

-- name: ResetLanes
-- outboxkit lanes reset: end the leases of the selected lanes that have an owner. ?1 now
-- (unix µs), ?2 every lane (0|1), ?3 lanes (JSON array), ?4 owner ('': any). The lease
-- expires now (a settle or renewal of the old lease is refused: owner, generation and expiry
-- all differ) and the new generation fences the old owner's marks; a claimer takes the lane as
-- a free one.
UPDATE {{lanes}} SET owner = '', lease_until = ?1, generation = generation + 1
WHERE owner <> '' AND (?2 OR lane IN (SELECT value FROM json_each(?3))) AND (?4 = '' OR owner = ?4)

-- name: LanesUpdate
-- A resize records the new lane count ?1.
UPDATE {{meta}} SET value = ?1 WHERE name = 'lanes'

-- name: ResizeAllow
-- The marker the immutability trigger (migration 0006) allows a lane change under, inserted
-- and deleted (ResizeDone) in one write transaction.
INSERT INTO {{meta}} (name, value) VALUES ('lanes_resize', 1)

-- name: ResizeDone
DELETE FROM {{meta}} WHERE name = 'lanes_resize'

-- name: ResizeLeases
-- A resize ends every lease as ResetLanes does (?1 now, unix µs), free lanes too.
UPDATE {{lanes}} SET owner = '', lease_until = ?1, generation = generation + 1

-- name: ResizeDropLanes
DELETE FROM {{lanes}} WHERE lane >= ?1

-- name: ResizeAddLanes
-- The lanes below ?1 that are missing.
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?1)
INSERT OR IGNORE INTO {{lanes}} (lane, owner, generation, lease_until) SELECT i, '', 0, 0 FROM n

-- name: ResizeRows
-- The unpublished rows after seq ?1, ?2 at a time (the queue), with key and lane.
SELECT seq, partition_key, lane FROM {{queue}}
WHERE seq > ?1 ORDER BY seq LIMIT ?2

-- name: ResizeMove
-- One row ?1 to lane ?2 (in-process: a statement per row costs no round trip), unless it is
-- there already (a replay passes no lane): the row is not rewritten. The lane trigger (migration
-- 0007) moves its queue row.
UPDATE {{outbox}} SET lane = ?2 WHERE seq = ?1 AND lane <> ?2
