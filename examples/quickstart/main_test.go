package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestQuickstart runs the example as `go run ./examples/quickstart` does and checks what it
// prints: three credits written, three events applied once, the redelivery a no-op, the ledger
// equal to the balances and nothing left pending.
func TestQuickstart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	require.NoError(t, run(ctx, filepath.Join(t.TempDir(), "app.db"), false, &out))
	got := out.String()
	t.Log("\n" + got)
	require.Equal(t, 3, strings.Count(got, "in the same transaction"), got)
	require.Equal(t, 3, strings.Count(got, ": applied\n"), got)
	require.Contains(t, got, "the same event again: duplicate (no effect)")
	require.Contains(t, got, "result: alice balance=17 ledger=17")
	require.Contains(t, got, "result: bob balance=5 ledger=5")
	require.Contains(t, got, "outbox: 3 published, 0 pending")
}
