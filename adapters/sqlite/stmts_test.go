package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

func prepared(s *Store) int {
	m := s.stmts.m.Load()
	if m == nil {
		return 0
	}
	return len(*m)
}

// An inbox-only database keeps the statements it could prepare (the inbox's) and tries the
// others (the outbox's, whose tables do not exist) again only after retryPrepare or a
// migration, instead of parsing every query again at each transaction.
func TestPrepareKeepsWhatItCould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(t.TempDir(), "inbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := New(db, nil)
	require.NoError(t, err)
	require.NoError(t, s.MigrateInbox(ctx))
	in, err := core.NewInbox(ctx, s, nil)
	require.NoError(t, err)
	process := func(id string) {
		_, err := in.Process(ctx, "c", core.InboxMessage{EventID: id, Payload: []byte(id), OccurredAt: time.Now()},
			func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
	}

	process("e1")
	n := prepared(s)
	require.Positive(t, n, "the inbox's statements are prepared")
	require.Less(t, n, len(s.q.cached), "the outbox's cannot be")
	require.False(t, s.stmts.complete.Load())
	retryAt := s.stmts.retryAt.Load()
	require.Greater(t, retryAt, time.Now().UnixNano(), "the next attempt waits")
	process("e2")
	require.Equal(t, retryAt, s.stmts.retryAt.Load(), "no attempt before retryPrepare")

	require.NoError(t, s.Migrate(ctx))
	process("e3")
	require.True(t, s.stmts.complete.Load(), "after the migration every statement is prepared")
	require.Equal(t, len(s.q.cached), prepared(s))
}
