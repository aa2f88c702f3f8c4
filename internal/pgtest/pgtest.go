// Package pgtest gives the sinks' tests and benchmarks a PostgreSQL schema of their own: a
// migrated outbox and inbox (adapters/postgres) and an effects table, on the server of
// testkit.PostgresDSN, dropped when the test ends.
package pgtest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"testing"
	"time"

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

// TimeRun starts run in the background and returns how long it took until applied reports n
// (failing the benchmark after 3 minutes); then it cancels run, which must return nil.
func TimeRun(b *testing.B, n uint64, run func(ctx context.Context) error, applied func() uint64) time.Duration {
	b.Helper()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	for applied() < n {
		if time.Since(start) > 3*time.Minute {
			cancel()
			b.Fatalf("%d of %d applied after 3 minutes", applied(), n)
		}
		time.Sleep(time.Millisecond)
	}
	d := time.Since(start)
	cancel()
	require.NoError(b, <-done)
	return d
}

// ConsumerBench runs b.N rounds of a consumer benchmark, the batched way (consume with maxBatch
// 0, the default) and the unbatched way (maxBatch 1) interleaved, their order alternating, each
// consuming n messages in the time it returns (i numbers the runs). It reports inbox_msgs/s and
// unbatched_inbox_msgs/s.
func ConsumerBench(b *testing.B, n int, consume func(i, maxBatch int) time.Duration) {
	var batched, unbatched time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			batched += consume(2*i, 0)
			unbatched += consume(2*i+1, 1)
		} else {
			unbatched += consume(2*i+1, 1)
			batched += consume(2*i, 0)
		}
	}
	b.ReportMetric(float64(n*b.N)/batched.Seconds(), "inbox_msgs/s")
	b.ReportMetric(float64(n*b.N)/unbatched.Seconds(), "unbatched_inbox_msgs/s")
}
