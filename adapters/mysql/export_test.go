package mysql

import "context"

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
func (s *Store) PendingDestinationsQuery() string { return s.q.pendingDest }

// MigrateBefore is Migrate with only the migration files named before file (e.g.
// "migrations/009_binary_text.sql"): a database as an earlier version of the adapter left it.
func (s *Store) MigrateBefore(ctx context.Context, file string) error { return s.migrate(ctx, file) }
