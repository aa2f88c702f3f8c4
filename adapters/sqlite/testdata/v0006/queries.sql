-- The SQLite adapter's queries.sql of the version before the pending layout (migration 0007),
-- as main had it: the upgrade tests (pending_migration_test.go) run its writer, relay and
-- cleanup statements as an earlier version's processes would, against a migrated outbox.

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
-- ?1 lanes (JSON array), ?2 now, ?3 limit. The outer scan walks the pending index in seq
-- order and stops after ?3 deliverable rows; the lane test reads the index only. The
-- NOT EXISTS probe reads the small blocked index (empty when nothing failed).
SELECT {{cols}}
FROM {{outbox}} AS o INDEXED BY {{outbox_pending}}
WHERE o.published_at IS NULL
  AND o.lane IN (SELECT value FROM json_each(?1))
  AND o.parked_at IS NULL
  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ?2)
  AND NOT EXISTS (
    SELECT 1 FROM {{outbox}} AS b INDEXED BY {{outbox_blocked}}
    WHERE b.partition_key = o.partition_key AND b.seq < o.seq
      AND b.published_at IS NULL
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at IS NOT NULL)
      AND (b.parked_at IS NOT NULL OR b.next_attempt_at > ?2))
ORDER BY o.seq
LIMIT ?3

-- name: LeaseState
-- ?1 lanes (JSON array)
SELECT lane, owner, generation, lease_until FROM {{lanes}}
WHERE lane IN (SELECT value FROM json_each(?1))

-- name: Publish
-- ?1 now, ?2 seqs (JSON array), ?3 lanes (JSON array)
UPDATE {{outbox}} SET published_at = ?1
WHERE seq IN (SELECT value FROM json_each(?2))
  AND published_at IS NULL
  AND lane IN (SELECT value FROM json_each(?3))

-- name: DeletePublished
-- ?1 seqs (JSON array), ?2 lanes (JSON array)
DELETE FROM {{outbox}}
WHERE seq IN (SELECT value FROM json_each(?1))
  AND published_at IS NULL
  AND lane IN (SELECT value FROM json_each(?2))

-- name: Fail
-- ?1 now, ?2 failures (JSON array of {"s":seq,"d":delay_us,"p":0|1,"e":error}),
-- ?3 lanes (JSON array)
UPDATE {{outbox}} SET
    attempts = attempts + 1,
    last_error = f.value ->> '$.e',
    next_attempt_at = ?1 + (f.value ->> '$.d'),
    parked_at = CASE WHEN f.value ->> '$.p' THEN ?1 ELSE parked_at END
FROM json_each(?2) AS f
WHERE {{outbox}}.seq = f.value ->> '$.s'
  AND {{outbox}}.published_at IS NULL
  AND {{outbox}}.lane IN (SELECT value FROM json_each(?3))

-- name: MinPending
SELECT min(seq) FROM {{outbox}} INDEXED BY {{outbox_pending}} WHERE published_at IS NULL

-- name: Prune
-- ?1 published before, ?2 seq below (exclusive), ?3 limit
DELETE FROM {{outbox}} WHERE seq IN (
    SELECT seq FROM {{outbox}} INDEXED BY {{outbox_published}}
    WHERE published_at IS NOT NULL AND published_at < ?1 AND seq < ?2
    LIMIT ?3)

-- name: Stats
-- Bounded cost: never a scan of all published rows. Unpublished rows are counted on the pending
-- index, parked ones on the blocked index; published rows are counted on the published index up
-- to ? (Go's cap), and beyond it estimated from the seq range (AUTOINCREMENT: max - min + 1,
-- less the rows deleted in between); the oldest pending record is the first one in seq order.
SELECT
    (SELECT count(*) FROM {{outbox}} WHERE published_at IS NULL),
    (SELECT count(*) FROM {{outbox}}
        WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL),
    (SELECT count(*) FROM (SELECT 1 FROM {{outbox}} WHERE published_at IS NOT NULL LIMIT ?)),
    coalesce((SELECT max(seq) FROM {{outbox}}) - (SELECT min(seq) FROM {{outbox}}) + 1, 0),
    (SELECT created_at FROM {{outbox}} WHERE published_at IS NULL AND parked_at IS NULL ORDER BY seq LIMIT 1)

-- name: Blocked
-- Pending records held back by an earlier parked record of their partition key: the parked keys
-- from the blocked index, then (CROSS JOIN keeps that order) their pending records after the
-- first parked one on the pending index.
WITH p AS (
    SELECT partition_key, min(seq) AS seq FROM {{outbox}}
    WHERE published_at IS NULL AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL) AND parked_at IS NOT NULL
    GROUP BY partition_key
)
SELECT count(*) FROM p CROSS JOIN {{outbox}} AS o
WHERE o.published_at IS NULL AND o.seq > p.seq AND o.partition_key = p.partition_key AND o.parked_at IS NULL

-- name: PendingDestinations
-- Pending (unpublished, not parked) records per destination among the first ? of them in seq
-- order (the pending index). Operators only (outboxkit status).
SELECT destination, count(*) FROM (
    SELECT destination FROM {{outbox}} WHERE published_at IS NULL AND parked_at IS NULL ORDER BY seq LIMIT ?
) GROUP BY destination

-- name: PublishedRecent
-- The records published after ? (unix microseconds), at most ? of the most recent ones (the
-- published index): their count and the oldest publication time among them. Operators only
-- (outboxkit status).
SELECT count(*), min(published_at) FROM (
    SELECT published_at FROM {{outbox}} WHERE published_at IS NOT NULL AND published_at > ?
    ORDER BY published_at DESC LIMIT ?
)

-- name: Lanes
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{outbox}}
WHERE published_at IS NULL AND parked_at IS NOT NULL

-- name: Unpark
UPDATE {{outbox}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = ?
  AND published_at IS NULL
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
SELECT {{cols}} FROM {{outbox}} WHERE seq > ?1 ORDER BY seq LIMIT ?2

-- name: ListPending
SELECT {{cols}} FROM {{outbox}} WHERE seq > ?1 AND published_at IS NULL AND parked_at IS NULL ORDER BY seq LIMIT ?2

-- name: ListParked
SELECT {{cols}} FROM {{outbox}} WHERE seq > ?1 AND published_at IS NULL AND parked_at IS NOT NULL ORDER BY seq LIMIT ?2

-- name: ListPublished
SELECT {{cols}} FROM {{outbox}} WHERE seq > ?1 AND published_at IS NOT NULL ORDER BY seq LIMIT ?2

-- name: ReplayByIDs
-- ?1 the IDs as a JSON array.
SELECT seq, id, partition_key, published_at IS NOT NULL FROM {{outbox}}
WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY seq

-- name: ReplayByKey
-- ?1 key, ?2 created at or after (unix µs), ?3 limit.
SELECT seq, id, partition_key, 1 FROM {{outbox}}
WHERE partition_key = ?1 AND created_at >= ?2 AND published_at IS NOT NULL
ORDER BY seq LIMIT ?3

-- name: KeyUnpublished
SELECT EXISTS (SELECT 1 FROM {{outbox}} INDEXED BY {{outbox_pending}}
               WHERE published_at IS NULL AND partition_key = ?1)

-- name: Replay
-- ?1 the seqs as a JSON array: back to pending, as never attempted.
UPDATE {{outbox}} SET published_at = NULL, attempts = 0, next_attempt_at = NULL, last_error = '',
    parked_at = NULL
WHERE seq IN (SELECT value FROM json_each(?1)) AND published_at IS NOT NULL

-- name: AuditInsert
-- ?1 at (unix µs), ?2 actor, ?3 command, ?4 arguments, ?5 rows affected.
INSERT INTO {{audit}} (at, actor, command, arguments, rows_affected) VALUES (?1, ?2, ?3, ?4, ?5)

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
-- The unpublished rows after seq ?1, ?2 at a time (the pending index), with key and lane.
SELECT seq, partition_key, lane FROM {{outbox}} INDEXED BY {{outbox_pending}}
WHERE published_at IS NULL AND seq > ?1 ORDER BY seq LIMIT ?2

-- name: ResizeMove
-- One row ?1 to lane ?2 (in-process: a statement per row costs no round trip).
UPDATE {{outbox}} SET lane = ?2 WHERE seq = ?1
