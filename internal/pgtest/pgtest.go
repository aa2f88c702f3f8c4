// Package pgtest gives the sinks' tests and benchmarks a PostgreSQL schema of their own: a
// migrated outbox and inbox (adapters/postgres) and an effects table, on the server of
// testkit.PostgresDSN, dropped when the test ends.
package pgtest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/internal/testkit"
)

// Schema is a fresh schema and what uses it.
type Schema struct {
	DSN   string // the server's address (testkit.PostgresDSN)
	Name  string // the schema
	Pool  *pgxpool.Pool
	Store *postgres.Store[pgx.Tx]
}

// Pool connects to dsn with schema first on the search path, 8 connections at most.
func Pool(ctx context.Context, dsn, schema string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = 8
	return pgxpool.NewWithConfig(ctx, cfg)
}

// New creates a schema named prefix + 12 random hex digits, migrates the outbox and inbox in it
// and creates its effects table (seq, id, key, version, pid). Everything is dropped at cleanup.
func New(t testing.TB, prefix string) Schema {
	t.Helper()
	dsn := testkit.Need(t, testkit.PostgresDSN)
	ctx := context.Background()
	var rb [6]byte
	_, _ = crand.Read(rb[:])
	schema := prefix + hex.EncodeToString(rb[:])
	pool, err := Pool(ctx, dsn, schema)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	store, err := postgres.New(pool, &postgres.Options{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{schema, "effects"}.Sanitize()+
		" (seq bigserial PRIMARY KEY, id text NOT NULL, key text NOT NULL, version bigint NOT NULL, pid int NOT NULL)")
	require.NoError(t, err)
	return Schema{DSN: dsn, Name: schema, Pool: pool, Store: store}
}
