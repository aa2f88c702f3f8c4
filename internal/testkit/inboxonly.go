package testkit

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// InboxOnlyStore is what the inbox-only migration scenario needs of an adapter's Store.
type InboxOnlyStore[TTx any] interface {
	driver.InboxStore[TTx]
	driver.OutboxStore[TTx]
	Migrate(ctx context.Context) error
	MigrateInbox(ctx context.Context) error
}

// InboxOnlyCase is an adapter's part of RequireInboxOnlyMigration.
type InboxOnlyCase struct {
	// Objects lists the database's (or schema's) tables, indexes, triggers and routines.
	Objects func() []string
	// Want are the inbox objects MigrateInbox must create.
	Want []string
	// Prefix starts NewOutbox's not-migrated error (see RequireNotMigrated).
	Prefix string
	// InboxOnly and Full, when set, check more on the inbox-only database and after the full
	// migration.
	InboxOnly, Full func()
}

// RequireInboxOnlyMigration runs the consumer-only service's path on a fresh, unmigrated
// store: MigrateInbox (twice) creates the inbox and nothing named outbox; the inbox applies,
// deduplicates and prunes; NewOutbox is refused with the not-migrated error; then Migrate,
// MigrateInbox and Migrate again create the outbox and keep the inbox's records and entity
// versions.
func RequireInboxOnlyMigration[TTx any](t *testing.T, s InboxOnlyStore[TTx], c InboxOnlyCase) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.MigrateInbox(ctx)) // idempotent
	got := c.Objects()
	for _, name := range got {
		require.False(t, strings.HasPrefix(name, "outbox"), "MigrateInbox created %s (all: %v)", name, got)
	}
	require.Subset(t, got, c.Want)

	in, err := core.NewInbox[TTx](ctx, s, nil)
	require.NoError(t, err)
	if c.InboxOnly != nil {
		c.InboxOnly()
	}
	require.Equal(t, core.Applied, ProcessOnce(t, in, "e1", 1))
	require.Equal(t, core.Duplicate, ProcessOnce(t, in, "e1", 1))
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)
	_, err = core.NewOutbox[TTx](ctx, s, nil)
	RequireNotMigrated(t, err, c.Prefix)

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.MigrateInbox(ctx))
	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, core.Duplicate, ProcessOnce(t, in, "e1", 1))
	require.Equal(t, core.Stale, ProcessOnce(t, in, "e0", 1)) // the entity version survived too
	_, err = core.NewOutbox[TTx](ctx, s, nil)
	require.NoError(t, err)
	if c.Full != nil {
		c.Full()
	}
}

// ProcessOnce records one message of consumer "c" for entity "a/1" and returns its outcome.
func ProcessOnce[TTx any](t testing.TB, in *core.Inbox[TTx], id string, version int64) core.Outcome {
	t.Helper()
	res, err := in.Process(context.Background(), "c", core.InboxMessage{EventID: id, Payload: []byte(id), Entity: "a/1", Version: version, OccurredAt: time.Now()},
		func(context.Context, TTx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	return res.Outcome
}

// Strings returns the first column of every row that query returns on db.
func Strings(t testing.TB, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}
