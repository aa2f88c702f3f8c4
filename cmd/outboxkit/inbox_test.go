package main

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// processor returns a function that runs Inbox.Process of a message (event id, occurred at)
// for a consumer, with a handler that does nothing, through the store's own transaction type.
func processor(t *testing.T, store opendb.Store) func(consumer, id string, at time.Time) (core.Outcome, error) {
	t.Helper()
	switch s := store.(type) {
	case *postgres.Store[pgx.Tx]:
		return processWith(t, s, func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
	case *mysql.Store:
		return processWith(t, s, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	case *sqlite.Store:
		return processWith(t, s, func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
	}
	t.Fatalf("no inbox for %T", store)
	return nil
}

func processWith[TTx any](t *testing.T, s driver.InboxStore[TTx], h core.Handler[TTx]) func(consumer, id string, at time.Time) (core.Outcome, error) {
	in, err := core.NewInbox(t.Context(), s, nil)
	require.NoError(t, err)
	return func(consumer, id string, at time.Time) (core.Outcome, error) {
		res, err := in.Process(t.Context(), consumer, core.InboxMessage{EventID: id, Payload: []byte("p"), OccurredAt: at}, h)
		return res.Outcome, err
	}
}

// TestOpsInboxPrune, on each database: `inbox prune` raises the consumer's horizon (older
// messages are refused afterwards, newer ones and other consumers untouched), deletes its
// older records --limit at a time and writes one audit row counting them; a bad flag is a
// usage error (exit 2) and a horizon before 1970 exit 1, both changing and auditing nothing.
// When the deletions fail after the horizon was raised (the inbox table is gone), PostgreSQL
// and MySQL/MariaDB keep the raise and its audit row with rows -1 and a later prune deletes the
// rest; SQLite, in one transaction, keeps nothing. Without the audit table nothing changes.
func TestOpsInboxPrune(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			with := func(cmd ...string) []string { return append(cmd, d.flags...) }
			prune := func(args ...string) []string { return with(append([]string{"inbox", "prune"}, args...)...) }
			fails(t, 1, "no migrated outbox", prune("--consumer", "c1", "--retention", "1h")...)
			ok(t, with("migrate")...)
			fails(t, 2, "give a subcommand: prune", "inbox")
			fails(t, 2, "--consumer is required", prune("--retention", "1h")...)
			fails(t, 2, "--retention: must be positive, got 0s", prune("--consumer", "c1")...)
			fails(t, 2, "--retention: must be positive, got -1h0m0s", prune("--consumer", "c1", "--retention", "-1h")...)
			fails(t, 2, "--limit: want 1 to 100000, got 0", prune("--consumer", "c1", "--retention", "1h", "--limit", "0")...)

			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			process := processor(t, db.Store)
			now := time.Now()
			old := now.Add(-2 * time.Hour)
			for i := range 3 {
				out, err := process("c1", fmt.Sprint("old-", i), old)
				require.NoError(t, err)
				require.Equal(t, core.Applied, out)
			}
			for _, m := range []struct{ consumer, id string }{{"c1", "new"}, {"c2", "old-0"}} {
				at := now
				if m.consumer == "c2" {
					at = old
				}
				out, err := process(m.consumer, m.id, at)
				require.NoError(t, err)
				require.Equal(t, core.Applied, out)
			}
			fails(t, 1, "invalid retention horizon", prune("--consumer", "c1", "--retention", "2000000h")...)
			require.Equal(t, "none\n", ok(t, with("audit")...))
			out, err := process("c1", "old-0", old)
			require.NoError(t, err)
			require.Equal(t, core.Duplicate, out, "the refused prune moved no horizon")

			code, stdout, errs := binRun(t, prune("--consumer", "c1", "--retention", "1h", "--limit", "2", "--actor", "alice")...)
			require.Equal(t, 0, code, errs)
			require.Equal(t, "deleted=3\n", stdout)
			_, err = process("c1", "old-0", old)
			require.ErrorIs(t, err, core.ErrBeyondRetention)
			_, err = process("c1", "older", old.Add(time.Minute))
			require.ErrorIs(t, err, core.ErrBeyondRetention)
			for _, m := range []struct{ consumer, id string }{{"c1", "new"}, {"c2", "old-0"}} {
				at := now
				if m.consumer == "c2" {
					at = old
				}
				out, err := process(m.consumer, m.id, at)
				require.NoError(t, err)
				require.Equal(t, core.Duplicate, out, "%s %s kept", m.consumer, m.id)
			}
			require.Equal(t, "{\n  \"deleted\": 0\n}\n", ok(t, prune("--consumer", "c1", "--retention", "1h", "--output", "json")...))

			// The deletions fail after the raise: the inbox table is gone for a moment.
			for i := range 2 {
				out, err := process("c1", fmt.Sprint("mid-", i), now.Add(-30*time.Minute))
				require.NoError(t, err)
				require.Equal(t, core.Applied, out)
			}
			inbox, renamed := "inbox", "inbox_away"
			if d.driver == "postgres" {
				inbox = `"` + d.cfg.Schema + `".inbox`
			}
			d.exec(t, "ALTER TABLE "+inbox+" RENAME TO "+renamed)
			fails(t, 1, "prune inbox", prune("--consumer", "c1", "--retention", "10m")...)
			if d.driver == "postgres" {
				renamed = `"` + d.cfg.Schema + `".` + renamed
			}
			d.exec(t, "ALTER TABLE "+renamed+" RENAME TO inbox")
			_, err = process("c1", "mid-x", now.Add(-20*time.Minute))
			rest := "2"
			if d.driver == "sqlite" {
				require.NoError(t, err, "one transaction: the horizon did not move")
				rest = "3" // mid-x too
			} else {
				require.ErrorIs(t, err, core.ErrBeyondRetention, "the horizon raise committed")
			}
			require.Equal(t, "deleted="+rest+"\n", ok(t, prune("--consumer", "c1", "--retention", "10m")...), "a later prune deletes the rest")

			log, got := auditRows(t, with("audit", "--output", "json")...)
			want := []string{`inbox prune {"consumer":"c1","retention":"1h0m0s"} 3`, `inbox prune {"consumer":"c1","retention":"1h0m0s"} 0`}
			if d.driver != "sqlite" {
				want = append(want, `inbox prune {"consumer":"c1","retention":"10m0s"} -1`)
			}
			want = append(want, `inbox prune {"consumer":"c1","retention":"10m0s"} `+rest)
			require.Equal(t, want, got)
			require.Equal(t, "alice", log[0].Actor)

			// No audit table: the horizon raise rolls back with its failed audit row.
			audit := "outbox_audit"
			if d.driver == "postgres" {
				audit = `"` + d.cfg.Schema + `".outbox_audit`
			}
			d.exec(t, "DROP TABLE "+audit)
			fails(t, 1, "write audit: database not migrated", prune("--consumer", "c1", "--retention", "1m")...)
			out, err = process("c1", "late", now.Add(-5*time.Minute))
			require.NoError(t, err)
			require.Equal(t, core.Applied, out, "the horizon did not move")
		})
	}
}
