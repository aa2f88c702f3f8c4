package main

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

// The operator commands reach PostgreSQL with sslmode=verify-full as testkit.TLSOnlyUser (whom
// the test server refuses without TLS); with a CA that did not sign the server's certificate,
// or through a name it does not carry, they fail closed with one line naming the cause.
func TestOpsOverTLS(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, testkit.Need(t, testkit.PostgresDSN))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, testkit.PostgresTLSOnlyRole)
	require.NoError(t, err)
	schema := "ops_tls_" + randSuffix()
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })

	ca := testkit.Need(t, testkit.PostgresTLSCA)
	good := testkit.PostgresTLSDSN(t, "localhost", ca)
	require.Contains(t, ok(t, "migrate", "--db", good, "--schema", schema), "migrated lanes=")
	require.Contains(t, ok(t, "status", "--db", good, "--schema", schema), "pending    0\n")

	fails(t, 1, "certificate signed by unknown authority",
		"status", "--db", testkit.PostgresTLSDSN(t, "localhost", testkit.UntrustedCA(t)), "--schema", schema)
	fails(t, 1, "cannot validate certificate for 127.0.0.1",
		"status", "--db", testkit.PostgresTLSDSN(t, "127.0.0.1", ca), "--schema", schema)
}
