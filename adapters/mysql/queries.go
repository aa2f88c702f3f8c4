package mysql

import (
	"embed"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

// All SQL of the adapter is in queries.sql (named statements with named parameters; go
// generate writes queries_gen.go: the statements struct and one params struct per statement)
// and migrations/. Table names are substituted once, quoted, at construction
// (internal/sqlfile); a list parameter (lanes, seqs) is expanded per call by its params
// struct's query method.

//go:embed queries.sql
var queriesFS embed.FS

//go:generate go run ../../internal/sqlfile/cmd/sqlgen -pkg mysql

const recordColumns = `seq, id, aggregate_type, aggregate_id, aggregate_version, type, schema_id, partition_key,
	destination, payload, headers, tenant, causation_id, correlation_id, lane, created_at, published_at,
	attempts, next_attempt_at, last_error, parked_at`

// queries are the statements of queries.sql (queries_gen.go).
type queries struct {
	statements
}

// idents are the {{key}} substitutions of the adapter's SQL: the quoted tables and trigger
// names and the record columns.
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
		"cols": recordColumns,
		"key":  "{{key}}", "value": "{{value}}", // ScriptMetaPut: literals the adapter quotes
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
	q := queries{statements: loadStatements(st)}
	if err := st.Err(); err != nil {
		return queries{}, fmt.Errorf("mysql: %w", err)
	}
	return q, nil
}
