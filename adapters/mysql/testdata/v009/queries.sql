-- The statements of the MySQL/MariaDB adapter's version before the pending layout (migration
-- 010) that Store.UseEarlierQueries (export_test.go) puts in place of this version's, so that
-- the tests run a relay and writers of that version (the whole file of that version is in the
-- history of queries.sql). Written with this version's named parameters: each statement marks
-- the parameters of this version's statement of the same name in the same order (with the
-- same types), which UseEarlierQueries checks, so that this version's params structs serve
-- them. The statements at the end stand in for this version's statements that the earlier
-- version did not run: they take the same arguments and change nothing.
--
-- dialect: mysql

-- name: InsertPrefix
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at) VALUES

-- name: InsertRow
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

-- name: InsertChecked
-- Insert of one record (InsertLanes) checked against the lane count its lane was computed with:
-- the lane is the subquery's, the record's :lane when the recorded count is :lane_count, else
-- NULL, which a single-row INSERT refuses (error 1048) in every sql_mode, so nothing is
-- inserted. The count is a locking read, so it is the latest committed one whatever
-- the isolation and snapshot, and its shared lock lasts until the transaction ends: a
-- ResizeLanes (which locks the row FOR UPDATE first) waits for the transaction, and the checked
-- inserts that come after it wait for the resize. An INSERT ... VALUES, not INSERT ... SELECT,
-- which cost the producer 10-15% more (BENCHMARKS.md).
-- params: InsertRow
-- param: lane_count string
INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at) VALUES (:id, :aggregate_type, :aggregate_id, :aggregate_version, :type, :schema_id,
	:partition_key, :destination, :payload, :headers, :tenant, :causation_id, :correlation_id,
	(SELECT IF(value = :lane_count, :lane, NULL) FROM {{meta}} WHERE name = 'lanes' LOCK IN SHARE MODE), UTC_TIMESTAMP(6))

-- name: LaneCountShared
-- The lane count read as a checked insert reads it (InsertLanes of several records, before the
-- plain multi-row insert; Replay, before it selects rows): locked until the transaction ends.
SELECT value FROM {{meta}} WHERE name = 'lanes' LOCK IN SHARE MODE

-- name: FetchBlocked
-- The keys held back in the leased lanes: the lowest seq of each key's unpublished
-- rows that are parked or not yet due (index ix_failed, tiny).
-- param: lanes []int the leased lanes
-- param: now any the caller's time (timeArg), NULL: the database clock
SELECT partition_key, MIN(seq) FROM {{outbox}}
	WHERE failed_lane IN (:lanes) AND (parked_at IS NOT NULL OR next_attempt_at > COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)))
	GROUP BY partition_key

-- name: FetchPrefix
-- Unpublished rows in seq order (index ix_unpublished; the lane filter is checked in
-- the index). The caller appends this version's FetchLanes, FetchKey or FetchNotExists, and
-- FetchEnd.
-- param: now any the caller's time (timeArg), NULL: the database clock
SELECT {{cols}} FROM {{outbox}} o FORCE INDEX (ix_unpublished)
	WHERE o.unpublished = 1 AND o.parked_at IS NULL
	  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)))

-- name: FetchNotExists
-- param: now any the caller's time (timeArg), NULL: the database clock
AND NOT EXISTS (SELECT 1 FROM {{outbox}} b
	WHERE b.failed_lane = o.lane AND b.partition_key = o.partition_key AND b.seq <= o.seq
	  AND (b.parked_at IS NOT NULL OR b.next_attempt_at > COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))))

-- name: SettlePublish
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: seqs []int64
-- param: lanes []int
UPDATE {{outbox}} SET published_at = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6))
	WHERE seq IN (:seqs) AND lane IN (:lanes) AND published_at IS NULL

-- name: SettleDelete
-- param: seqs []int64
-- param: lanes []int
DELETE FROM {{outbox}} WHERE seq IN (:seqs) AND lane IN (:lanes) AND published_at IS NULL

-- name: SettleFail
-- param: error string
-- param: now any the caller's time (timeArg), NULL: the database clock
-- param: delay int64
-- param: park bool
-- param: seq int64
-- param: lanes []int
UPDATE {{outbox}} SET attempts = attempts + 1, last_error = :error,
	next_attempt_at = COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)) + INTERVAL :delay MICROSECOND,
	parked_at = IF(:park, COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), parked_at)
	WHERE seq = :seq AND lane IN (:lanes) AND published_at IS NULL

-- name: MinUnpublished
SELECT MIN(seq) FROM {{outbox}} WHERE unpublished = 1

-- name: PruneOutbox
-- param: before any
-- param: below int64
-- param: limit int64
DELETE FROM {{outbox}}
	WHERE published_at IS NOT NULL AND published_at < CAST(:before AS DATETIME(6)) AND seq < :below
	ORDER BY seq LIMIT :limit

-- name: SettleUnpend
-- A mark's second statement in this version; the earlier mark is SettlePublish alone.
-- param: seqs []int64
-- param: lanes []int
DO 0 IN (:seqs) AND 0 IN (:lanes)

-- name: UnpendedOn
-- The earlier delete settle is its SettleDelete alone.
DO 0

-- name: PruneSettledIDs
-- The earlier cleanup has no settle log: nothing to read.
-- param: below int64
-- param: before any
-- param: limit int64
SELECT 0 FROM DUAL WHERE FALSE AND :below AND :before LIMIT :limit
