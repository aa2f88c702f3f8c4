package testkit

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// RequireNotMigrated asserts the one rule of an unmigrated database's error (the conformance
// suite's unmigrated area checks the same on the constructors): a *core.NotMigratedError, a
// schema mismatch, whose message starts with prefix, says "not migrated" once with the remedy
// and repeats no prefix.
func RequireNotMigrated(t testing.TB, err error, prefix string) {
	t.Helper()
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.ErrorIs(t, err, core.ErrNotMigrated)
	var nm *core.NotMigratedError
	require.True(t, errors.As(err, &nm), "%v", err)
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, prefix), "%q", msg)
	for _, remedy := range []string{"Migrate", "migrate: true", "outboxkit migrate"} {
		require.Contains(t, msg, remedy)
	}
	require.Equal(t, 1, strings.Count(msg, "not migrated"), "%q", msg)
	adapter, _, _ := strings.Cut(prefix, ":")
	require.Equal(t, 1, strings.Count(msg, adapter+":"), "%q", msg)
}
