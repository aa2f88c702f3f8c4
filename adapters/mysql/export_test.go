package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"os"
	"slices"

	"github.com/outboxkit/outbox/internal/sqlfile"
)

// FetchPlanQueries returns Fetch's main statement for tests (EXPLAIN): for lanes of total,
// with blocked keys (more than maxInlineBlocked switches to the NOT EXISTS form).
func (s *Store) FetchPlanQueries(lanes []int, total, blocked int) (string, []any) {
	var keys []blockedKey
	for i := range blocked {
		keys = append(keys, blockedKey{key: "k" + string(rune('a'+i%26)), seq: int64(i)})
	}
	return s.fetchQuery(lanes, total, keys, nil, 500)
}

// MinimalMarks reports whether marks are logged with a minimal row image.
func (s *Store) MinimalMarks() bool { return s.markPrefix != "" }

// StatsQueries returns the statements of Stats (its argument: the table name) and Blocked,
// for tests (EXPLAIN).
func (s *Store) StatsQueries() (stats, blocked string) { return s.q.stats, s.q.blocked }

// PendingDestinationsQuery returns the statement of PendingDestinations, for tests (EXPLAIN).
func (s *Store) PendingDestinationsQuery() string { return s.q.pendingDestinations }

// MigrateBefore is Migrate with only the migration files named before file (e.g.
// "migrations/009_binary_text.sql"): a database as an earlier version of the adapter left it.
func (s *Store) MigrateBefore(ctx context.Context, file string) error { return s.migrate(ctx, file) }

// MigrateInboxBefore is MigrateInbox with only its migration files named before file (e.g.
// "migrations/011_inbox_scope.sql"): an inbox-only database as an earlier version left it.
func (s *Store) MigrateInboxBefore(ctx context.Context, file string) error {
	files := slices.DeleteFunc(slices.Clone(inboxMigrations), func(f string) bool { return f >= file })
	return s.withMigrateLock(ctx, "migrate inbox", func(conn *sql.Conn) error {
		return s.apply(ctx, conn, "migrate inbox", files)
	})
}

// UseEarlierQueries makes s a Store of the version before the pending layout (migration 010):
// its writer, relay and cleanup statements become those of testdata/v009/queries.sql (the
// earlier statements), which mark and fail outbox rows and fetch them from ix_unpublished. The
// Go code around them is this version's, and so are the params structs that give their
// arguments: each earlier statement must mark the parameters of this version's statement of
// the same name in the same order, with the same types (checked here). The statements this
// version runs beyond the earlier ones are replaced by ones with the same arguments that change
// nothing (a mark's SettleUnpend, the settle log half of a cleanup). Migrate it with
// MigrateBefore(ctx, PendingMigration).
func (s *Store) UseEarlierQueries() error {
	const dir, file = "testdata/v009", "queries.sql"
	src, err := os.ReadFile(dir + "/" + file)
	if err != nil {
		return err
	}
	earlier, err := sqlfile.Parse(string(src))
	if err != nil {
		return err
	}
	src, err = queriesFS.ReadFile("queries.sql")
	if err != nil {
		return err
	}
	current, err := sqlfile.Parse(string(src))
	if err != nil {
		return err
	}
	st, err := sqlfile.Load(os.DirFS(dir), file, s.names.idents())
	if err != nil {
		return err
	}
	for name, field := range map[string]*string{
		"InsertPrefix": &s.q.insertPrefix, "InsertRow": &s.q.insertRow, "InsertChecked": &s.q.insertChecked,
		"LaneCountShared": &s.q.laneCountShared, "FetchBlocked": &s.q.fetchBlocked, "FetchPrefix": &s.q.fetchPrefix,
		"FetchNotExists": &s.q.fetchNotExists, "SettlePublish": &s.q.settlePublish, "SettleDelete": &s.q.settleDelete,
		"SettleFail": &s.q.settleFail, "MinUnpublished": &s.q.minUnpublished, "PruneOutbox": &s.q.pruneOutbox,
		"SettleUnpend": &s.q.settleUnpend, "UnpendedOn": &s.q.unpendedOn, "PruneSettledIDs": &s.q.pruneSettledIDs,
	} {
		if err := sameParams(earlier, current, name); err != nil {
			return fmt.Errorf("%s/%s: %w", dir, file, err)
		}
		*field = st.Get(name)
	}
	return st.Err()
}

// sameParams reports an error unless statement name of a and of b take the same arguments: the
// same names, in the same positional order, of the same types.
func sameParams(a, b *sqlfile.File, name string) error {
	_, ao, err := a.Rewrite(name)
	if err != nil {
		return err
	}
	_, bo, err := b.Rewrite(name)
	if err != nil {
		return err
	}
	types := func(f *sqlfile.File) map[string]string {
		m := map[string]string{}
		for _, p := range f.Params(name) {
			m[p.Name] = p.Type
		}
		return m
	}
	if !slices.Equal(ao, bo) || !maps.Equal(types(a), types(b)) {
		return fmt.Errorf("statement %s takes %v %v, this version's %v %v", name, ao, types(a), bo, types(b))
	}
	return nil
}

// PendingMigration is the file of migration 010 (the pending layout).
const PendingMigration = pendingMigration

// OwnedLanes runs ClaimOwned, a statement with a list parameter, for lanes: those of them that
// have an owner.
func (s *Store) OwnedLanes(ctx context.Context, lanes []int) ([]int, error) {
	query, args := claimOwnedParams{Lanes: lanes}.query(s.q.claimOwned)
	return queryInts(ctx, s.db, query, args...)
}
