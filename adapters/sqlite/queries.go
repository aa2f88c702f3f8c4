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

//go:generate go run ../../internal/sqlfile/cmd/sqlgen -pkg sqlite

// queries are the statements of queries.sql (statements, queries_gen.go: one field per
// statement, its parameters in a struct of queries_gen.go), some by index.
type queries struct {
	statements
	appliedVersion      [2]string // by migration set
	recordVersion       [2]string // recordVersionOutboxParams
	scriptRecordVersion [2]string // MigrationSQL; {{version}}, {{name}}
	list                [4]string // by driver.RecordState; listAllParams

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
		"inbox_new":                n.inboxNew,
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
	q := queries{statements: loadStatements(st)}
	q.appliedVersion = [2]string{q.appliedVersionOutbox, q.appliedVersionInbox}
	q.recordVersion = [2]string{q.recordVersionOutbox, q.recordVersionInbox}
	q.scriptRecordVersion = [2]string{q.scriptRecordVersionOutbox, q.scriptRecordVersionInbox}
	q.list = [4]string{q.listAll, q.listPending, q.listParked, q.listPublished}
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
