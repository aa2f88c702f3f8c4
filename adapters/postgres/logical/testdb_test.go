package logical

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
)

// The fixtures of this package's tests: a fresh schema per test on the server that
// OUTBOXKIT_POSTGRES_DSN names (wal_level=logical; scripts/lib/postgres.sh starts one).

type (
	testDB    = pgtest.DB
	dbOptions = pgtest.DBOptions
)

var (
	testDSN    = pgtest.DSN
	admin      = pgtest.Admin
	randomName = pgtest.RandomName
	quote      = pgtest.Quote
	newTestDB  = pgtest.NewDB
)

// migratedStore builds and migrates a pgx Store in a fresh schema.
func migratedStore(tb testing.TB, o dbOptions, opts *postgres.Options) (*postgres.Store[pgx.Tx], *testDB) {
	tb.Helper()
	d := newTestDB(tb, o)
	var oo postgres.Options
	if opts != nil {
		oo = *opts
	}
	oo.Schema = d.Schema
	s, err := postgres.New(d.Pool, &oo)
	require.NoError(tb, err)
	require.NoError(tb, s.Migrate(context.Background()))
	return s, d
}
