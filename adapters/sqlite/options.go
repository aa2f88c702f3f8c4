package sqlite

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/sqlident"
)

// Options configures a Store. A nil *Options means every default.
type Options struct {
	// Table is the outbox table. The adapter's other outbox tables and indexes derive their
	// names from it: <Table>_lanes, <Table>_workers, <Table>_meta, <Table>_migrations,
	// <Table>_publisher, <Table>_audit (the operator audit log, core.Operator) and <Table>_pending, <Table>_blocked, <Table>_published, <Table>_id, <Table>_aggregate_version.
	// It and every derived name must match ^[A-Za-z_][A-Za-z0-9_]{0,62}$, must not begin with
	// "sqlite_" (in any case; SQLite reserves it) and must not collide with another derived name
	// (case-insensitively); New refuses them with a *core.OptionError. Default "outbox".
	Table string
	// InboxTable is the inbox table; <InboxTable>_horizons, <InboxTable>_versions,
	// <InboxTable>_migrations and <InboxTable>_occurred derive from it, and <InboxTable>_new,
	// the name an inbox migration gives the rebuilt table until it takes InboxTable's (it
	// exists only inside that migration's transaction). Same rules as Table.
	// Several inboxes (different InboxTable) may share one outbox. Default "inbox".
	InboxTable string
	// Lanes is the lane count Migrate records the first time it runs (Store.ResizeLanes changes
	// it later; a later Migrate with Lanes 0 accepts the recorded count). A later Migrate with a
	// different count fails with an error wrapping core.ErrSchemaMismatch; LaneCount always
	// returns the recorded count. 1..core.MaxLanes. Default core.DefaultLanes (0 means default).
	Lanes int
	// UniqueAggregateVersion makes Migrate create a unique index on (aggregate_type,
	// aggregate_id, aggregate_version, type) for aggregate_version > 0, so that a second event
	// of one aggregate version fails with core.ErrDuplicateEvent. Setting it to false later
	// does not drop the index. Default false.
	UniqueAggregateVersion bool
	// Logger receives the adapter's logs (migrations). Default slog.Default().
	Logger *slog.Logger
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// names holds every identifier the adapter uses, validated and quoted once.
type names struct {
	outbox, lanes, workers, meta, migrations, publisher   string
	audit                                                 string
	outboxID, outboxPending, outboxBlocked, outboxPublish string
	outboxAggVersion, outboxImmutable, auditGuard         string
	// the pending layout (migration 0007)
	queue, queueFailed, publications, publicationsAt   string
	queueInsert, queueInsertPublished, queueLane       string
	queueMark, queueUnmark, queueStatus, queueDelete   string
	inbox, inboxHorizons, inboxVersions, inboxOccurred string
	inboxMigrations                                    string
	inboxNew                                           string // inbox migration 0002's rebuilt table, before its rename
}

func quote(id string) string { return `"` + id + `"` }

func buildNames(table, inbox string) (names, error) {
	var n names
	check := func(field, id string) (string, error) {
		if !identRE.MatchString(id) {
			return "", &core.OptionError{Field: field, Reason: fmt.Sprintf("identifier %q must match %s", id, identRE)}
		}
		return quote(id), nil
	}
	var err error
	var ids []sqlident.Ident
	for _, f := range []struct {
		dst          *string
		field, ident string
	}{
		{&n.outbox, "Table", table},
		{&n.lanes, "Table", table + "_lanes"},
		{&n.workers, "Table", table + "_workers"},
		{&n.meta, "Table", table + "_meta"},
		{&n.migrations, "Table", table + "_migrations"},
		{&n.publisher, "Table", table + "_publisher"},
		{&n.audit, "Table", table + "_audit"},
		{&n.outboxID, "Table", table + "_id"},
		{&n.outboxPending, "Table", table + "_pending"},
		{&n.outboxBlocked, "Table", table + "_blocked"},
		{&n.outboxPublish, "Table", table + "_published"},
		{&n.outboxAggVersion, "Table", table + "_aggregate_version"},
		{&n.outboxImmutable, "Table", table + "_immutable"},
		{&n.auditGuard, "Table", table + "_audit_guard"},
		{&n.queue, "Table", table + "_queue"},
		{&n.queueFailed, "Table", table + "_queue_failed"},
		{&n.publications, "Table", table + "_publications"},
		{&n.publicationsAt, "Table", table + "_publications_at"},
		{&n.queueInsert, "Table", table + "_queue_insert"},
		{&n.queueInsertPublished, "Table", table + "_queue_insert_pub"},
		{&n.queueLane, "Table", table + "_queue_lane"},
		{&n.queueMark, "Table", table + "_queue_mark"},
		{&n.queueUnmark, "Table", table + "_queue_unmark"},
		{&n.queueStatus, "Table", table + "_queue_status"},
		{&n.queueDelete, "Table", table + "_queue_delete"},
		{&n.inbox, "InboxTable", inbox},
		{&n.inboxHorizons, "InboxTable", inbox + "_horizons"},
		{&n.inboxVersions, "InboxTable", inbox + "_versions"},
		{&n.inboxOccurred, "InboxTable", inbox + "_occurred"},
		{&n.inboxMigrations, "InboxTable", inbox + "_migrations"},
		{&n.inboxNew, "InboxTable", inbox + "_new"},
	} {
		if *f.dst, err = check(f.field, f.ident); err != nil {
			return names{}, err
		}
		if strings.HasPrefix(strings.ToLower(f.ident), "sqlite_") {
			return names{}, &core.OptionError{Field: f.field, Reason: fmt.Sprintf("identifier %q: names beginning with sqlite_ are reserved by SQLite", f.ident)}
		}
		ids = append(ids, sqlident.Ident{Field: f.field, Name: f.ident})
	}
	if err := sqlident.CheckCollisions(ids...); err != nil {
		return names{}, err
	}
	return n, nil
}
