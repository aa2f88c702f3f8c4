-- The MySQL/MariaDB adapter's statements, loaded by queries.go (internal/sqlfile). {{name}} is a
-- table the adapter validated and quoted at construction; {{cols}} is the record column list;
-- nothing else is substituted. Parameters are written :name and declared by the block's
-- "-- param: name GoType description" lines (or taken from another statement by
-- "-- params: Other"); go generate writes their Go structs to queries_gen.go, and the loader
-- writes one ? per occurrence (a repeated name repeats its argument). A parameter of a slice
-- type (other than []byte) is a list, written IN (:lanes): one ? per element, expanded per call
-- by the generated query method; an empty list is NULL (never true, in IN as in NOT IN).
--
-- Time: COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) is the caller's injected time (a
-- "YYYY-MM-DD hh:mm:ss.ffffff" UTC string, timeArg), else the database clock, as in the
-- PostgreSQL file; every time column is a DATETIME(6) in UTC. Either way the expression is a
-- constant of the statement, which the optimizer folds (range scans stay). Durations travel as
-- microseconds.
--
-- dialect: mysql

-- name: MetaGet
-- param: name string
SELECT value FROM {{meta}} WHERE name = :name

-- name: MetaPut
-- param: name string
-- param: value string
INSERT INTO {{meta}} (name, value) VALUES (:name, :value) ON DUPLICATE KEY UPDATE value = VALUES(value)

-- name: LaneCount
SELECT value FROM {{meta}} WHERE name = 'lanes'

-- name: Ingress
-- The relay's reading of the producers' rate (driver.IngressCounter): the highest seq committed,
-- the last entry of the primary key.
SELECT coalesce(max(seq), 0) FROM {{outbox}}

-- name: LaneInsert
-- Followed by LaneRow per lane, joined with commas.
INSERT IGNORE INTO {{lanes}} (lane) VALUES

-- name: LaneRow
-- param: lane int
(:lane)

-- name: InsertPrefix
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at) VALUES

-- name: InsertRow
-- One row of InsertPrefix's VALUES (a multi-row insert joins them with commas).
-- param: id string
-- param: aggregate_type string
-- param: aggregate_id string
-- param: aggregate_version int64
-- param: type string
-- param: schema_id string
-- param: partition_key string
-- param: destination string
-- param: payload []byte
-- param: headers string JSON object text
-- param: tenant string
-- param: causation_id string
-- param: correlation_id string
-- param: lane int
(:id, :aggregate_type, :aggregate_id, :aggregate_version, :type, :schema_id, :partition_key, :destination,
	:payload, :headers, :tenant, :causation_id, :correlation_id, :lane, UTC_TIMESTAMP(6))

-- name: HeartbeatUpsert
-- param: owner string
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: ttl int64 microseconds
INSERT INTO {{workers}} (owner, expires_at)
	VALUES (:owner, COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) + INTERVAL :ttl MICROSECOND)
	ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)

-- name: HeartbeatDelete
-- param: owner string
DELETE FROM {{workers}} WHERE owner = :owner

-- name: HeartbeatPurgeDead
-- Workers whose GET_LOCK session is gone (a lane they lease is tied to a session that no
-- longer holds its lock) are dead: their rows must not count towards the fair share until they
-- expire, or the survivors leave the dead workers' lanes unclaimed. A live owner whose session
-- alone broke registers again at its next heartbeat.
-- param: owner string the caller, never purged
-- param: lock_prefix string the GET_LOCK names' prefix (Store.lockPrefix); the lane follows
DELETE w FROM {{workers}} AS w JOIN {{lanes}} AS l ON l.owner = w.owner
	WHERE w.owner <> :owner AND l.lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(:lock_prefix, l.lane)) <=> l.lock_session)

-- name: HeartbeatCount
-- param: now any the caller's time (timeArg), NULL: the database clock
SELECT COUNT(*) FROM {{workers}} WHERE expires_at > COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))

-- name: ClaimSkipLocked
-- Free or expired leases, and leases whose holder's session no longer holds the lane's
-- GET_LOCK (ClaimGetLock, or an owner holding a sign of life: core.Liveness).
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: lock_prefix string the GET_LOCK names' prefix
-- param: max int lanes claimed at most
SELECT lane FROM {{lanes}}
	WHERE owner = '' OR lease_until IS NULL OR lease_until <= COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))
	   OR (lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(:lock_prefix, lane)) <=> lock_session))
	ORDER BY lane LIMIT :max FOR UPDATE SKIP LOCKED

-- name: ClaimGetLockCandidates
-- Candidates of a GET_LOCK claim: free or expired leases, and leases whose holder's
-- session no longer holds the lane's lock (its connection died). The last column says
-- whether the lease itself is free or expired.
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: lock_prefix string the GET_LOCK names' prefix
SELECT lane, (owner = '' OR lease_until IS NULL OR lease_until <= COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))) AS expired
	FROM {{lanes}}
	WHERE owner = '' OR lease_until IS NULL OR lease_until <= COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))
	   OR (lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(:lock_prefix, lane)) <=> lock_session))
	ORDER BY lane FOR UPDATE SKIP LOCKED

-- name: ClaimOwned
-- Lanes of a claim (locked by its transaction) that still have an owner: their leases
-- expired or their holder's session is gone (ReleaseLanes clears the owner). ClaimLanes
-- marks their new leases TakenOver.
-- param: lanes []int the claimed lanes
SELECT lane FROM {{lanes}} WHERE lane IN (:lanes) AND owner <> ''

-- name: ClaimUpdate
-- param: owner string
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: ttl int64 microseconds
-- param: lock_session any CONNECTION_ID() of the owner's lock session, NULL without GET_LOCK
-- param: lanes []int the claimed lanes
UPDATE {{lanes}} SET owner = :owner, generation = generation + 1,
	lease_until = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) + INTERVAL :ttl MICROSECOND, lock_session = :lock_session
	WHERE lane IN (:lanes)

-- name: LockedBy
-- param: lane int
-- param: owner string
-- param: lock_session int64 CONNECTION_ID() of the lock session
SELECT COUNT(*) FROM {{lanes}} WHERE lane = :lane AND owner = :owner AND lock_session = :lock_session

-- name: SetLockSession
-- param: lock_session int64 CONNECTION_ID() of the lock session
-- param: lane int
-- param: owner string
-- param: generation int64 the lease's
UPDATE {{lanes}} SET lock_session = :lock_session WHERE lane = :lane AND owner = :owner AND generation = :generation

-- name: PendingDestinations
-- Pending (not parked) records per destination among the first :limit of them in seq order (the
-- pending table's primary key, then one outbox lookup per row). Operators only (outboxkit
-- status).
-- param: limit int pending records read
SELECT w.destination, COUNT(*) FROM (
	SELECT r.destination FROM {{pending}} AS o STRAIGHT_JOIN {{outbox}} AS r ON r.seq = o.seq
	WHERE o.parked_at IS NULL
	ORDER BY o.seq LIMIT :limit
) AS w GROUP BY w.destination

-- name: LanesRead
-- param: lanes []int
SELECT lane, generation, lease_until FROM {{lanes}} WHERE lane IN (:lanes) ORDER BY lane

-- name: LanesLock
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: lanes []int
SELECT lane, owner, generation, lease_until, COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))
	FROM {{lanes}} WHERE lane IN (:lanes) ORDER BY lane FOR UPDATE

-- name: RenewUpdate
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: ttl int64 microseconds
-- param: lanes []int the lanes still held
UPDATE {{lanes}} SET lease_until = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) + INTERVAL :ttl MICROSECOND WHERE lane IN (:lanes)

-- name: Release
-- param: lane int
-- param: owner string
-- param: generation int64 the lease's
UPDATE {{lanes}} SET owner = '', lease_until = NULL, lock_session = NULL
	WHERE lane = :lane AND owner = :owner AND generation = :generation

-- name: FetchBlocked
-- The keys held back in the leased lanes: the lowest seq of each key's pending rows that are
-- parked or not yet due (the pending table's ix_failed, tiny).
-- param: lanes []int the leased lanes
-- param: now any the caller's time (timeArg), NULL: the database clock
SELECT partition_key, MIN(seq) FROM {{pending}}
	WHERE failed_lane IN (:lanes) AND (parked_at IS NOT NULL OR next_attempt_at > COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)))
	GROUP BY partition_key

-- name: FetchPrefix
-- Pending rows in seq order (the pending table's primary key; the lane filter is checked on
-- the narrow row), each joined to its outbox row by primary key (STRAIGHT_JOIN: pending is
-- the outer side, whatever the statistics say). The status columns and the lane come from the
-- pending row; published_at is NULL. The caller appends FetchLanes (unless every lane is
-- leased), the blocked keys' conditions (FetchKey each, or FetchNotExists) and FetchEnd.
-- param: now any the caller's time (timeArg), NULL: the database clock
SELECT r.seq, r.id, r.aggregate_type, r.aggregate_id, r.aggregate_version, r.type, r.schema_id,
	r.partition_key, r.destination, r.payload, r.headers, r.tenant, r.causation_id, r.correlation_id,
	o.lane, r.created_at, NULL, o.attempts, o.next_attempt_at, o.last_error, o.parked_at
	FROM {{pending}} AS o FORCE INDEX (PRIMARY) STRAIGHT_JOIN {{outbox}} AS r ON r.seq = o.seq
	WHERE o.parked_at IS NULL
	  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)))

-- name: FetchLanes
-- Fetch's lane condition, unless every lane is leased.
-- param: lanes []int the leased lanes
AND o.lane IN (:lanes)

-- name: FetchKey
-- Fetch's condition per blocked key (up to maxInlineBlocked of them; FetchNotExists beyond).
-- param: key string the partition key
-- param: seq int64 its first blocking seq
AND NOT (o.partition_key = :key AND o.seq >= :seq)

-- name: FetchEnd
-- param: limit int
ORDER BY o.seq LIMIT :limit

-- name: FetchNotExists
-- param: now any the caller's time (timeArg), NULL: the database clock
AND NOT EXISTS (SELECT 1 FROM {{pending}} b
	WHERE b.failed_lane = o.lane AND b.partition_key = o.partition_key AND b.seq <= o.seq
	  AND (b.parked_at IS NOT NULL OR b.next_attempt_at > COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))))

-- name: SettlePublish
-- A mark's first statement: the settle log rows of the records still pending in the leased
-- lanes (their publication time). Settle runs SettleUnpend next with the same seqs and lanes.
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: seqs []int64 the published records
-- param: lanes []int the leased lanes
INSERT INTO {{settled}} (seq, at)
	SELECT seq, COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) FROM {{pending}} WHERE seq IN (:seqs) AND lane IN (:lanes)
	ON DUPLICATE KEY UPDATE at = VALUES(at)

-- name: SettleDelete
-- Delete on publish, after SettleUnpend (the pending rows, one statement) and UnpendedOn: the
-- outbox rows go; the delete trigger (migration 010) skips its per-row pending delete while
-- @outboxkit_unpended is set (UnpendedOff clears it right after). A row's outbox lane is its
-- pending row's (lane changes update the outbox row, and the update trigger copies them);
-- published_at IS NULL spares the rows published before the migration.
-- param: seqs []int64 the published records
-- param: lanes []int the leased lanes
DELETE FROM {{outbox}} WHERE seq IN (:seqs) AND lane IN (:lanes) AND published_at IS NULL

-- name: SettleFail
-- param: error string the last error
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: delay int64 microseconds until the next attempt
-- param: park bool
-- param: seq int64
-- param: lanes []int the leased lanes
UPDATE {{pending}} SET attempts = attempts + 1, last_error = :error,
	next_attempt_at = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) + INTERVAL :delay MICROSECOND,
	parked_at = IF(:park, COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), parked_at)
	WHERE seq = :seq AND lane IN (:lanes)

-- name: MinUnpublished
SELECT MIN(seq) FROM {{pending}}

-- name: PruneOutbox
-- Cleanup of records published before migration 010 (or by a relay of the earlier version):
-- they carry published_at. The delete trigger takes their pending rows (none: a record with
-- published_at has none, unless a replay put it back, which cleared published_at).
-- param: before any the cut-off (timeArg)
-- param: below int64 the exclusive seq bound
-- param: limit int64
DELETE FROM {{outbox}}
	WHERE published_at IS NOT NULL AND published_at < CAST(:before AS DATETIME(6)) AND seq < :below
	ORDER BY seq LIMIT :limit

-- name: ListPrefix
-- Records after seq :after, each with its pending row (status and lane) when it has one, else as
-- published: at its settle log time, or its published_at (published before migration 010). The
-- caller appends the state's condition and ListEnd.
-- param: after int64 the exclusive seq bound
SELECT o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
	o.partition_key, o.destination, o.payload, o.headers, o.tenant, o.causation_id, o.correlation_id,
	COALESCE(p.lane, o.lane), o.created_at, IF(p.seq IS NULL, COALESCE(s.at, o.published_at), NULL),
	IF(p.seq IS NULL, o.attempts, p.attempts), IF(p.seq IS NULL, o.next_attempt_at, p.next_attempt_at),
	IF(p.seq IS NULL, o.last_error, p.last_error), IF(p.seq IS NULL, o.parked_at, p.parked_at)
	FROM {{outbox}} AS o LEFT JOIN {{pending}} AS p ON p.seq = o.seq
	LEFT JOIN {{settled}} AS s ON s.seq = o.seq
	WHERE o.seq > :after

-- name: ListPending
-- ListPrefix's condition for driver.StatePending (StateAll has none).
AND p.seq IS NOT NULL AND p.parked_at IS NULL

-- name: ListParked
AND p.parked_at IS NOT NULL

-- name: ListPublished
AND p.seq IS NULL

-- name: ListEnd
-- param: limit int the page size
ORDER BY o.seq LIMIT :limit

-- name: Stats
-- Bounded cost (operators and the daemon's metrics call it often): at most the first :limit (Go's
-- cap) rows of the pending table: beyond it Go takes the optimizer's estimate
-- (PendingEstimate). Parked rows are counted on ix_failed; the outbox's row count is InnoDB's
-- estimate (information_schema.TABLES.TABLE_ROWS; :table is the bare table name), from
-- which Go subtracts the pending rows (or, for a small table, counts the published rows with
-- StatsPublished); the oldest pending record is the first unparked pending row in seq order.
-- param: limit int pending rows counted at most
-- param: table string the outbox table's bare name
SELECT
	(SELECT COUNT(*) FROM (SELECT 1 FROM {{pending}} LIMIT :limit) AS u),
	(SELECT COUNT(*) FROM {{pending}} WHERE failed_lane IS NOT NULL AND parked_at IS NOT NULL),
	(SELECT COALESCE(MAX(TABLE_ROWS), 0) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table),
	(SELECT created_at FROM {{pending}} WHERE parked_at IS NULL ORDER BY seq LIMIT 1)

-- name: PendingEstimate
-- The optimizer's estimate of the pending rows: the "rows" column of this EXPLAIN.
EXPLAIN SELECT 1 FROM {{pending}}

-- name: StatsPublished
-- The exact count of published rows (outbox rows without a pending row), for a small table
-- only.
SELECT (SELECT COUNT(*) FROM {{outbox}}) - (SELECT COUNT(*) FROM {{pending}})

-- name: Blocked
-- Pending records held back by an earlier parked record of their partition key, among the
-- first :limit pending records after the first parked one (the pending table's primary key; a
-- lower bound beyond them). The parked keys come from ix_failed.
-- param: limit int pending records read
SELECT COUNT(*) FROM (
	SELECT o.seq, o.lane, o.partition_key FROM {{pending}} AS o
	WHERE o.parked_at IS NULL
	  AND o.seq > (SELECT COALESCE(MIN(seq), 9223372036854775807) FROM {{pending}} WHERE failed_lane IS NOT NULL AND parked_at IS NOT NULL)
	ORDER BY o.seq LIMIT :limit
) AS w JOIN (
	SELECT failed_lane, partition_key, MIN(seq) AS seq FROM {{pending}}
	WHERE failed_lane IS NOT NULL AND parked_at IS NOT NULL
	GROUP BY failed_lane, partition_key
) AS p ON w.lane = p.failed_lane AND w.partition_key = p.partition_key AND w.seq > p.seq

-- name: Lanes
SELECT lane, owner, generation, lease_until FROM {{lanes}} ORDER BY lane

-- name: ScriptMetaPut
-- MigrationSQL: MetaPut with the literals {{key}} and {{value}} the adapter quotes.
INSERT INTO {{meta}} (name, value) VALUES ({{key}}, {{value}}) ON DUPLICATE KEY UPDATE value = VALUES(value)

-- name: ParkedKeys
SELECT DISTINCT partition_key FROM {{pending}}
	WHERE failed_lane IS NOT NULL AND parked_at IS NOT NULL

-- name: Unpark
-- param: lane int the key's lane
-- param: partition_key string
UPDATE {{pending}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
	WHERE failed_lane = :lane AND partition_key = :partition_key

-- name: InboxConsumerNames
-- The inbox's consumers (with records or a horizon) and their horizons, in name order, at most
-- :consumers of them: the record table's names by a loose scan of its primary key (GROUP BY
-- on its first column), unioned with the horizons table.
-- param: consumers int consumers returned at most
SELECT n.consumer, h.horizon FROM (
	SELECT consumer FROM (
		SELECT consumer FROM {{inbox}} GROUP BY consumer
		UNION SELECT consumer FROM {{horizons}}
	) AS u ORDER BY consumer LIMIT :consumers
) AS n LEFT JOIN {{horizons}} AS h ON h.consumer = n.consumer
ORDER BY n.consumer

-- name: InboxConsumerCount
-- How many records the consumer holds, counted up to :limit (a range of the primary key).
-- param: consumer string
-- param: limit int records counted at most
SELECT count(*) FROM (SELECT 1 FROM {{inbox}} WHERE consumer = :consumer LIMIT :limit) AS x

-- name: HorizonGet
-- A consistent read without a lock: Inbox.Process reads it after the record's insert, as the
-- first consistent read of its transaction, so its snapshot begins after that insert.
-- param: consumer string
SELECT horizon FROM {{horizons}} WHERE consumer = :consumer

-- name: RaiseHorizon
-- Autocommit, before PruneInbox deletes anything below the horizon; never lowers it.
-- param: consumer string
-- param: horizon any the new horizon (timeArg)
INSERT INTO {{horizons}} (consumer, horizon) VALUES (:consumer, CAST(:horizon AS DATETIME(6)))
	ON DUPLICATE KEY UPDATE horizon = GREATEST(COALESCE(horizon, VALUES(horizon)), VALUES(horizon))

-- name: PruneInboxIDs
-- A prune's first step, a consistent read without locks: the keys (event ID, source, tenant) of
-- up to :limit records, of every source and tenant, that occurred before the horizon. A locking
-- scan of ix_occurred (a DELETE with this WHERE) would lock the first record past the range,
-- which may be a delivery's uncommitted insert, and wait for that delivery's handler to finish.
-- param: consumer string
-- param: horizon any (timeArg)
-- param: limit int
SELECT event_id, source, tenant FROM {{inbox}} FORCE INDEX (ix_occurred)
	WHERE consumer = :consumer AND (occurred_at IS NULL OR occurred_at < CAST(:horizon AS DATETIME(6))) LIMIT :limit

-- name: PruneInbox
-- The second step: those records by their whole primary key (record locks only, no other
-- record read: a record of another source or tenant with the same event ID may be a delivery's
-- uncommitted insert; without the hint the optimizer scans the table when the list covers most
-- of it), the horizon checked again. Followed by PruneInboxKey per record, joined with commas,
-- and ")" (the row constructor IN is a range of the primary key on MySQL and MariaDB).
-- param: consumer string
-- param: horizon any (timeArg)
DELETE i FROM {{inbox}} AS i FORCE INDEX (PRIMARY) WHERE i.consumer = :consumer
	AND (i.occurred_at IS NULL OR i.occurred_at < CAST(:horizon AS DATETIME(6)))
	AND (i.event_id, i.source, i.tenant) IN (

-- name: PruneInboxKey
-- param: event_id string
-- param: source string
-- param: tenant string
(:event_id, :source, :tenant)

-- name: InsertRecord
-- The record's key is (consumer, source, tenant, event_id): the primary key (migration 011).
-- param: consumer string
-- param: source string '' when the inbox has none
-- param: tenant string '' when the message has none
-- param: event_id string
-- param: digest []byte
-- param: source_position string
-- param: outcome int
-- param: occurred_at any (timeArg), NULL when unknown
INSERT IGNORE INTO {{inbox}}
	(consumer, source, tenant, event_id, digest, source_position, outcome, occurred_at, processed_at)
	VALUES (:consumer, :source, :tenant, :event_id, :digest, :source_position, :outcome, CAST(:occurred_at AS DATETIME(6)), UTC_TIMESTAMP(6))

-- name: ReadRecord
-- The record of one key, read with a shared lock (the latest committed version).
-- param: consumer string
-- param: source string
-- param: tenant string
-- param: event_id string
SELECT source, tenant, digest, source_position, outcome, occurred_at, processed_at FROM {{inbox}}
	WHERE consumer = :consumer AND event_id = :event_id AND source = :source AND tenant = :tenant
	LOCK IN SHARE MODE

-- name: ReadRecordByID
-- A record of the consumer with the event ID, of any source and tenant (InboxRecords): the one
-- without source and tenant when there is one, else the first by source and tenant (a range of
-- the primary key's (consumer, event_id) prefix, read in its order), with a shared lock as
-- ReadRecord.
-- param: consumer string
-- param: event_id string
SELECT source, tenant, digest, source_position, outcome, occurred_at, processed_at FROM {{inbox}}
	WHERE consumer = :consumer AND event_id = :event_id ORDER BY source, tenant LIMIT 1
	LOCK IN SHARE MODE

-- name: InboxScopeKeyColumns
-- Whether migration 011 (inbox scope) is still to run: how many of source and tenant the
-- inbox's primary key holds (2 once it ran). :table is the bare table name.
-- param: table string
SELECT COUNT(*) FROM information_schema.STATISTICS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table AND INDEX_NAME = 'PRIMARY'
	  AND COLUMN_NAME IN ('source', 'tenant')

-- name: VersionEnsure
-- param: consumer string
-- param: entity string
INSERT INTO {{versions}} (consumer, entity, version) VALUES (:consumer, :entity, NULL)
	ON DUPLICATE KEY UPDATE version = version

-- name: VersionRead
-- param: consumer string
-- param: entity string
SELECT version FROM {{versions}} WHERE consumer = :consumer AND entity = :entity FOR UPDATE

-- name: VersionSet
-- param: consumer string
-- param: entity string
-- param: version int64
INSERT INTO {{versions}} (consumer, entity, version) VALUES (:consumer, :entity, :version)
	ON DUPLICATE KEY UPDATE version = VALUES(version)

-- name: PublisherInit
INSERT IGNORE INTO {{publisher}} (id) VALUES (1)

-- name: PublisherRead
SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1

-- name: PublisherLockX
SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1 FOR UPDATE

-- name: PublisherLockS
-- The fence of ClaimLanes, RenewLanes and SaveCheckpoint: a shared lock that
-- AcquireGeneration's exclusive one waits for (and the other way round).
SELECT generation FROM {{publisher}} WHERE id = 1 LOCK IN SHARE MODE

-- name: PublisherBump
-- param: kind string
-- param: holder string
-- param: now any the caller's time (timeArg), NULL: the database clock
UPDATE {{publisher}} SET generation = generation + 1, kind = :kind, holder = :holder,
	since = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) WHERE id = 1

-- name: CheckpointRead
SELECT source, position, generation, updated_at FROM {{checkpoint}} WHERE id = 1

-- name: CheckpointDelete
-- outboxkit cdc release: the next CDC relay starts as on its first run (a backfill).
DELETE FROM {{checkpoint}} WHERE id = 1

-- name: CheckpointPut
-- param: source string
-- param: position string
-- param: generation int64 the publisher generation
INSERT INTO {{checkpoint}} (id, source, position, generation, updated_at)
	VALUES (1, :source, :position, :generation, UTC_TIMESTAMP(6))
	ON DUPLICATE KEY UPDATE source = VALUES(source), position = VALUES(position),
	generation = VALUES(generation), updated_at = VALUES(updated_at)

-- name: MetaGetForUpdate
-- param: name string
SELECT value FROM {{meta}} WHERE name = :name FOR UPDATE

-- name: AggregateVersionIndexCount
-- param: table string the outbox table's bare name
SELECT COUNT(*) FROM information_schema.STATISTICS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :table AND INDEX_NAME = 'ux_aggregate_version'

-- name: AggregateVersionIndex
CREATE UNIQUE INDEX ux_aggregate_version
	ON {{outbox}} (aggregate_type, aggregate_id, aggregate_version_key, type)

-- name: ConnectionID
SELECT CONNECTION_ID()

-- name: LaneLockTry
-- GET_LOCK claims: take a lane's lock on the owner's dedicated session without waiting.
-- param: name string the lock
SELECT GET_LOCK(:name, 0)

-- name: LaneLockRelease
-- param: name string the lock
DO RELEASE_LOCK(:name)

-- name: MigrateLock
-- Migrate runs alone: a named lock, waited for up to a minute.
-- param: name string the lock
SELECT GET_LOCK(:name, 60)

-- name: MigrateUnlock
-- param: name string the lock
SELECT RELEASE_LOCK(:name)

-- name: ReplayByIDs
-- Replay's selection by ID, locked so that a concurrent
-- cleanup cannot delete it meanwhile; published when it has no pending row.
-- param: ids []string event IDs
SELECT o.seq, o.id, o.partition_key, p.seq IS NULL FROM {{outbox}} AS o
	LEFT JOIN {{pending}} AS p ON p.seq = o.seq
	WHERE o.id IN (:ids) ORDER BY o.seq FOR UPDATE

-- name: ReplayByKey
-- Replay's selection by key, created at or after :since, at most :limit published rows, locked.
-- param: partition_key string
-- param: since any (timeArg)
-- param: limit int published rows at most
SELECT o.seq, o.id, o.partition_key, 1 FROM {{outbox}} AS o
	WHERE o.partition_key = :partition_key AND o.created_at >= CAST(:since AS DATETIME(6))
	  AND NOT EXISTS (SELECT 1 FROM {{pending}} AS p WHERE p.seq = o.seq)
	ORDER BY o.seq LIMIT :limit FOR UPDATE

-- name: KeyUnpublished
-- Whether the key has a pending row (walks the pending table).
-- param: partition_key string
SELECT EXISTS (SELECT 1 FROM {{pending}} WHERE partition_key = :partition_key)

-- name: Replay
-- A replay's first statement: the records :seqs published before migration 010 (or by a
-- relay of the earlier version) lose their published_at and status, as never attempted; the
-- update trigger gives them their pending rows and deletes their settle log rows.
-- param: seqs []int64 the records
UPDATE {{outbox}} SET published_at = NULL, attempts = 0, next_attempt_at = NULL, last_error = NULL,
	parked_at = NULL
	WHERE seq IN (:seqs) AND published_at IS NOT NULL

-- name: AuditInsert
-- param: now any the entry's time (timeArg), NULL: the database clock
-- param: actor string
-- param: command string
-- param: arguments string JSON text
-- param: rows int64 rows affected (-1: filled in later, AuditSetRows)
INSERT INTO {{audit}} (at, actor, command, arguments, rows_affected)
	VALUES (COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), :actor, :command, :arguments, :rows)

-- name: PublishedRecent
-- The publish rate of outboxkit status (driver.StatusReader.PublishRate): of the latest :limit settle
-- log rows by seq (its primary key; the log has no index on at), those published in the last :window
-- microseconds: their count, the oldest one's time and the database's clock.
-- param: limit int settle log rows read
-- param: window int64 microseconds
SELECT COUNT(*), MIN(w.at), UTC_TIMESTAMP(6) FROM (
	SELECT at FROM {{settled}} ORDER BY seq DESC LIMIT :limit) AS w
	WHERE w.at > UTC_TIMESTAMP(6) - INTERVAL :window MICROSECOND

-- name: AuditList
-- The latest rows, newest first.
-- param: since any (sinceArg)
-- param: limit int
SELECT id, at, actor, command, arguments, rows_affected FROM {{audit}}
	WHERE at >= CAST(:since AS DATETIME(6)) ORDER BY id DESC LIMIT :limit

-- name: AuditSetRows
-- core.Operator.PruneInbox fills in the rows of the audit row it wrote with -1, once.
-- param: rows int64
-- param: id int64 the audit row
UPDATE {{audit}} SET rows_affected = :rows WHERE id = :id AND rows_affected = -1

-- name: ResetLanes
-- outboxkit lanes reset: end the leases of the selected lanes that have an owner. One statement
-- that locks the rows in lane order, as Settle and Renew do. The lease expires now (a settle
-- or renewal of the old lease is refused: owner, generation and expiry all differ),
-- lock_session (the sign of life) is cleared, and the new generation fences the old owner's
-- marks. A claimer takes the lane as a free one; under ClaimGetLock (or HoldLiveness), while
-- the old owner's session still holds the lane's GET_LOCK, without the lock (as a free lane
-- whose lock is held), and it takes the lock at a renewal once the old owner has let it go
-- (at its refused renewal or settle, or when its session ends).
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: all bool every lane (lanes is then empty)
-- param: lanes []int the selected lanes
-- param: owner string the lanes' owner, '': any
UPDATE {{lanes}} SET owner = '', lock_session = NULL, lease_until = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), generation = generation + 1
	WHERE owner <> '' AND (:all OR lane IN (:lanes)) AND (:owner = '' OR owner = :owner)
	ORDER BY lane

-- name: TextColumnsPending
-- Whether a file of migration 009 (binary text) is still to run: the columns it converts that
-- still have a character set, in the file's tables (the bare names: outbox, lanes, workers and
-- audit for 009_binary_text.sql; inbox, horizons and versions for
-- 009_binary_text_inbox.sql). No other column of these tables has one of these names.
-- param: tables []string bare table names
SELECT COUNT(*) FROM information_schema.COLUMNS
	WHERE TABLE_SCHEMA = DATABASE() AND CHARACTER_SET_NAME IS NOT NULL
	  AND TABLE_NAME IN (:tables)
	  AND COLUMN_NAME IN ('aggregate_id', 'partition_key', 'headers', 'tenant', 'causation_id',
		'correlation_id', 'owner', 'consumer', 'entity', 'actor', 'command', 'arguments')

-- name: TriggerBody
-- The immutability trigger's body (Migrate runs 008_lanes_resize when it lacks 'lanes_resize').
-- param: name string the trigger
SELECT ACTION_STATEMENT FROM information_schema.TRIGGERS
	WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = :name

-- name: InsertChecked
-- Insert of one record (InsertLanes) checked against the lane count its lane was computed with:
-- the lane is the subquery's, the record's :lane when the recorded count is :lane_count, else
-- NULL, which a single-row INSERT refuses (error 1048) in every sql_mode, so nothing is
-- inserted. The count is a locking read, so it is the latest committed one whatever the
-- isolation and snapshot, and its shared lock lasts until the transaction ends: a ResizeLanes
-- (which locks the row FOR UPDATE first) waits for the transaction, and the checked inserts
-- that come after it wait for the resize. An INSERT ... VALUES, not INSERT ... SELECT, which
-- cost the producer 10-15% more (BENCHMARKS.md).
-- params: InsertRow
-- param: lane_count string the lane count the record's lane was computed with
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at) VALUES (:id, :aggregate_type, :aggregate_id, :aggregate_version, :type, :schema_id,
	:partition_key, :destination, :payload, :headers, :tenant, :causation_id, :correlation_id,
	(SELECT IF(value = :lane_count, :lane, NULL) FROM {{meta}} WHERE name = 'lanes' LOCK IN SHARE MODE), UTC_TIMESTAMP(6))

-- name: LaneCountShared
-- The lane count read as a checked insert reads it (InsertLanes of several records, before the
-- plain multi-row insert; Replay, before it selects rows): locked until the transaction ends.
SELECT value FROM {{meta}} WHERE name = 'lanes' LOCK IN SHARE MODE

-- name: LaneCountLocked
-- A resize's first step: the lane count's row FOR UPDATE waits for every transaction that
-- read it LOCK IN SHARE MODE (the writers that inserted, replays) and holds the next ones back.
SELECT value FROM {{meta}} WHERE name = 'lanes' FOR UPDATE

-- name: LaneCountSet
-- param: value string the lane count
UPDATE {{meta}} SET value = :value WHERE name = 'lanes'

-- name: PublisherReadShared
-- A resize's publisher check: a CDC relay's AcquireGeneration (FOR UPDATE) waits for it.
SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1 LOCK IN SHARE MODE

-- name: ResizeAllow
-- The row under which the immutability trigger (migration 008) allows a lane change; deleted
-- again by ResizeDisallow in the same transaction.
INSERT INTO {{meta}} (name, value) VALUES ('lanes_resize', 'on')

-- name: ResizeDisallow
DELETE FROM {{meta}} WHERE name = 'lanes_resize'

-- name: ResizeLeases
-- A resize ends every lease as ResetLanes does (owner and sign of life cleared, lease expired
-- now, generation incremented), every lane row locked in lane order, so that a relay's settle
-- or renewal of a batch fetched under the old lanes is refused.
-- param: now any the caller's time (timeArg), NULL: the database clock
UPDATE {{lanes}} SET owner = '', lock_session = NULL, lease_until = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), generation = generation + 1
	ORDER BY lane

-- name: ResizeDropLanes
-- The lanes at or above the new count (:lanes) go.
-- param: lanes int the new lane count
DELETE FROM {{lanes}} WHERE lane >= :lanes

-- name: ResizeRows
-- The pending rows after seq :after, :limit at a time, with their key and lane.
-- param: after int64 the exclusive seq bound
-- param: limit int
SELECT seq, partition_key, lane FROM {{pending}}
	WHERE seq > :after ORDER BY seq LIMIT :limit

-- name: ResizeMove
-- The pending records :seqs get their new lanes, :lanes in the same order (FIELD finds a seq's
-- place in :seqs, ELT the lane at that place). The outbox row's lane changes (under migration 008's exemption),
-- and the update trigger (migration 010) copies it to the pending row.
-- param: seqs []int64 the records
-- param: lanes []int their new lanes, in the order of seqs
UPDATE {{outbox}} SET lane = CAST(ELT(FIELD(seq, :seqs), :lanes) AS SIGNED)
	WHERE seq IN (:seqs) AND published_at IS NULL

-- name: SettleUnpend
-- A mark's second statement: the published records' pending rows go (no outbox row changes).
-- A delete on publish's first.
-- param: seqs []int64 the published records
-- param: lanes []int the leased lanes
DELETE FROM {{pending}} WHERE seq IN (:seqs) AND lane IN (:lanes)

-- name: PruneSettledIDs
-- Cleanup of records published since migration 010, a consistent read without locks: up to :limit
-- settle log rows below the watermark (seq < :below) published before the cut-off, in seq order.
-- param: below int64 the exclusive seq bound (the watermark)
-- param: before any the cut-off (timeArg)
-- param: limit int64
SELECT seq FROM {{settled}} WHERE seq < :below AND at < CAST(:before AS DATETIME(6)) ORDER BY seq LIMIT :limit

-- name: PruneSettled
-- Those records' outbox rows and settle log rows, the cut-off checked again on the locked log
-- rows: a replay deletes a record's log row in its transaction, so a record replayed since the
-- read is spared (it waits for the replay, then finds no log row). The delete trigger looks
-- for pending rows (none). The affected-row count is two per record.
-- param: seqs []int64 read by PruneSettledIDs
-- param: before any the cut-off (timeArg)
DELETE r, s FROM {{outbox}} AS r JOIN {{settled}} AS s ON s.seq = r.seq
	WHERE s.seq IN (:seqs) AND s.at < CAST(:before AS DATETIME(6))

-- name: PruneSettledOrphans
-- Settle log rows of those records whose outbox row is already gone (a relay of the earlier
-- version sent the record again and deleted it, or its cleanup did).
-- param: seqs []int64 read by PruneSettledIDs
DELETE s FROM {{settled}} AS s LEFT JOIN {{outbox}} AS r ON r.seq = s.seq
	WHERE s.seq IN (:seqs) AND r.seq IS NULL

-- name: ReplayPending
-- Its second: a pending row, as never attempted, for each of the others (the records published
-- since migration 010; IGNORE skips those the first statement gave one).
-- param: seqs []int64 the records
INSERT IGNORE INTO {{pending}} (seq, lane, partition_key, created_at)
	SELECT seq, lane, partition_key, created_at FROM {{outbox}} WHERE seq IN (:seqs)

-- name: ReplayUnsettle
-- Its third: their settle log rows go (the records are pending again; cleanup finds no
-- publication time for them).
-- param: seqs []int64 the records
DELETE FROM {{settled}} WHERE seq IN (:seqs)

-- name: UnpendedOn
-- Set around SettleDelete only: the delete trigger then leaves the pending rows, which the
-- settle deleted with one statement before.
SET @outboxkit_unpended = 1

-- name: UnpendedOff
SET @outboxkit_unpended = NULL
