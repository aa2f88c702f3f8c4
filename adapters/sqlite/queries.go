package sqlite

import (
	"strings"

	"github.com/outboxkit/outbox/core"
)

// All of the adapter's SQL. Identifiers are written as {{name}} tokens and replaced once, at
// construction, by the validated and quoted names of the configured tables (see names).
// Lists (lanes, seqs, failures) are bound as one JSON array parameter and read with
// json_each, so every statement has a fixed text whatever the list length.

const recordColumns = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
	partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at, published_at, attempts, next_attempt_at, last_error, parked_at`

// insertColumns are bound per row by Insert, in this order.
const insertColumns = `id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
	partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane,
	created_at`

// insertArity is the number of bound parameters per inserted row.
const insertArity = 15

// insertRowPlaceholder is the VALUES tuple of one inserted row.
const insertRowPlaceholder = `(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`

type queries struct {
	// schema
	bootstrap      string
	appliedVersion [2]string // by migration set
	recordVersion  [2]string
	getLanes       string
	setLanes       string
	seedLanes      string
	aggVersionIdx  string
	writeLock      string

	// publisher generation
	publisherGet  string
	publisherBump string

	// outbox
	insertPrefix     string
	spSave           string
	mainFile         string
	spRelease        string
	spRollback       string
	heartbeatUpsert  string
	heartbeatDelete  string
	heartbeatExpired string
	heartbeatCount   string
	claim            string
	renew            string
	releaseLane      string
	fetch            string
	leaseState       string
	publish          string
	deletePublished  string
	fail             string

	// cleanup and admin
	minPending string
	prune      string
	list       [4]string // by core.RecordState
	stats      string
	unpark     string

	// inbox
	horizon      string
	insertInbox  string
	selectInbox  string
	lockVersion  string
	setVersion   string
	raiseHorizon string
	pruneInbox   string

	// cached are the queries kept prepared (stmtCache): those run in the adapter's own
	// transactions or outside any. Insert runs in the caller's transaction, possibly of
	// another *sql.DB, so it is never prepared through the Store's pool.
	cached []string
}

// replacer maps the {{name}} tokens of queries and migrations to quoted identifiers.
func replacer(n names) *strings.Replacer {
	return strings.NewReplacer(
		"{{outbox}}", n.outbox,
		"{{lanes}}", n.lanes,
		"{{workers}}", n.workers,
		"{{meta}}", n.meta,
		"{{migrations}}", n.migrations,
		"{{publisher}}", n.publisher,
		"{{outbox_id}}", n.outboxID,
		"{{outbox_pending}}", n.outboxPending,
		"{{outbox_blocked}}", n.outboxBlocked,
		"{{outbox_published}}", n.outboxPublish,
		"{{outbox_aggregate_version}}", n.outboxAggVersion,
		"{{inbox}}", n.inbox,
		"{{inbox_horizons}}", n.inboxHorizons,
		"{{inbox_versions}}", n.inboxVersions,
		"{{inbox_occurred}}", n.inboxOccurred,
		"{{inbox_migrations}}", n.inboxMigrations,
	)
}

func buildQueries(n names) queries {
	r := replacer(n)
	q := queries{
		bootstrap: `
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
);`,
		appliedVersion: [2]string{
			`SELECT coalesce(max(version), 0) FROM {{migrations}}`,
			`SELECT coalesce(max(version), 0) FROM {{inbox_migrations}}`,
		},
		recordVersion: [2]string{
			`INSERT INTO {{migrations}} (version, name, applied_at) VALUES (?, ?, ?)`,
			`INSERT INTO {{inbox_migrations}} (version, name, applied_at) VALUES (?, ?, ?)`,
		},
		getLanes: `SELECT value FROM {{meta}} WHERE name = 'lanes'`,
		setLanes: `INSERT INTO {{meta}} (name, value) VALUES ('lanes', ?)`,
		seedLanes: `
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
INSERT INTO {{lanes}} (lane, owner, generation, lease_until) SELECT i, '', 0, 0 FROM n`,
		aggVersionIdx: `CREATE UNIQUE INDEX IF NOT EXISTS {{outbox_aggregate_version}}
    ON {{outbox}} (aggregate_type, aggregate_id, aggregate_version, type) WHERE aggregate_version > 0`,
		// A write statement that changes nothing: as the first statement of a transaction it
		// takes SQLite's write lock at once, as BEGIN IMMEDIATE does, whatever _txlock says.
		writeLock: `UPDATE {{meta}} SET value = value WHERE 0`,

		publisherGet: `SELECT generation, kind, holder, since FROM {{publisher}} WHERE id = 1`,
		// ?1 kind, ?2 holder, ?3 since
		publisherBump: `UPDATE {{publisher}} SET generation = generation + 1, kind = ?1, holder = ?2, since = ?3
WHERE id = 1
RETURNING generation, kind, holder, since`,

		insertPrefix: `INSERT INTO {{outbox}} (` + insertColumns + `) VALUES `,
		spSave:       `SAVEPOINT outboxkit_insert`,
		mainFile:     `SELECT file FROM pragma_database_list WHERE name = 'main'`,
		spRelease:    `RELEASE outboxkit_insert`,
		spRollback:   `ROLLBACK TO outboxkit_insert`,

		heartbeatUpsert: `INSERT INTO {{workers}} (owner, expires_at) VALUES (?1, ?2)
    ON CONFLICT (owner) DO UPDATE SET expires_at = excluded.expires_at`,
		heartbeatDelete:  `DELETE FROM {{workers}} WHERE owner = ?`,
		heartbeatExpired: `DELETE FROM {{workers}} WHERE expires_at <= ?`,
		heartbeatCount:   `SELECT count(*) FROM {{workers}} WHERE expires_at > ?`,

		// ?1 owner, ?2 lease_until, ?3 now, ?4 max
		claim: `UPDATE {{lanes}} SET owner = ?1, generation = generation + 1, lease_until = ?2
WHERE lane IN (SELECT lane FROM {{lanes}} WHERE owner = '' OR lease_until <= ?3 ORDER BY lane LIMIT ?4)
RETURNING lane, generation`,
		// ?1 lease_until, ?2 lane, ?3 owner, ?4 generation, ?5 now
		renew: `UPDATE {{lanes}} SET lease_until = ?1
WHERE lane = ?2 AND owner = ?3 AND generation = ?4 AND lease_until > ?5 AND owner <> ''`,
		// ?1 lane, ?2 owner, ?3 generation
		releaseLane: `UPDATE {{lanes}} SET owner = '', lease_until = 0
WHERE lane = ?1 AND owner = ?2 AND generation = ?3 AND owner <> ''`,

		// ?1 lanes (JSON array), ?2 now, ?3 limit. The outer scan walks the pending index in seq
		// order and stops after ?3 deliverable rows; the lane test reads the index only. The
		// NOT EXISTS probe reads the small blocked index (empty when nothing failed).
		fetch: `SELECT ` + recordColumns + `
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
LIMIT ?3`,
		// ?1 lanes (JSON array)
		leaseState: `SELECT lane, owner, generation, lease_until FROM {{lanes}}
WHERE lane IN (SELECT value FROM json_each(?1))`,
		// ?1 now, ?2 seqs (JSON array), ?3 lanes (JSON array)
		publish: `UPDATE {{outbox}} SET published_at = ?1
WHERE seq IN (SELECT value FROM json_each(?2))
  AND published_at IS NULL
  AND lane IN (SELECT value FROM json_each(?3))`,
		// ?1 seqs (JSON array), ?2 lanes (JSON array)
		deletePublished: `DELETE FROM {{outbox}}
WHERE seq IN (SELECT value FROM json_each(?1))
  AND published_at IS NULL
  AND lane IN (SELECT value FROM json_each(?2))`,
		// ?1 now, ?2 failures (JSON array of {"s":seq,"d":delay_us,"p":0|1,"e":error}),
		// ?3 lanes (JSON array)
		fail: `UPDATE {{outbox}} SET
    attempts = attempts + 1,
    last_error = f.value ->> '$.e',
    next_attempt_at = ?1 + (f.value ->> '$.d'),
    parked_at = CASE WHEN f.value ->> '$.p' THEN ?1 ELSE parked_at END
FROM json_each(?2) AS f
WHERE {{outbox}}.seq = f.value ->> '$.s'
  AND {{outbox}}.published_at IS NULL
  AND {{outbox}}.lane IN (SELECT value FROM json_each(?3))`,

		minPending: `SELECT min(seq) FROM {{outbox}} INDEXED BY {{outbox_pending}} WHERE published_at IS NULL`,
		// ?1 published before, ?2 seq below (exclusive), ?3 limit
		prune: `DELETE FROM {{outbox}} WHERE seq IN (
    SELECT seq FROM {{outbox}} INDEXED BY {{outbox_published}}
    WHERE published_at IS NOT NULL AND published_at < ?1 AND seq < ?2
    LIMIT ?3)`,
		stats: `SELECT
    coalesce(sum(published_at IS NULL AND parked_at IS NULL), 0),
    coalesce(sum(published_at IS NULL AND parked_at IS NOT NULL), 0),
    coalesce(sum(published_at IS NOT NULL), 0),
    min(CASE WHEN published_at IS NULL AND parked_at IS NULL THEN created_at END)
FROM {{outbox}}`,
		unpark: `UPDATE {{outbox}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
WHERE partition_key = ?
  AND published_at IS NULL
  AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`,

		horizon: `SELECT horizon FROM {{inbox_horizons}} WHERE consumer = ?`,
		insertInbox: `INSERT INTO {{inbox}}
    (consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer, event_id) DO NOTHING`,
		selectInbox: `SELECT digest, source_position, outcome, occurred_at, processed_at
FROM {{inbox}} WHERE consumer = ? AND event_id = ?`,
		lockVersion: `SELECT version FROM {{inbox_versions}} WHERE consumer = ? AND entity = ?`,
		setVersion: `INSERT INTO {{inbox_versions}} (consumer, entity, version) VALUES (?1, ?2, ?3)
ON CONFLICT (consumer, entity) DO UPDATE SET version = excluded.version`,
		// ?1 consumer, ?2 before; returns the horizon in force
		raiseHorizon: `INSERT INTO {{inbox_horizons}} (consumer, horizon) VALUES (?1, ?2)
ON CONFLICT (consumer) DO UPDATE SET horizon = max(horizon, excluded.horizon)
RETURNING horizon`,
		// ?1 consumer, ?2 horizon, ?3 limit
		pruneInbox: `DELETE FROM {{inbox}} WHERE rowid IN (
    SELECT rowid FROM {{inbox}}
    WHERE consumer = ?1 AND (occurred_at IS NULL OR occurred_at < ?2)
    LIMIT ?3)`,
	}
	const listPrefix = `SELECT ` + recordColumns + ` FROM {{outbox}} WHERE seq > ?1 `
	const listSuffix = ` ORDER BY seq LIMIT ?2`
	q.list[core.StateAll] = listPrefix + listSuffix
	q.list[core.StatePending] = listPrefix + `AND published_at IS NULL AND parked_at IS NULL` + listSuffix
	q.list[core.StateParked] = listPrefix + `AND published_at IS NULL AND parked_at IS NOT NULL` + listSuffix
	q.list[core.StatePublished] = listPrefix + `AND published_at IS NOT NULL` + listSuffix

	for _, p := range []*string{
		&q.bootstrap, &q.appliedVersion[0], &q.appliedVersion[1], &q.recordVersion[0],
		&q.recordVersion[1], &q.getLanes, &q.setLanes, &q.seedLanes,
		&q.aggVersionIdx, &q.writeLock, &q.publisherGet, &q.publisherBump, &q.insertPrefix, &q.heartbeatUpsert, &q.heartbeatDelete,
		&q.heartbeatExpired, &q.heartbeatCount, &q.claim, &q.renew, &q.releaseLane, &q.fetch,
		&q.leaseState, &q.publish, &q.deletePublished, &q.fail, &q.minPending, &q.prune,
		&q.list[0], &q.list[1], &q.list[2], &q.list[3], &q.stats, &q.unpark, &q.horizon,
		&q.insertInbox, &q.selectInbox, &q.lockVersion, &q.setVersion, &q.raiseHorizon,
		&q.pruneInbox,
	} {
		*p = r.Replace(*p)
	}
	q.cached = []string{
		q.mainFile, q.getLanes, q.writeLock, q.publisherGet, q.publisherBump, q.heartbeatUpsert, q.heartbeatDelete,
		q.heartbeatExpired, q.heartbeatCount, q.claim, q.renew, q.releaseLane, q.fetch,
		q.leaseState, q.publish, q.deletePublished, q.fail, q.minPending, q.prune, q.horizon,
		q.insertInbox, q.selectInbox, q.lockVersion, q.setVersion, q.raiseHorizon, q.pruneInbox,
	}
	return q
}
