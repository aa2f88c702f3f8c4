package mysql

import (
	"embed"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

// All SQL of the adapter is in queries.sql (named statements) and migrations/. Table names are
// substituted once, quoted, at construction (internal/sqlfile); the statements then only take ?
// parameters. Lists of lanes and seqs are expanded per call with placeholders ({{lane_list}},
// {{seq_list}}: see lists).

//go:embed queries.sql
var queriesFS embed.FS

// nowExpr is the database clock unless the caller injected a time (the parameter is then a
// "YYYY-MM-DD hh:mm:ss.ffffff" UTC string; NULL otherwise).
const nowExpr = "COALESCE(CAST(? AS DATETIME(6)), UTC_TIMESTAMP(6))"

const recordColumns = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers, tenant, causation_id, correlation_id, lane, created_at, published_at,
	attempts, next_attempt_at, last_error, parked_at`

type queries struct {
	laneCount, metaGet, metaGetForUpdate, metaPut, laneInsert              string
	connectionID, laneLockTry, laneLockRelease, migrateLock, migrateUnlock string
	aggVersionIdxCount, aggVersionIdx                                      string

	insertPrefix, insertRow string

	heartbeatUpsert, heartbeatDelete, heartbeatCount, heartbeatPurgeDead string

	claimSkipLocked, claimOwned, claimUpdate, lanesRead, lanesLock, renewUpdate, release string
	claimGetLockCandidates, setLockSession, lockedBy                                     string

	fetchBlocked, fetchPrefix, fetchNotExists string

	settlePublish, settleUnpend, settleDelete, settleFail string
	unpendedOn, unpendedOff                               string

	minUnpublished, pruneOutbox                        string
	pruneSettledIDs, pruneSettled, pruneSettledOrphans string

	listPrefix, stats, unpark, parkedKeys string
	statsExact, blocked, lanesList        string
	pendingDest                           string
	pendingEstimate                       string
	scriptMetaPut                         string

	horizonGet, raiseHorizon, pruneInboxIDs, pruneInbox              string
	insertRecord, readRecord, versionEnsure, versionRead, versionSet string

	publisherInit, publisherRead, publisherLockX, publisherLockS, publisherBump string
	checkpointRead, checkpointPut                                               string
	checkpointDelete                                                            string

	replayByIDs, replayByKey, keyUnpublished, replay, auditInsert, auditList string
	replayPending, replayUnsettle                                            string
	auditSetRows, resetLanes, pubRecent                                      string

	textColumnsPending                                                         string
	triggerBody, insertChecked, laneCountShared, laneCountLocked, laneCountSet string
	publisherReadShared, resizeAllow, resizeDisallow, resizeLeases             string
	resizeDropLanes, resizeRows, resizeMove                                    string
}

// idents are the {{key}} substitutions of the adapter's SQL: the quoted tables, the clock
// expression and the record columns; the lists are filled per call.
func (n tableNames) idents() sqlfile.Idents {
	quote := func(n string) string { return "`" + strings.ReplaceAll(n, "`", "``") + "`" }
	qt := quote // a table, qualified with the database when there is one
	if n.database != "" {
		qt = func(t string) string { return quote(n.database) + "." + quote(t) }
	}
	return sqlfile.Idents{
		"outbox": qt(n.outbox), "lanes": qt(n.lanes), "workers": qt(n.workers), "meta": qt(n.meta),
		"inbox": qt(n.inbox), "horizons": qt(n.horizons), "versions": qt(n.versions),
		"publisher": qt(n.publisher), "checkpoint": qt(n.checkpoint), "audit": qt(n.audit),
		"pending": qt(n.pending), "settled": qt(n.settled),
		"now": nowExpr, "cols": recordColumns,
		"lane_list": "{{lane_list}}", "seq_list": "{{seq_list}}", "id_list": "{{id_list}}",
		"case_list": "{{case_list}}",
		"key":       "{{key}}", "value": "{{value}}",
		"outbox_immutable": quote(n.outbox + "_imm"), // a trigger (own namespace): at most 60 bytes
		"audit_guard":      quote(n.outbox + "_aud"), // a trigger on the audit table, likewise
		"pending_ins":      quote(n.outbox + "_pin"), // the pending layout's triggers (migration 010)
		"pending_upd":      quote(n.outbox + "_pup"),
		"pending_del":      quote(n.outbox + "_pdl"),
	}
}

func newQueries(n tableNames) (queries, error) {
	st, err := sqlfile.Load(queriesFS, "queries.sql", n.idents())
	if err != nil {
		return queries{}, fmt.Errorf("mysql: %w", err)
	}
	q := queries{
		metaGet:                st.Get("MetaGet"),
		connectionID:           st.Get("ConnectionID"),
		laneLockTry:            st.Get("LaneLockTry"),
		laneLockRelease:        st.Get("LaneLockRelease"),
		migrateLock:            st.Get("MigrateLock"),
		migrateUnlock:          st.Get("MigrateUnlock"),
		aggVersionIdxCount:     st.Get("AggregateVersionIndexCount"),
		aggVersionIdx:          st.Get("AggregateVersionIndex"),
		metaGetForUpdate:       st.Get("MetaGetForUpdate"),
		metaPut:                st.Get("MetaPut"),
		laneCount:              st.Get("LaneCount"),
		laneInsert:             st.Get("LaneInsert"),
		insertPrefix:           st.Get("InsertPrefix"),
		insertRow:              st.Get("InsertRow"),
		heartbeatUpsert:        st.Get("HeartbeatUpsert"),
		heartbeatDelete:        st.Get("HeartbeatDelete"),
		heartbeatCount:         st.Get("HeartbeatCount"),
		heartbeatPurgeDead:     st.Get("HeartbeatPurgeDead"),
		claimSkipLocked:        st.Get("ClaimSkipLocked"),
		claimGetLockCandidates: st.Get("ClaimGetLockCandidates"),
		claimOwned:             st.Get("ClaimOwned"),
		claimUpdate:            st.Get("ClaimUpdate"),
		lockedBy:               st.Get("LockedBy"),
		setLockSession:         st.Get("SetLockSession"),
		lanesRead:              st.Get("LanesRead"),
		lanesLock:              st.Get("LanesLock"),
		renewUpdate:            st.Get("RenewUpdate"),
		release:                st.Get("Release"),
		fetchBlocked:           st.Get("FetchBlocked"),
		fetchPrefix:            st.Get("FetchPrefix"),
		fetchNotExists:         st.Get("FetchNotExists"),
		settlePublish:          st.Get("SettlePublish"),
		settleUnpend:           st.Get("SettleUnpend"),
		settleDelete:           st.Get("SettleDelete"),
		unpendedOn:             st.Get("UnpendedOn"),
		unpendedOff:            st.Get("UnpendedOff"),
		settleFail:             st.Get("SettleFail"),
		minUnpublished:         st.Get("MinUnpublished"),
		pruneOutbox:            st.Get("PruneOutbox"),
		pruneSettledIDs:        st.Get("PruneSettledIDs"),
		pruneSettled:           st.Get("PruneSettled"),
		pruneSettledOrphans:    st.Get("PruneSettledOrphans"),
		listPrefix:             st.Get("ListPrefix"),
		stats:                  st.Get("Stats"),
		statsExact:             st.Get("StatsPublished"),
		pendingEstimate:        st.Get("PendingEstimate"),
		blocked:                st.Get("Blocked"),
		pendingDest:            st.Get("PendingDestinations"),
		lanesList:              st.Get("Lanes"),
		scriptMetaPut:          st.Get("ScriptMetaPut"),
		parkedKeys:             st.Get("ParkedKeys"),
		unpark:                 st.Get("Unpark"),
		horizonGet:             st.Get("HorizonGet"),
		raiseHorizon:           st.Get("RaiseHorizon"),
		pruneInboxIDs:          st.Get("PruneInboxIDs"),
		pruneInbox:             st.Get("PruneInbox"),
		insertRecord:           st.Get("InsertRecord"),
		readRecord:             st.Get("ReadRecord"),
		versionEnsure:          st.Get("VersionEnsure"),
		versionRead:            st.Get("VersionRead"),
		versionSet:             st.Get("VersionSet"),
		publisherInit:          st.Get("PublisherInit"),
		publisherRead:          st.Get("PublisherRead"),
		replayByIDs:            st.Get("ReplayByIDs"),
		replayByKey:            st.Get("ReplayByKey"),
		keyUnpublished:         st.Get("KeyUnpublished"),
		replay:                 st.Get("Replay"),
		replayPending:          st.Get("ReplayPending"),
		replayUnsettle:         st.Get("ReplayUnsettle"),
		auditInsert:            st.Get("AuditInsert"),
		auditList:              st.Get("AuditList"),
		auditSetRows:           st.Get("AuditSetRows"),
		pubRecent:              st.Get("PublishedRecent"),
		resetLanes:             st.Get("ResetLanes"),
		publisherLockX:         st.Get("PublisherLockX"),
		publisherLockS:         st.Get("PublisherLockS"),
		publisherBump:          st.Get("PublisherBump"),
		checkpointRead:         st.Get("CheckpointRead"),
		checkpointPut:          st.Get("CheckpointPut"),
		checkpointDelete:       st.Get("CheckpointDelete"),
		triggerBody:            st.Get("TriggerBody"),
		textColumnsPending:     st.Get("TextColumnsPending"),
		insertChecked:          st.Get("InsertChecked"),
		laneCountShared:        st.Get("LaneCountShared"),
		laneCountLocked:        st.Get("LaneCountLocked"),
		laneCountSet:           st.Get("LaneCountSet"),
		publisherReadShared:    st.Get("PublisherReadShared"),
		resizeAllow:            st.Get("ResizeAllow"),
		resizeDisallow:         st.Get("ResizeDisallow"),
		resizeLeases:           st.Get("ResizeLeases"),
		resizeDropLanes:        st.Get("ResizeDropLanes"),
		resizeRows:             st.Get("ResizeRows"),
		resizeMove:             st.Get("ResizeMove"),
	}
	if err := st.Err(); err != nil {
		return queries{}, fmt.Errorf("mysql: %w", err)
	}
	return q, nil
}

// lists returns stmt with {{lane_list}} and {{seq_list}} replaced by lanes and seqs
// placeholders.
func lists(stmt string, lanes, seqs int) string {
	out, err := sqlfile.Idents{"lane_list": placeholders(lanes), "seq_list": placeholders(seqs)}.Expand(stmt)
	if err != nil {
		return stmt // unreachable: the statements were expanded with the same keys at construction
	}
	return out
}

// placeholders returns "?,?,...,?" with n marks.
func placeholders(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.Repeat("?,", n-1) + "?"
}
