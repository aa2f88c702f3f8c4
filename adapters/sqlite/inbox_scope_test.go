package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// earlierInsertInbox is the earlier version's InsertInbox (queries.sql before inbox migration
// 0002), with the default table name.
const earlierInsertInbox = `INSERT INTO "inbox"
    (consumer, event_id, digest, source_position, outcome, occurred_at, processed_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (consumer, event_id) DO NOTHING`

// migrateInboxEarlier leaves the database as the version before inbox migration 0002 did:
// the inbox's migration 0001 only, by MigrateInbox (full=false) or by Migrate (full=true: the
// outbox's migrations and lanes as well).
func migrateInboxEarlier(t *testing.T, s *Store, full bool) {
	t.Helper()
	ctx := context.Background()
	const inbox = 1 // migrationSets
	apply := func(tx *sql.Tx, set int, migs []migration) error {
		for _, m := range migs {
			text, err := s.n.idents().Expand(m.sql)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, text); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.q.recordVersion[set], m.version, m.name, 0); err != nil {
				return err
			}
		}
		return nil
	}
	inboxMigs, err := loadMigrations(migrationSets[inbox])
	require.NoError(t, err)
	require.Equal(t, "inbox/0001_init.sql", inboxMigs[0].name)
	if !full {
		st, err := s.migrateStatements()
		require.NoError(t, err)
		_, err = s.db.ExecContext(ctx, st.Get("BootstrapInbox"))
		require.NoError(t, err)
		require.NoError(t, s.inboxWriteTx(ctx, func(tx *sql.Tx) error { return apply(tx, inbox, inboxMigs[:1]) }))
		return
	}
	outboxMigs, err := loadMigrations(migrationSets[0])
	require.NoError(t, err)
	_, err = s.db.ExecContext(ctx, s.q.bootstrap)
	require.NoError(t, err)
	require.NoError(t, s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := apply(tx, 0, outboxMigs); err != nil {
			return err
		}
		if err := apply(tx, inbox, inboxMigs[:1]); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, s.q.setLanes, 2); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, s.q.seedLanes, 2)
		return err
	}))
}

// TestInboxScopeMigration: an inbox of the version before migration 0002 (key (consumer,
// event_id)) holding a processed record is refused by CheckInbox, core.NewInbox and
// InboxRecords as not migrated, naming the migration and the remedy, and changes nothing.
// MigrateInbox or Migrate rebuilds the table with the key (consumer, source, tenant,
// event_id): the record keeps every column and gets an empty source and tenant, so its
// redelivery (no source, no tenant) is a Duplicate and a conflicting payload a digest
// mismatch, while tenant A's and another source's messages of that ID are Applied; the entity
// version survives. Running the migration again changes nothing. The earlier version's
// insert, which names the earlier key, fails on the rebuilt table instead of writing.
func TestInboxScopeMigration(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		full    bool // the earlier version ran Migrate (outbox too), not MigrateInbox
		migrate func(*Store, context.Context) error
	}{
		{"MigrateInbox", false, (*Store).MigrateInbox},
		{"Migrate", false, (*Store).Migrate},
		{"Migrate after an earlier Migrate", true, (*Store).Migrate},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			testInboxScopeMigration(t, c.full, c.migrate)
		})
	}
}

func testInboxScopeMigration(t *testing.T, full bool, migrate func(*Store, context.Context) error) {
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "earlier.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Logger: quietLogger()})
	require.NoError(t, err)
	migrateInboxEarlier(t, s, full)

	// The earlier version processed e1 (payload p1) for consumer c and applied version 1 of a/1.
	digest := sha256.Sum256([]byte("p1"))
	occurred := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	processed := occurred.Add(time.Second)
	_, err = db.ExecContext(ctx, earlierInsertInbox, "c", "e1", digest[:], "queue/7", int(core.Applied), occurred.UnixMicro(), processed.UnixMicro())
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO inbox_versions (consumer, entity, version) VALUES ('c', 'a/1', 1)`)
	require.NoError(t, err)

	// Behind: refused with the remedy, at NewInbox, and nothing changes.
	requireBehind := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, core.ErrSchemaMismatch)
		var nm *core.NotMigratedError
		require.ErrorAs(t, err, &nm)
		require.Contains(t, err.Error(), "inbox/0002_scope.sql")
		require.Contains(t, err.Error(), "MigrateInbox")
	}
	requireBehind(s.CheckInbox(ctx))
	_, err = core.NewInbox(ctx, s, nil)
	requireBehind(err)
	_, err = s.InboxRecords(ctx, "c", []string{"e1"})
	requireBehind(err)
	require.Equal(t, []string{"1"}, testkit.Strings(t, db, `SELECT CAST(version AS TEXT) FROM inbox_migrations ORDER BY version`))
	require.Equal(t, int64(1), countRows(t, db, `SELECT count(*) FROM inbox`))

	for range 2 { // idempotent
		require.NoError(t, migrate(s, ctx))
		require.Equal(t, []string{"1", "2"}, testkit.Strings(t, db, `SELECT CAST(version AS TEXT) FROM inbox_migrations ORDER BY version`))
	}
	if full {
		n, err := s.LaneCount(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, n)
	}

	// The rebuilt table: the four-part key, the index, no leftover, the record as it was.
	require.Equal(t, []string{"consumer 1", "source 3", "tenant 4", "event_id 2", "digest 0", "source_position 0",
		"outcome 0", "occurred_at 0", "processed_at 0"},
		testkit.Strings(t, db, `SELECT name || ' ' || pk FROM pragma_table_info('inbox') ORDER BY cid`))
	require.Equal(t, []string{"consumer", "occurred_at"}, testkit.Strings(t, db, `SELECT name FROM pragma_index_info('inbox_occurred') ORDER BY seqno`))
	require.Zero(t, countRows(t, db, `SELECT count(*) FROM sqlite_schema WHERE name LIKE 'inbox_new%'`))
	var (
		source, tenant, pos     string
		gotDigest               []byte
		outcome                 int
		gotOccurred, gotProcess int64
	)
	require.NoError(t, db.QueryRowContext(ctx, `SELECT source, tenant, digest, source_position, outcome, occurred_at, processed_at
		FROM inbox WHERE consumer = 'c' AND event_id = 'e1'`).Scan(&source, &tenant, &gotDigest, &pos, &outcome, &gotOccurred, &gotProcess))
	require.Equal(t, "", source)
	require.Equal(t, "", tenant)
	require.Equal(t, digest[:], gotDigest)
	require.Equal(t, "queue/7", pos)
	require.Equal(t, int(core.Applied), outcome)
	require.Equal(t, occurred.UnixMicro(), gotOccurred)
	require.Equal(t, processed.UnixMicro(), gotProcess)

	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	runs := 0
	process := func(in *core.Inbox[*sql.Tx], m core.InboxMessage) (core.InboxResult, error) {
		return in.Process(ctx, "c", m, func(context.Context, *sql.Tx, core.InboxMessage) error { runs++; return nil })
	}
	msg := func(tenant, payload string) core.InboxMessage {
		return core.InboxMessage{EventID: "e1", Payload: []byte(payload), Tenant: tenant, OccurredAt: occurred}
	}
	res, err := process(in, msg("", "p1"))
	require.NoError(t, err)
	require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, res, "the earlier record's redelivery")
	require.Zero(t, runs)
	_, err = process(in, msg("", "other"))
	require.ErrorIs(t, err, core.ErrDigestMismatch, "the earlier record keeps its digest")
	res, err = process(in, msg("A", "p1"))
	require.NoError(t, err)
	require.Equal(t, core.InboxResult{Outcome: core.Applied}, res, "tenant A, the same event ID")
	require.Equal(t, 1, runs)
	res, err = process(in, msg("A", "p1"))
	require.NoError(t, err)
	require.Equal(t, core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}, res, "tenant A's redelivery")
	res, err = process(in, core.InboxMessage{EventID: "e0", Payload: []byte("e0"), Entity: "a/1", Version: 1, OccurredAt: occurred})
	require.NoError(t, err)
	require.Equal(t, core.Stale, res.Outcome, "the earlier entity version survives")
	other, err := core.NewInbox(ctx, s, &core.InboxOptions{Source: "queue-2"})
	require.NoError(t, err)
	res, err = process(other, msg("", "p1"))
	require.NoError(t, err)
	require.Equal(t, core.InboxResult{Outcome: core.Applied}, res, "another source, the same event ID")

	recs, err := s.InboxRecords(ctx, "c", []string{"e1", "e9"})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "e1", recs["e1"].EventID)
	require.Equal(t, digest, recs["e1"].Digest)

	// An earlier consumer still running cannot write to the rebuilt table: its statement
	// names the earlier key, which no longer exists, and fails (nothing is written).
	before := countRows(t, db, `SELECT count(*) FROM inbox`)
	_, err = db.ExecContext(ctx, earlierInsertInbox, "c", "e2", digest[:], "", int(core.Applied), nil, processed.UnixMicro())
	require.Error(t, err)
	require.Contains(t, err.Error(), "ON CONFLICT clause does not match")
	require.Equal(t, before, countRows(t, db, `SELECT count(*) FROM inbox`))
}

// TestInboxRecordsScopes: InboxRecords finds a consumer's records of the given IDs in every
// (source, tenant) scope, however many and in whatever order they sort, and no other
// consumer's; an ID of several scopes gives one of them.
func TestInboxRecordsScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "scopes.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, &Options{Logger: quietLogger()})
	require.NoError(t, err)
	require.NoError(t, s.MigrateInbox(ctx))

	type key struct{ consumer, source, tenant, id string }
	keys := []key{
		{"c", "", "", "e1"}, {"c", "", "A", "e2"}, {"c", "", "A", "e3"}, {"c", "", "B", "e4"},
		{"c", "q", "", "e5"}, {"c", "q", "A", "e6"}, {"c", "r", "Z", "e7"}, {"c", "r", "Z", "e8"},
		{"c", "", "B", "shared"}, {"c", "q", "A", "shared"},
		{"b", "", "", "b1"}, {"d", "", "", "d1"}, {"d", "zz", "", "e1"},
	}
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		for _, k := range keys {
			_, ok, err := s.InsertRecord(ctx, tx, driver.InboxRecord{Consumer: k.consumer, Source: k.source, Tenant: k.tenant,
				EventID: k.id, Digest: sha256.Sum256([]byte(k.id)), Outcome: core.Applied})
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("not inserted: " + k.id)
			}
		}
		return nil
	}))
	ids := []string{"e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "shared", "b1", "d1", "none", "e1"}
	recs, err := s.InboxRecords(ctx, "c", ids)
	require.NoError(t, err)
	var got []string
	for id, r := range recs {
		require.Equal(t, id, r.EventID)
		require.Equal(t, "c", r.Consumer)
		require.Equal(t, sha256.Sum256([]byte(id)), r.Digest)
		got = append(got, id+"@"+r.Source+"/"+r.Tenant)
	}
	require.ElementsMatch(t, got, []string{"e1@/", "e2@/A", "e3@/A", "e4@/B", "e5@q/", "e6@q/A", "e7@r/Z", "e8@r/Z",
		"shared@" + recs["shared"].Source + "/" + recs["shared"].Tenant})
	require.Contains(t, []string{"/B", "q/A"}, recs["shared"].Source+"/"+recs["shared"].Tenant)

	recs, err = s.InboxRecords(ctx, "none", ids)
	require.NoError(t, err)
	require.Empty(t, recs)
	recs, err = s.InboxRecords(ctx, "c", nil)
	require.NoError(t, err)
	require.Empty(t, recs)
}

// TestInboxMigrationScripts: the scripts of MigrationSQL and InboxMigrationSQL hold inbox
// migration 0002: run on an empty database they give the four-part key, and MigrateInbox
// then finds the inbox current.
func TestInboxMigrationScripts(t *testing.T) {
	t.Parallel()
	for name, script := range map[string]func(*Options) (string, error){"MigrationSQL": MigrationSQL, "InboxMigrationSQL": InboxMigrationSQL} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			text, err := script(nil)
			require.NoError(t, err)
			require.Contains(t, text, "PRIMARY KEY (consumer, event_id, source, tenant)")
			require.Contains(t, text, "'inbox/0002_scope.sql'")
			db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "script.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = db.Close() })
			tx, err := db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, text)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			s, err := New(db, &Options{Logger: quietLogger()})
			require.NoError(t, err)
			require.NoError(t, s.CheckInbox(ctx))
			require.NoError(t, s.MigrateInbox(ctx))
			require.Equal(t, []string{"1", "2"}, testkit.Strings(t, db, `SELECT CAST(version AS TEXT) FROM inbox_migrations ORDER BY version`))
			require.Equal(t, []string{"consumer", "event_id", "source", "tenant"},
				testkit.Strings(t, db, `SELECT name FROM pragma_table_info('inbox') WHERE pk > 0 ORDER BY pk`))
			require.False(t, strings.Contains(strings.Join(schemaNames(t, db), " "), "inbox_new"))
		})
	}
}

func schemaNames(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testkit.Strings(t, db, `SELECT name FROM sqlite_schema`)
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
