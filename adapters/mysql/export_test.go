package mysql

import (
	"context"
	"errors"
	"os"

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
func (s *Store) PendingDestinationsQuery() string { return s.q.pendingDest }

// MigrateBefore is Migrate with only the migration files named before file (e.g.
// "migrations/009_binary_text.sql"): a database as an earlier version of the adapter left it.
func (s *Store) MigrateBefore(ctx context.Context, file string) error { return s.migrate(ctx, file) }

// UseEarlierQueries makes s a Store of the version before the pending layout (migration 010):
// its writer, relay and cleanup statements become those of testdata/v009/queries.sql (the
// earlier queries.sql), which mark and fail outbox rows and fetch them from ix_unpublished. The
// Go code around them is this version's; the statements it runs beyond the earlier ones are
// replaced by ones with the same arguments that change nothing (a mark's SettleUnpend, the
// settle log half of a cleanup). Migrate it with MigrateBefore(ctx, PendingMigration).
func (s *Store) UseEarlierQueries() error {
	st, err := sqlfile.Load(os.DirFS("testdata/v009"), "queries.sql", s.names.idents())
	if err != nil {
		return err
	}
	s.q.insertPrefix, s.q.insertRow = st.Get("InsertPrefix"), st.Get("InsertRow")
	s.q.insertChecked, s.q.laneCountShared = st.Get("InsertChecked"), st.Get("LaneCountShared")
	s.q.fetchBlocked, s.q.fetchPrefix, s.q.fetchNotExists = st.Get("FetchBlocked"), st.Get("FetchPrefix"), st.Get("FetchNotExists")
	s.q.settlePublish, s.q.settleDelete, s.q.settleFail = st.Get("SettlePublish"), st.Get("SettleDelete"), st.Get("SettleFail")
	s.q.minUnpublished, s.q.pruneOutbox = st.Get("MinUnpublished"), st.Get("PruneOutbox")
	s.q.settleUnpend = "DO 0 IN ({{seq_list}}) AND 0 IN ({{lane_list}})"
	s.q.unpendedOn = "DO 0" // the earlier delete settle is its DELETE alone
	s.q.pruneSettledIDs = "SELECT 0 FROM DUAL WHERE FALSE AND ? AND ? LIMIT ?"
	for _, q := range []string{s.q.insertPrefix, s.q.insertRow, s.q.insertChecked, s.q.laneCountShared,
		s.q.fetchBlocked, s.q.fetchPrefix, s.q.fetchNotExists, s.q.settlePublish, s.q.settleDelete,
		s.q.settleFail, s.q.minUnpublished, s.q.pruneOutbox} {
		if q == "" {
			return errors.New("testdata/v009/queries.sql lacks a statement")
		}
	}
	return nil // st.Err() would list the statements this function does not take
}

// PendingMigration is the file of migration 010 (the pending layout).
const PendingMigration = pendingMigration
