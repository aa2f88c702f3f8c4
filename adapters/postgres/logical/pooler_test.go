package logical

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/internal/testkit"
)

// TestPoolerReplicationRefused: a change source whose replication connection would go through
// PgBouncer (in either pool mode; PgBouncer refuses replication connections) fails with an error
// wrapping postgres.ErrPooledConnection that names the remedy; with Options.ConnString direct
// it starts while the store's own statements still go through the pooler.
func TestPoolerReplicationRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := newTestDB(t, dbOptions{})
	for _, env := range []string{testkit.PgBouncerTxDSN, testkit.PgBouncerSessionDSN} {
		cfg, err := pgxpool.ParseConfig(inTestDB(t, testkit.Need(t, env)))
		require.NoError(t, err)
		cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, &postgres.Options{Schema: d.Schema})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		src, err := NewChangeSource(s, nil)
		require.NoError(t, err)
		_, _, err = src.Start(ctx)
		require.ErrorIs(t, err, postgres.ErrPooledConnection, env)
		require.ErrorContains(t, err, "ConnString", env)

		direct, err := NewChangeSource(s, &Options{ConnString: testDSN(t), Slot: randomName("okb_slot_")})
		require.NoError(t, err)
		st, _, err := direct.Start(ctx)
		require.NoError(t, err, "%s: the replication connection direct, the store through the pooler", env)
		require.NoError(t, st.Close())
		require.NoError(t, direct.DropSlot(context.WithoutCancel(ctx)))
	}
}
