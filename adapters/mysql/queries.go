package mysql

import (
	"strings"
)

// All SQL of the adapter. Table names are substituted once, quoted, at construction; the
// statements then only take ? parameters. Lists of lanes and seqs are expanded with
// placeholders(n) where a query has %s.

// nowExpr is the database clock unless the caller injected a time (the parameter is then a
// "YYYY-MM-DD hh:mm:ss.ffffff" UTC string; NULL otherwise).
const nowExpr = "COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6))"

const recordColumns = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers, tenant, causation_id, correlation_id, lane, created_at, published_at,
	attempts, next_attempt_at, last_error, parked_at`

type queries struct {
	laneCount, metaGet, metaPut, laneInsert string

	insertPrefix, insertRow string

	heartbeatUpsert, heartbeatDelete, heartbeatCount, heartbeatPurgeDead string

	claimSkipLocked, claimUpdate, lanesRead, lanesLock, renewUpdate, release string
	claimGetLockCandidates, setLockSession, lockedBy                         string

	fetchBlocked, fetchPrefix, fetchNotExists string

	settlePublish, settleDelete, settleFail string

	minUnpublished, pruneOutbox string

	listPrefix, stats, unpark string

	horizonLock, horizonEnsure, horizonLockX, horizonSet, pruneInbox string
	insertRecord, readRecord, versionEnsure, versionRead, versionSet string

	publisherInit, publisherRead, publisherLockX, publisherLockS, publisherBump string
	checkpointRead, checkpointPut                                               string
}

func newQueries(r *strings.Replacer) queries {
	return queries{
		metaGet:    r.Replace(`SELECT value FROM {meta} WHERE name = ?`),
		metaPut:    r.Replace(`INSERT INTO {meta} (name, value) VALUES (?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value)`),
		laneCount:  r.Replace(`SELECT value FROM {meta} WHERE name = 'lanes'`),
		laneInsert: r.Replace(`INSERT IGNORE INTO {lanes} (lane) VALUES `),

		insertPrefix: r.Replace(`INSERT INTO {outbox} (id, aggregate_type, aggregate_id, aggregate_version, type,
	schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at) VALUES `),
		insertRow: `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,UTC_TIMESTAMP(6))`,

		heartbeatUpsert: r.Replace(`INSERT INTO {workers} (owner, expires_at)
	VALUES (?, ` + nowExpr + ` + INTERVAL ? MICROSECOND)
	ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)`),
		heartbeatDelete: r.Replace(`DELETE FROM {workers} WHERE owner = ?`),
		// Workers whose GET_LOCK session is gone (a lane they lease is tied to a session that
		// no longer holds its lock) are dead: their rows must not count towards the fair share
		// until they expire, or the survivors leave the dead workers' lanes unclaimed. A live
		// owner whose session alone broke registers again at its next heartbeat.
		heartbeatPurgeDead: r.Replace(`DELETE w FROM {workers} AS w JOIN {lanes} AS l ON l.owner = w.owner
	WHERE w.owner <> ? AND l.lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(?, l.lane)) <=> l.lock_session)`),
		heartbeatCount: r.Replace(`SELECT COUNT(*) FROM {workers} WHERE expires_at > ` + nowExpr),

		// Free or expired leases, and leases whose holder's session no longer holds the
		// lane's GET_LOCK (ClaimGetLock, or an owner holding a sign of life: core.Liveness).
		claimSkipLocked: r.Replace(`SELECT lane FROM {lanes}
	WHERE owner = '' OR lease_until IS NULL OR lease_until <= ` + nowExpr + `
	   OR (lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(?, lane)) <=> lock_session))
	ORDER BY lane LIMIT ? FOR UPDATE SKIP LOCKED`),
		// Candidates of a GET_LOCK claim: free or expired leases, and leases whose holder's
		// session no longer holds the lane's lock (its connection died). The last column says
		// whether the lease itself is free or expired.
		claimGetLockCandidates: r.Replace(`SELECT lane, (owner = '' OR lease_until IS NULL OR lease_until <= ` + nowExpr + `) AS expired
	FROM {lanes}
	WHERE owner = '' OR lease_until IS NULL OR lease_until <= ` + nowExpr + `
	   OR (lock_session IS NOT NULL AND NOT (IS_USED_LOCK(CONCAT(?, lane)) <=> lock_session))
	ORDER BY lane FOR UPDATE SKIP LOCKED`),
		claimUpdate: r.Replace(`UPDATE {lanes} SET owner = ?, generation = generation + 1,
	lease_until = ` + nowExpr + ` + INTERVAL ? MICROSECOND, lock_session = ? WHERE lane IN (%s)`),
		lockedBy:       r.Replace(`SELECT COUNT(*) FROM {lanes} WHERE lane = ? AND owner = ? AND lock_session = ?`),
		setLockSession: r.Replace(`UPDATE {lanes} SET lock_session = ? WHERE lane = ? AND owner = ? AND generation = ?`),
		lanesRead:      r.Replace(`SELECT lane, generation, lease_until FROM {lanes} WHERE lane IN (%s) ORDER BY lane`),
		lanesLock: r.Replace(`SELECT lane, owner, generation, (lease_until IS NOT NULL AND lease_until > ` + nowExpr + `)
	FROM {lanes} WHERE lane IN (%s) ORDER BY lane FOR UPDATE`),
		renewUpdate: r.Replace(`UPDATE {lanes} SET lease_until = ` + nowExpr + ` + INTERVAL ? MICROSECOND WHERE lane IN (%s)`),
		release: r.Replace(`UPDATE {lanes} SET owner = '', lease_until = NULL, lock_session = NULL
	WHERE lane = ? AND owner = ? AND generation = ?`),

		// The keys held back in the leased lanes: the lowest seq of each key's unpublished
		// rows that are parked or not yet due (index ix_failed, tiny).
		fetchBlocked: r.Replace(`SELECT partition_key, MIN(seq) FROM {outbox}
	WHERE failed_lane IN (%s) AND (parked_at IS NOT NULL OR next_attempt_at > ` + nowExpr + `)
	GROUP BY partition_key`),
		// Unpublished rows in seq order (index ix_unpublished; the lane filter is checked in
		// the index). The caller appends lane and blocked-key conditions, ORDER BY and LIMIT.
		fetchPrefix: r.Replace(`SELECT ` + recordColumns + ` FROM {outbox} o FORCE INDEX (ix_unpublished)
	WHERE o.unpublished = 1 AND o.parked_at IS NULL
	  AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= ` + nowExpr + `)`),
		fetchNotExists: r.Replace(` AND NOT EXISTS (SELECT 1 FROM {outbox} b
	WHERE b.failed_lane = o.lane AND b.partition_key = o.partition_key AND b.seq <= o.seq
	  AND (b.parked_at IS NOT NULL OR b.next_attempt_at > ` + nowExpr + `))`),

		settlePublish: r.Replace(`UPDATE {outbox} SET published_at = ` + nowExpr + `
	WHERE seq IN (%s) AND lane IN (%s) AND published_at IS NULL`),
		settleDelete: r.Replace(`DELETE FROM {outbox} WHERE seq IN (%s) AND lane IN (%s) AND published_at IS NULL`),
		settleFail: r.Replace(`UPDATE {outbox} SET attempts = attempts + 1, last_error = ?,
	next_attempt_at = ` + nowExpr + ` + INTERVAL ? MICROSECOND,
	parked_at = IF(?, ` + nowExpr + `, parked_at)
	WHERE seq = ? AND lane IN (%s) AND published_at IS NULL`),

		minUnpublished: r.Replace(`SELECT MIN(seq) FROM {outbox} WHERE unpublished = 1`),
		pruneOutbox: r.Replace(`DELETE FROM {outbox}
	WHERE published_at IS NOT NULL AND published_at < CAST(? AS DATETIME(6)) AND seq < ?
	ORDER BY seq LIMIT ?`),

		listPrefix: r.Replace(`SELECT ` + recordColumns + ` FROM {outbox} WHERE seq > ?`),
		stats: r.Replace(`SELECT
	COALESCE(SUM(published_at IS NULL AND parked_at IS NULL), 0),
	COALESCE(SUM(published_at IS NULL AND parked_at IS NOT NULL), 0),
	COALESCE(SUM(published_at IS NOT NULL), 0),
	MIN(IF(published_at IS NULL AND parked_at IS NULL, created_at, NULL))
	FROM {outbox}`),
		unpark: r.Replace(`UPDATE {outbox} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
	WHERE failed_lane = ? AND partition_key = ?`),

		horizonLock:   r.Replace(`SELECT horizon FROM {horizons} WHERE consumer = ? LOCK IN SHARE MODE`),
		horizonEnsure: r.Replace(`INSERT IGNORE INTO {horizons} (consumer, horizon) VALUES (?, NULL)`),
		horizonLockX:  r.Replace(`SELECT horizon FROM {horizons} WHERE consumer = ? FOR UPDATE`),
		horizonSet:    r.Replace(`UPDATE {horizons} SET horizon = CAST(? AS DATETIME(6)) WHERE consumer = ?`),
		pruneInbox: r.Replace(`DELETE FROM {inbox}
	WHERE consumer = ? AND (occurred_at IS NULL OR occurred_at < CAST(? AS DATETIME(6))) LIMIT ?`),
		insertRecord: r.Replace(`INSERT IGNORE INTO {inbox}
	(consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
	VALUES (?, ?, ?, ?, ?, CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6))`),
		readRecord: r.Replace(`SELECT digest, source_position, outcome, occurred_at, processed_at FROM {inbox}
	WHERE consumer = ? AND event_id = ? LOCK IN SHARE MODE`),
		versionEnsure: r.Replace(`INSERT INTO {versions} (consumer, entity, version) VALUES (?, ?, NULL)
	ON DUPLICATE KEY UPDATE version = version`),
		versionRead: r.Replace(`SELECT version FROM {versions} WHERE consumer = ? AND entity = ? FOR UPDATE`),
		versionSet: r.Replace(`INSERT INTO {versions} (consumer, entity, version) VALUES (?, ?, ?)
	ON DUPLICATE KEY UPDATE version = VALUES(version)`),

		publisherInit:  r.Replace(`INSERT IGNORE INTO {publisher} (id) VALUES (1)`),
		publisherRead:  r.Replace(`SELECT generation, kind, holder, since FROM {publisher} WHERE id = 1`),
		publisherLockX: r.Replace(`SELECT generation, kind, holder, since FROM {publisher} WHERE id = 1 FOR UPDATE`),
		// The fence of ClaimLanes, RenewLanes and SaveCheckpoint: a shared lock that
		// AcquireGeneration's exclusive one waits for (and the other way round).
		publisherLockS: r.Replace(`SELECT generation FROM {publisher} WHERE id = 1 LOCK IN SHARE MODE`),
		publisherBump: r.Replace(`UPDATE {publisher} SET generation = generation + 1, kind = ?, holder = ?,
	since = ` + nowExpr + ` WHERE id = 1`),
		checkpointRead: r.Replace(`SELECT source, position, generation, updated_at FROM {checkpoint} WHERE id = 1`),
		checkpointPut: r.Replace(`INSERT INTO {checkpoint} (id, source, position, generation, updated_at)
	VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6))
	ON DUPLICATE KEY UPDATE source = VALUES(source), position = VALUES(position),
	generation = VALUES(generation), updated_at = VALUES(updated_at)`),
	}
}

// placeholders returns "?,?,...,?" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?,", n-1) + "?"
}
