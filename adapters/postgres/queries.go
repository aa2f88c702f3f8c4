package postgres

import "strings"

// Every SQL statement of the adapter, built once per Store with its quoted identifiers. The pgx
// and database/sql paths run the same strings.
//
// Time: $now is coalesce($n::timestamptz, now()): the caller's injected time, else the
// database clock (River's pattern). Durations travel as microseconds (bigint).

const recordCols = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
	partition_key, destination, payload, headers::text, tenant, causation_id, correlation_id, lane,
	created_at, published_at, attempts, next_attempt_at, last_error, parked_at`

type queries struct {
	migrateLock, indexExists    string
	metaTable, metaGet, metaPut string
	lanesFill, laneCount        string

	insert string

	heartbeat, heartbeatLeave                  string
	claimSkipLocked                            string
	claimAdvisory                              string
	renew, release                             string
	publisherGet, publisherLock, publisherBump string
	checkpointGet, checkpointPut               string
	fetch                                      string
	settleMark, settleDelete                   string
	settleAsync                                [2]string // settleMark, settleDelete with synchronous_commit off

	horizonGet, horizonEnsure          string
	inboxInsert, inboxGet              string
	versionGet, versionEnsure, version string
	pruneInbox                         string

	pruneOutbox string
	list        [4]string // by core.RecordState
	stats       string
	unpark      string

	notify, listen string

	partitions, partCheck, partIDs string // partitioned outbox; partCheck has a %s

	migrations []migration
	aggverIdx  string
}

type migration struct {
	name string // recorded in the meta table once applied
	sql  string
}

func buildQueries(n names, partitioned bool) *queries {
	r := strings.NewReplacer(
		"{{schema}}", n.schema,
		"{{outbox}}", n.outbox,
		"{{lanes}}", n.lanes,
		"{{workers}}", n.workers,
		"{{meta}}", n.meta,
		"{{publisher}}", n.publisher,
		"{{checkpoint}}", n.checkpoint,
		"{{fn}}", n.fn,
		"{{fetch_fn}}", n.fetchFn,
		"{{trigger}}", n.trigger,
		"{{trigger_name}}", strings.Trim(n.trigger, `"`),
		"{{pending_idx}}", n.pendingIdx,
		"{{failed_idx}}", n.failedIdx,
		"{{aggver_idx}}", n.aggverIdx,
		"{{ids}}", n.ids,
		"{{ids_idx}}", n.idsIdx,
		"{{pub_idx}}", n.pubIdx,
		"{{inbox}}", n.inbox,
		"{{horizons}}", n.horizons,
		"{{versions}}", n.versions,
		"{{inbox_idx}}", n.inboxIdx,
		"{{channel}}", n.channel,
		"{{cols}}", recordCols,
	)
	q := &queries{}
	s := func(sql string) string { return r.Replace(sql) }

	q.migrateLock = `SELECT pg_advisory_xact_lock($1)`
	q.indexExists = `SELECT to_regclass($1) IS NOT NULL`
	q.metaTable = s(`CREATE TABLE IF NOT EXISTS {{meta}} (name text PRIMARY KEY, value text NOT NULL)`)
	q.metaGet = s(`SELECT value FROM {{meta}} WHERE name = $1`)
	q.metaPut = s(`INSERT INTO {{meta}} (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`)
	q.lanesFill = s(`INSERT INTO {{lanes}} (lane) SELECT g FROM generate_series(0, $1::int - 1) AS g
		ON CONFLICT (lane) DO NOTHING`)
	q.laneCount = s(`SELECT count(*) FROM {{lanes}}`)
	q.aggverIdx = s(`CREATE UNIQUE INDEX IF NOT EXISTS {{aggver_idx}}
		ON {{outbox}} (aggregate_type, aggregate_id, aggregate_version, type) WHERE aggregate_version > 0`)
	q.migrations = []migration{
		{name: "migration:0001_outbox", sql: s(migration0001)},
		{name: "migration:0002_inbox:" + n.rawInbox, sql: s(migration0002)},
		{name: "migration:0003_publisher", sql: s(migration0003)},
		{name: "migration:0004_liveness", sql: s(migration0004)},
	}
	if partitioned {
		q.migrations = append([]migration{{name: "migration:0000_outbox_partitioned", sql: s(migration0000)}}, q.migrations...)
	}

	// One statement for any number of records: arrays unnested in order, so seq follows the
	// order of the call.
	q.insert = s(`INSERT INTO {{outbox}} (id, aggregate_type, aggregate_id, aggregate_version, type,
		schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane)
	SELECT id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
		destination, payload, headers::jsonb, tenant, causation_id, correlation_id, lane
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[], $7::text[],
		$8::text[], $9::bytea[], $10::text[], $11::text[], $12::text[], $13::text[], $14::int[])
		WITH ORDINALITY AS r(id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
			partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, ord)
	ORDER BY ord`)
	if partitioned {
		// The IDs first, in the same statement: a duplicate violates the side table's key.
		q.insert = s(`WITH ids AS (INSERT INTO {{ids}} (id) SELECT unnest($1::text[]))
	`) + q.insert
	}

	// $1 owner, $2 now, $3 ttl (µs). Expired registrations older than an hour are removed on the
	// way, skipping rows another heartbeat holds.
	q.heartbeat = s(`WITH up AS (
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
	WHERE owner <> $1 AND expires_at > coalesce($2::timestamptz, now())`)
	q.heartbeatLeave = s(`WITH del AS (DELETE FROM {{workers}} WHERE owner = $1)
	SELECT count(*) FROM {{workers}} WHERE owner <> $1 AND expires_at > coalesce($2::timestamptz, now())`)

	// Publisher fencing of claims and renewals: the statement first locks the publisher row
	// FOR SHARE (so AcquireGeneration, which updates it, waits for the statement's transaction,
	// and a statement that waited reads the new generation), changes lanes only when $5 is the
	// current generation, and otherwise returns one row whose last column is true (fenced).
	fenced := func(update string) string {
		return `WITH pub AS MATERIALIZED (
		SELECT generation FROM {{publisher}} FOR SHARE
	), up AS (
	` + update + `
	)
	SELECT lane, owner, generation, lease_until, false FROM up
	UNION ALL
	SELECT 0, '', 0, '1970-01-01 00:00:00+00'::timestamptz, true FROM pub WHERE generation <> $5::bigint`
	}

	// A lane is claimable when it is free, its lease expired, or the sign of life its lease was
	// taken with is gone (Liveness: no session holds the advisory lock ($6 class, live_pid)
	// any more). $6 is the liveness class of this outbox.
	claimable := `(owner = '' OR lease_until <= coalesce($2::timestamptz, now())
		OR (live_pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_locks AS k
			WHERE k.locktype = 'advisory' AND k.granted AND k.pid = live_pid
			  AND k.classid = $6::int::oid AND k.objid = live_pid::oid AND k.objsubid = 2)))`
	// $1 owner, $2 now, $3 ttl (µs), $4 max, $5 publisher generation, $6 liveness class, $7
	// the claimer's live_pid (NULL without a sign of life). ARRAY(...) keeps the LIMIT however
	// stale the statistics are (IN (SELECT ... LIMIT n) may lock every candidate); the outer
	// WHERE repeats the predicate for the row as updated.
	q.claimSkipLocked = s(fenced(`UPDATE {{lanes}}
	SET owner = $1, generation = generation + 1, live_pid = $7::int,
		lease_until = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT lane FROM {{lanes}}
		WHERE ` + claimable + `
		  AND (SELECT generation FROM pub) = $5::bigint
		ORDER BY lane LIMIT $4
		FOR UPDATE SKIP LOCKED))
	  AND ` + claimable + `
	  AND (SELECT generation FROM pub) = $5::bigint
	RETURNING lane, owner, generation, lease_until`))
	// $8 is the advisory lock class of this outbox's claims. The candidates are read in lane
	// order and the lock function is evaluated lazily until $4 lanes are locked (OFFSET 0
	// keeps the volatile filter out of the sorted subquery). Locks end with the statement's
	// transaction.
	q.claimAdvisory = s(fenced(`UPDATE {{lanes}}
	SET owner = $1, generation = generation + 1, live_pid = $7::int,
		lease_until = coalesce($2::timestamptz, now()) + $3::bigint * interval '1 microsecond'
	WHERE lane = ANY(ARRAY(
		SELECT c.lane FROM (
			SELECT lane FROM {{lanes}}
			WHERE ` + claimable + `
			  AND (SELECT generation FROM pub) = $5::bigint
			ORDER BY lane OFFSET 0) AS c
		WHERE pg_try_advisory_xact_lock($8::int, c.lane)
		LIMIT $4))
	  AND ` + claimable + `
	  AND (SELECT generation FROM pub) = $5::bigint
	RETURNING lane, owner, generation, lease_until`))

	// $1 lanes, $2 owners, $3 generations, $4 now, $6 ttl (µs), $5 publisher generation. The
	// lane rows are locked in lane order first (the ARRAY init plan), as Settle does, so the two
	// cannot deadlock; a fenced renewal locks none.
	q.renew = s(fenced(`UPDATE {{lanes}} AS l
	SET lease_until = coalesce($4::timestamptz, now()) + $6::bigint * interval '1 microsecond'
	FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
	  AND l.lease_until > coalesce($4::timestamptz, now())
	  AND (SELECT generation FROM pub) = $5::bigint
	  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY($1::int[])
		AND (SELECT generation FROM pub) = $5::bigint ORDER BY lane FOR UPDATE))
	RETURNING l.lane, l.owner, l.generation, l.lease_until`))
	// AcquireGeneration runs publisherLock and, unless it joins, publisherBump in one transaction.
	// $1 kind, $2 holder, $3 now.
	q.publisherGet = s(`SELECT generation, kind, holder, since FROM {{publisher}}`)
	q.publisherLock = s(`SELECT generation, kind, holder, since FROM {{publisher}} FOR UPDATE`)
	q.publisherBump = s(`UPDATE {{publisher}}
	SET generation = generation + 1, kind = $1, holder = $2, since = coalesce($3::timestamptz, now())
	RETURNING generation, kind, holder, since`)

	q.checkpointGet = s(`SELECT source, position, generation, updated_at FROM {{checkpoint}}`)
	// $1 source, $2 position, $3 generation. One statement: lock the publisher row FOR SHARE
	// (AcquireGeneration waits, and a waiting save reads the new generation), upsert only when
	// $3 is the current generation, and return the current generation.
	q.checkpointPut = s(`WITH pub AS MATERIALIZED (
		SELECT generation FROM {{publisher}} FOR SHARE
	), up AS (
		INSERT INTO {{checkpoint}} AS c (singleton, source, position, generation)
		SELECT true, $1, $2, $3::bigint FROM pub WHERE generation = $3::bigint
		ON CONFLICT (singleton) DO UPDATE SET source = EXCLUDED.source, position = EXCLUDED.position,
			generation = EXCLUDED.generation, updated_at = now()
		RETURNING 1
	)
	SELECT generation, (SELECT count(*) FROM up) FROM pub`)

	q.release = s(`UPDATE {{lanes}} AS l SET owner = '', live_pid = NULL
	FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	WHERE l.lane = w.lane AND l.owner = w.owner AND l.generation = w.generation
	  AND l.lane = ANY(ARRAY(SELECT lane FROM {{lanes}} WHERE lane = ANY($1::int[]) ORDER BY lane FOR UPDATE))`)

	// $1 lanes, $2 now, $3 limit. The fetch function (migration 0001) walks the pending index in
	// seq order; a record is skipped when an earlier unpublished record of its key is parked or
	// not yet due (the failed index).
	q.fetch = s(`SELECT {{cols}} FROM {{fetch_fn}}($1::int[], $2::timestamptz, $3::int) ORDER BY seq`)

	// Settle is one statement, so one round trip and its own transaction: lock the leased lane
	// rows (in lane order), list the leases that are not held, and change outbox rows only when
	// that list is empty. $1 lanes, $2 owners, $3 generations, $4 now, $5 published seqs,
	// $6..$9 failures (seq, error, delay µs, park). It returns the lost lanes.
	settle := `WITH want AS (
		SELECT w.* FROM unnest($1::int[], $2::text[], $3::bigint[]) AS w(lane, owner, generation)
	), locked AS (
		SELECT lane, owner, generation, lease_until FROM {{lanes}}
		WHERE lane = ANY($1::int[]) ORDER BY lane FOR UPDATE
	), lost AS (
		SELECT w.lane FROM want AS w LEFT JOIN locked AS k ON k.lane = w.lane
		WHERE k.lane IS NULL OR k.owner <> w.owner OR k.generation <> w.generation
		   OR k.lease_until <= coalesce($4::timestamptz, now())
	), pub AS (
		PUBLISH
	), fail AS (
		UPDATE {{outbox}} AS o
		SET attempts = o.attempts + 1, last_error = f.err,
			next_attempt_at = coalesce($4::timestamptz, now()) + f.delay * interval '1 microsecond',
			parked_at = CASE WHEN f.park THEN coalesce($4::timestamptz, now()) ELSE o.parked_at END
		FROM unnest($6::bigint[], $7::text[], $8::bigint[], $9::bool[]) AS f(seq, err, delay, park)
		WHERE o.seq = f.seq AND o.published_at IS NULL AND o.lane = ANY($1::int[])
		  AND NOT EXISTS (SELECT 1 FROM lost)
		RETURNING 1
	)
	SELECT lane FROM lost ORDER BY lane`
	q.settleMark = s(strings.Replace(settle, "PUBLISH", `UPDATE {{outbox}} SET published_at = coalesce($4::timestamptz, now())
		WHERE seq = ANY($5::bigint[]) AND published_at IS NULL AND lane = ANY($1::int[])
		  AND NOT EXISTS (SELECT 1 FROM lost)
		RETURNING 1`, 1))
	q.settleDelete = s(strings.Replace(settle, "PUBLISH", `DELETE FROM {{outbox}}
		WHERE seq = ANY($5::bigint[]) AND published_at IS NULL AND lane = ANY($1::int[])
		  AND NOT EXISTS (SELECT 1 FROM lost)
		RETURNING 1`, 1))
	// Options.AsyncSettle: the statement is its own transaction, so a transaction-local
	// set_config, evaluated with the leases (always at least one row), still holds when it
	// commits: the commit does not wait for its WAL flush.
	async := func(sql string) string {
		return strings.Replace(sql, `AS w(lane, owner, generation)
	), locked`, `AS w(lane, owner, generation)
		CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS async
	), locked`, 1)
	}
	q.settleAsync = [2]string{async(q.settleMark), async(q.settleDelete)}
	if q.settleAsync[0] == q.settleMark || q.settleAsync[1] == q.settleDelete {
		panic("postgres: settle statement without its lease list")
	}

	q.horizonGet = s(`SELECT horizon FROM {{horizons}} WHERE consumer = $1 FOR SHARE`)
	q.horizonEnsure = s(`INSERT INTO {{horizons}} (consumer) VALUES ($1) ON CONFLICT (consumer) DO NOTHING`)
	q.inboxInsert = s(`INSERT INTO {{inbox}} (consumer, event_id, digest, source_position, outcome, occurred_at)
	VALUES ($1, $2, $3, $4, $5, $6)
	ON CONFLICT (consumer, event_id) DO NOTHING
	RETURNING processed_at`)
	q.inboxGet = s(`SELECT digest, source_position, outcome, occurred_at, processed_at FROM {{inbox}}
	WHERE consumer = $1 AND event_id = $2`)
	q.versionGet = s(`SELECT version FROM {{versions}} WHERE consumer = $1 AND entity = $2 FOR UPDATE`)
	q.versionEnsure = s(`INSERT INTO {{versions}} (consumer, entity) VALUES ($1, $2)
	ON CONFLICT (consumer, entity) DO NOTHING`)
	q.version = s(`INSERT INTO {{versions}} (consumer, entity, version) VALUES ($1, $2, $3)
	ON CONFLICT (consumer, entity) DO UPDATE SET version = EXCLUDED.version`)
	// One statement: raise the horizon (never lower it; the upsert locks the row against
	// Horizon's FOR SHARE) and delete up to $3 records older than it.
	q.pruneInbox = s(`WITH h AS (
		INSERT INTO {{horizons}} AS h (consumer, horizon) VALUES ($1, $2)
		ON CONFLICT (consumer) DO UPDATE SET horizon = greatest(h.horizon, EXCLUDED.horizon)
		RETURNING horizon
	), del AS (
		DELETE FROM {{inbox}} WHERE consumer = $1 AND event_id = ANY(ARRAY(
			SELECT event_id FROM {{inbox}}
			WHERE consumer = $1 AND occurred_at < (SELECT horizon FROM h)
			ORDER BY occurred_at LIMIT $3))
		RETURNING 1
	)
	SELECT count(*) FROM del`)

	// $1 published before, $2 seq bound (exclusive), $3 limit. Nothing at or above the lowest
	// unpublished seq is deleted.
	q.pruneOutbox = s(`DELETE FROM {{outbox}} WHERE seq = ANY(ARRAY(
		SELECT seq FROM {{outbox}}
		WHERE published_at IS NOT NULL AND published_at < $1::timestamptz AND seq < $2::bigint
		  AND seq < coalesce((SELECT min(seq) FROM {{outbox}} WHERE published_at IS NULL), $2::bigint)
		ORDER BY seq LIMIT $3))
	  AND published_at IS NOT NULL`)

	listBase := `SELECT {{cols}} FROM {{outbox}} WHERE seq > $1 STATE ORDER BY seq LIMIT $2`
	for i, cond := range []string{
		"",
		"AND published_at IS NULL AND parked_at IS NULL",
		"AND published_at IS NULL AND parked_at IS NOT NULL",
		"AND published_at IS NOT NULL",
	} {
		q.list[i] = s(strings.Replace(listBase, "STATE", cond, 1))
	}
	q.stats = s(`SELECT
		count(*) FILTER (WHERE published_at IS NULL AND parked_at IS NULL),
		count(*) FILTER (WHERE published_at IS NULL AND parked_at IS NOT NULL),
		count(*) FILTER (WHERE published_at IS NOT NULL),
		min(created_at) FILTER (WHERE published_at IS NULL AND parked_at IS NULL)
	FROM {{outbox}}`)
	// Rows with something to clear always have parked_at or next_attempt_at set (a failure sets
	// next_attempt_at), so the failed index finds them.
	q.unpark = s(`UPDATE {{outbox}} SET parked_at = NULL, next_attempt_at = NULL, attempts = 0
	WHERE partition_key = $1 AND published_at IS NULL
	  AND (parked_at IS NOT NULL OR next_attempt_at IS NOT NULL)`)

	// Sent without arguments: one simple-protocol round trip, its own small transaction that
	// does not wait for the WAL flush.
	q.notify = s(`BEGIN; SET LOCAL synchronous_commit = off; NOTIFY {{channel}}; COMMIT`)
	q.listen = s(`LISTEN {{channel}}`)

	// Partitioned outbox. $1 the outbox (regclass text).
	q.partitions = `SELECT c.relname::text FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
	WHERE i.inhparent = $1::regclass ORDER BY c.relname`
	// Whether partition %s holds only rows PruneOutbox would delete: none unpublished, none
	// published at or after $1, every seq below $2 and below the lowest unpublished seq. Index
	// lookups only (pending index, published_at index, primary key), so that it is cheap under
	// the table lock. Also returns whether the partition is empty.
	q.partCheck = s(`SELECT NOT EXISTS (SELECT 1 FROM %[1]s WHERE published_at IS NULL)
	   AND NOT EXISTS (SELECT 1 FROM %[1]s WHERE published_at IS NOT NULL AND published_at >= $1::timestamptz)
	   AND coalesce((SELECT max(seq) FROM %[1]s), 0) < $2::bigint
	   AND coalesce((SELECT max(seq) FROM %[1]s), 0)
	       < coalesce((SELECT min(seq) FROM {{outbox}} WHERE published_at IS NULL), $2::bigint)`)
	q.partIDs = s(`DELETE FROM {{ids}} WHERE created_at >= $1::timestamptz AND created_at < $2::timestamptz`)
	return q
}
