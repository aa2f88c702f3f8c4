package postgres

import (
	"embed"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

// Every SQL statement of the adapter lives in queries.sql (named statements) and migrations/
// (whole files), loaded once per Store with its quoted identifiers. The pgx and database/sql
// paths run the same strings.

//go:embed queries.sql migrations/*.sql
var sqlFS embed.FS

const recordCols = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id,
	partition_key, destination, payload, headers::text, tenant, causation_id, correlation_id, lane,
	created_at, published_at, attempts, next_attempt_at, last_error, parked_at`

// pendingCols is recordCols of an outbox row o LEFT JOINed to its pending row p (migration
// 0008): a record is unpublished while p exists, and then has p's lane and status columns. A
// record published before the migration (published_at set; Replay clears it) has its
// published_at and the status columns it had then; one published since has the time of the
// settle log entry that lists it (at most one does: Replay takes a seq out of its entry) and
// the status of a record the relay published: nothing left to retry. {{pcols}} in queries.sql.
func pendingCols(settled string) string {
	const published = `p.seq IS NULL AND o.published_at IS NOT NULL` // before the migration
	return `o.seq, o.id, o.aggregate_type, o.aggregate_id, o.aggregate_version, o.type, o.schema_id,
	o.partition_key, o.destination, o.payload, o.headers::text, o.tenant, o.causation_id,
	o.correlation_id, coalesce(p.lane, o.lane), o.created_at,
	CASE WHEN p.seq IS NOT NULL THEN NULL ELSE coalesce(o.published_at, (SELECT s.at FROM ` + settled + ` AS s
		WHERE s.min_seq <= o.seq AND s.max_seq >= o.seq AND o.seq = ANY(s.seqs) ORDER BY s.min_seq DESC LIMIT 1)) END,
	CASE WHEN p.seq IS NOT NULL THEN p.attempts WHEN ` + published + ` THEN o.attempts ELSE 0 END,
	CASE WHEN p.seq IS NOT NULL THEN p.next_attempt_at WHEN ` + published + ` THEN o.next_attempt_at END,
	CASE WHEN p.seq IS NOT NULL THEN p.last_error WHEN ` + published + ` THEN o.last_error ELSE '' END,
	CASE WHEN p.seq IS NOT NULL THEN p.parked_at WHEN ` + published + ` THEN o.parked_at END`
}

//go:generate go run ../../internal/sqlfile/cmd/sqlgen -pkg postgres

// queries are the statements of queries.sql (statements, queries_gen.go: one field per
// statement, its parameters in a struct of queries_gen.go) and the migrations.
type queries struct {
	statements
	list [4]string // by driver.RecordState; listAllParams

	migrations []migration
}

type migration struct {
	name string // recorded in the meta table once applied
	sql  string
}

// idents are the {{key}} substitutions of the adapter's SQL: the quoted identifiers of n and
// the record column list. {{partition}}, {{from}} and {{to}} are filled per partition.
func (n names) idents() sqlfile.Idents {
	return sqlfile.Idents{
		"schema":            n.schema,
		"outbox":            n.outbox,
		"lanes":             n.lanes,
		"workers":           n.workers,
		"meta":              n.meta,
		"publisher":         n.publisher,
		"checkpoint":        n.checkpoint,
		"audit":             n.audit,
		"fn":                n.fn,
		"fetch_fn":          n.fetchFn,
		"trigger":           n.trigger,
		"trigger_name":      strings.Trim(n.trigger, `"`),
		"audit_guard":       n.auditGuard,
		"audit_guard_name":  strings.Trim(n.auditGuard, `"`),
		"audit_guard_fn":    n.auditGuardFn,
		"lane_count_fn":     n.laneCountFn,
		"pending_idx":       n.pendingIdx,
		"failed_idx":        n.failedIdx,
		"aggver_idx":        n.aggverIdx,
		"ids":               n.ids,
		"ids_idx":           n.idsIdx,
		"pub_idx":           n.pubIdx,
		"inbox":             n.inbox,
		"horizons":          n.horizons,
		"versions":          n.versions,
		"inbox_idx":         n.inboxIdx,
		"inbox_pkey":        n.inboxPkey,
		"channel":           n.channel,
		"pending":           n.pending,
		"settled":           n.settled,
		"pending_fetch_fn":  n.pendingFetchFn,
		"pending_walk_fn":   n.pendingWalkFn,
		"pending_sync_fn":   n.pendingSyncFn,
		"pending_sync":      n.pendingSync,
		"pending_sync_name": strings.Trim(n.pendingSync, `"`),
		"pending_fail_idx":  n.pendingFailIdx,
		"settled_at_idx":    n.settledAtIdx,
		"settled_min_idx":   n.settledMinIdx,
		"pcols":             pendingCols(n.settled),
		"cols":              recordCols,
		"partition":         "{{partition}}",
		"parent":            "{{parent}}",
		"from":              "{{from}}",
		"to":                "{{to}}",
		"key":               "{{key}}",
		"value":             "{{value}}",
	}
}

// buildQueries loads the statements and migrations with n's identifiers; partitioned and
// inboxPartitioned choose the layouts (Options.Partitioning, Options.InboxPartitioning).
func buildQueries(n names, partitioned, inboxPartitioned bool) (*queries, error) {
	id := n.idents()
	st, err := sqlfile.Load(sqlFS, "queries.sql", id)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	q := &queries{statements: loadStatements(st)}
	q.list = [4]string{q.listAll, q.listPending, q.listParked, q.listPublished}
	if partitioned {
		// insertOne, insertOneChecked empty: insert and insertChecked serve every call.
		q.insert, q.insertChecked = q.insertPartitioned, q.insertPartitionedChecked
		q.insertOne, q.insertOneChecked = "", ""
		q.fetch = q.fetchPartitioned
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	type file struct{ name, file string }
	var files []file
	if partitioned {
		files = append(files, file{"migration:0000_outbox_partitioned", "0000_outbox_partitioned.sql"})
	}
	files = append(files, file{"migration:0001_outbox", "0001_outbox.sql"})
	if inboxPartitioned {
		files = append(files, file{inboxPartitionedMigration + n.rawInbox, "0002_inbox_partitioned.sql"})
	}
	files = append(files,
		file{inboxMigration + n.rawInbox, "0002_inbox.sql"},
		file{"migration:0003_publisher", "0003_publisher.sql"},
		file{"migration:0004_liveness", "0004_liveness.sql"},
		file{"migration:0005_audit", "0005_audit.sql"},
		file{"migration:0006_audit_guard", "0006_audit_guard.sql"},
		file{"migration:0007_lanes_resize", "0007_lanes_resize.sql"},
		file{"migration:0008_pending", "0008_pending.sql"},
		file{inboxScopeMigration + n.rawInbox, "0009_inbox_scope.sql"},
		file{"migration:0010_fetch_jit", "0010_fetch_jit.sql"},
		file{"migration:0011_drain_cost", "0011_drain_cost.sql"},
	)
	for _, f := range files {
		src, err := sqlFS.ReadFile("migrations/" + f.file)
		if err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		text, err := id.Expand(string(src))
		if err != nil {
			return nil, fmt.Errorf("postgres: migration %s: %w", f.file, err)
		}
		q.migrations = append(q.migrations, migration{name: f.name, sql: text})
	}
	return q, nil
}
