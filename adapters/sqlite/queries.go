package sqlite

import (
	"embed"
	"fmt"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

// All of the adapter's SQL is in queries.sql (named statements) and migrations/. Identifiers are
// written as {{name}} tokens and replaced once, at construction, by the validated and quoted
// names of the configured tables (see names), through internal/sqlfile.

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
	dropEarlierIdx string // a new outbox, after migration 0007

	// lane count changes (ResizeLanes, migration 0006)
	lanesUpdate, resizeAllow, resizeDone, resizeLeases      string
	resizeDropLanes, resizeAddLanes, resizeRows, resizeMove string

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
	claimOwned       string
	renew            string
	releaseLane      string
	fetch            string
	leaseState       string
	publish          string
	publishDequeue   string
	deletePublished  string
	fail             string

	// cleanup and admin
	minPending  string
	prune       string
	list        [4]string // by driver.RecordState
	stats       string
	blocked     string
	pendingDest string
	pubRecent   string
	lanesList   string
	// MigrationSQL; {{version}}, {{name}}
	scriptRecordVersion [2]string
	scriptSetLanes      string
	scriptSeedLanes     string
	unpark              string
	parkedKeys          string

	replayByIDs, replayByKey, keyUnpublished, replay string
	replayForget                                     string
	auditInsert, auditList, auditSetRows             string
	resetLanes                                       string

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

// idents maps the {{name}} tokens of queries and migrations to quoted identifiers and the column
// lists.
func (n names) idents() sqlfile.Idents {
	return sqlfile.Idents{
		"outbox":                   n.outbox,
		"lanes":                    n.lanes,
		"workers":                  n.workers,
		"meta":                     n.meta,
		"migrations":               n.migrations,
		"publisher":                n.publisher,
		"audit":                    n.audit,
		"outbox_id":                n.outboxID,
		"outbox_pending":           n.outboxPending,
		"outbox_blocked":           n.outboxBlocked,
		"outbox_published":         n.outboxPublish,
		"outbox_aggregate_version": n.outboxAggVersion,
		"outbox_immutable":         n.outboxImmutable,
		"audit_guard":              n.auditGuard,
		"queue":                    n.queue,
		"queue_failed":             n.queueFailed,
		"publications":             n.publications,
		"publications_at":          n.publicationsAt,
		"queue_insert":             n.queueInsert,
		"queue_insert_published":   n.queueInsertPublished,
		"queue_lane":               n.queueLane,
		"queue_mark":               n.queueMark,
		"queue_unmark":             n.queueUnmark,
		"queue_status":             n.queueStatus,
		"queue_delete":             n.queueDelete,
		"inbox":                    n.inbox,
		"inbox_horizons":           n.inboxHorizons,
		"inbox_versions":           n.inboxVersions,
		"inbox_occurred":           n.inboxOccurred,
		"inbox_migrations":         n.inboxMigrations,
		"cols":                     recordColumns,
		"insert_cols":              insertColumns,
		"version":                  "{{version}}",
		"name":                     "{{name}}",
	}
}

//go:embed queries.sql
var queriesSQL embed.FS

func buildQueries(n names) (queries, error) {
	st, err := sqlfile.Load(queriesSQL, "queries.sql", n.idents())
	if err != nil {
		return queries{}, fmt.Errorf("sqlite: %w", err)
	}
	q := queries{
		appliedVersion:      [2]string{st.Get("AppliedVersionOutbox"), st.Get("AppliedVersionInbox")},
		recordVersion:       [2]string{st.Get("RecordVersionOutbox"), st.Get("RecordVersionInbox")},
		list:                [4]string{st.Get("ListAll"), st.Get("ListPending"), st.Get("ListParked"), st.Get("ListPublished")},
		bootstrap:           st.Get("Bootstrap"),
		getLanes:            st.Get("GetLanes"),
		setLanes:            st.Get("SetLanes"),
		seedLanes:           st.Get("SeedLanes"),
		aggVersionIdx:       st.Get("AggVersionIdx"),
		dropEarlierIdx:      st.Get("DropEarlierIndexes"),
		writeLock:           st.Get("WriteLock"),
		publisherGet:        st.Get("PublisherGet"),
		publisherBump:       st.Get("PublisherBump"),
		insertPrefix:        st.Get("InsertPrefix"),
		spSave:              st.Get("SpSave"),
		mainFile:            st.Get("MainFile"),
		spRelease:           st.Get("SpRelease"),
		spRollback:          st.Get("SpRollback"),
		heartbeatUpsert:     st.Get("HeartbeatUpsert"),
		heartbeatDelete:     st.Get("HeartbeatDelete"),
		heartbeatExpired:    st.Get("HeartbeatExpired"),
		heartbeatCount:      st.Get("HeartbeatCount"),
		claim:               st.Get("Claim"),
		claimOwned:          st.Get("ClaimOwned"),
		renew:               st.Get("Renew"),
		releaseLane:         st.Get("ReleaseLane"),
		fetch:               st.Get("Fetch"),
		leaseState:          st.Get("LeaseState"),
		publish:             st.Get("Publish"),
		publishDequeue:      st.Get("PublishDequeue"),
		deletePublished:     st.Get("DeletePublished"),
		fail:                st.Get("Fail"),
		minPending:          st.Get("MinPending"),
		prune:               st.Get("Prune"),
		stats:               st.Get("Stats"),
		blocked:             st.Get("Blocked"),
		pendingDest:         st.Get("PendingDestinations"),
		pubRecent:           st.Get("PublishedRecent"),
		lanesList:           st.Get("Lanes"),
		scriptRecordVersion: [2]string{st.Get("ScriptRecordVersionOutbox"), st.Get("ScriptRecordVersionInbox")},
		scriptSetLanes:      st.Get("ScriptSetLanes"),
		scriptSeedLanes:     st.Get("ScriptSeedLanes"),
		parkedKeys:          st.Get("ParkedKeys"),
		unpark:              st.Get("Unpark"),
		replayByIDs:         st.Get("ReplayByIDs"),
		replayByKey:         st.Get("ReplayByKey"),
		keyUnpublished:      st.Get("KeyUnpublished"),
		replay:              st.Get("Replay"),
		replayForget:        st.Get("ReplayForget"),
		auditInsert:         st.Get("AuditInsert"),
		auditList:           st.Get("AuditList"),
		auditSetRows:        st.Get("AuditSetRows"),
		resetLanes:          st.Get("ResetLanes"),
		lanesUpdate:         st.Get("LanesUpdate"),
		resizeAllow:         st.Get("ResizeAllow"),
		resizeDone:          st.Get("ResizeDone"),
		resizeLeases:        st.Get("ResizeLeases"),
		resizeDropLanes:     st.Get("ResizeDropLanes"),
		resizeAddLanes:      st.Get("ResizeAddLanes"),
		resizeRows:          st.Get("ResizeRows"),
		resizeMove:          st.Get("ResizeMove"),
		horizon:             st.Get("Horizon"),
		insertInbox:         st.Get("InsertInbox"),
		selectInbox:         st.Get("SelectInbox"),
		lockVersion:         st.Get("LockVersion"),
		setVersion:          st.Get("SetVersion"),
		raiseHorizon:        st.Get("RaiseHorizon"),
		pruneInbox:          st.Get("PruneInbox"),
	}
	if err := st.Err(); err != nil {
		return queries{}, fmt.Errorf("sqlite: %w", err)
	}
	q.cached = []string{
		q.mainFile, q.getLanes, q.writeLock, q.publisherGet, q.publisherBump, q.heartbeatUpsert, q.heartbeatDelete,
		q.heartbeatExpired, q.heartbeatCount, q.claim, q.claimOwned, q.renew, q.releaseLane, q.fetch,
		q.leaseState, q.publish, q.publishDequeue, q.deletePublished, q.fail, q.minPending, q.prune, q.horizon,
		q.insertInbox, q.selectInbox, q.lockVersion, q.setVersion, q.raiseHorizon, q.pruneInbox,
	}
	return q, nil
}
