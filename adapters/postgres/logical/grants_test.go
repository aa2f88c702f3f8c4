package logical

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/outboxtest"
)

// The CDC half of grants.sql (adapters/postgres): what a relay role and an operator role need to
// run a change source.

// TestGrantsCDC: a relay role with the grants of grants.sql plus LOGIN and REPLICATION runs a
// change source; only the publication needs the owner.
func TestGrantsCDC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &postgres.Options{Lanes: 4})
	a := admin(t)
	_, relayRole, _ := grantedRoles(t, d, "LOGIN")
	_, err := a.Exec(ctx, "ALTER ROLE "+quote(relayRole)+" REPLICATION")
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(testDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.User = relayRole
	cfg.ConnConfig.RuntimeParams["search_path"] = quote(d.Schema)
	relayPool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(relayPool.Close)
	relay, err := postgres.New(relayPool, &postgres.Options{Schema: d.Schema})
	require.NoError(t, err)
	src, err := NewChangeSource(relay, &Options{Slot: randomName("okt_slot_"), StandbyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	holdSlot(t, src)

	// The relay role cannot create the publication: Start says so.
	_, _, err = src.Start(ctx)
	require.ErrorContains(t, err, "ownership")
	requireSQLState(t, err, "42501")
	// Created by the owner (as grants.sql shows), the relay role streams, checkpoints and reads
	// its retention.
	_, err = d.Pool.Exec(ctx, `CREATE PUBLICATION `+quote(src.Publication())+` FOR TABLE outbox WITH (publish = 'insert')`)
	require.NoError(t, err)
	st, pos := start(t, src)
	id, err := src.Identity(ctx)
	require.NoError(t, err)
	pub, err := relay.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "c"})
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))
	txs := nextRecords(t, st, pos, 1)
	require.Len(t, txs[0].Records, 1)
	require.NoError(t, relay.SaveCheckpoint(ctx, driver.Checkpoint{Source: id, Position: txs[0].Position, Generation: pub.Generation}))
	require.NoError(t, st.Confirm(ctx, txs[0].Position))
	ret, err := src.Retention(ctx, txs[0].Position)
	require.NoError(t, err)
	require.Positive(t, ret.RetainedBytes)
	require.NoError(t, st.Close())
	require.NoError(t, src.DropSlot(ctx))
}

// TestGrantsBackfill: the relay role of grants.sql cannot write the audit row (CheckAudit is
// refused, so `outboxkit backfill` stops before it changes anything); the operator role with
// REPLICATION made a member of the relay role (grants.sql's note on `outboxkit backfill`) runs
// a CDC relay's Backfill and writes the audit row.
func TestGrantsBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &postgres.Options{Lanes: 4})
	a := admin(t)
	_, relayRole, opRole := grantedRoles(t, d, "LOGIN")
	_, err := a.Exec(ctx, "ALTER ROLE "+quote(opRole)+" REPLICATION; GRANT "+quote(relayRole)+" TO "+quote(opRole))
	require.NoError(t, err)
	storeAs := func(role string) *postgres.Store[pgx.Tx] {
		cfg, err := pgxpool.ParseConfig(testDSN(t))
		require.NoError(t, err)
		cfg.ConnConfig.User = role
		cfg.ConnConfig.RuntimeParams["search_path"] = quote(d.Schema)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		st, err := postgres.New(pool, &postgres.Options{Schema: d.Schema})
		require.NoError(t, err)
		return st
	}

	relay := storeAs(relayRole)
	requireSQLState(t, relay.CheckAudit(ctx), "42501")

	op := storeAs(opRole)
	require.NoError(t, op.CheckAudit(ctx))
	src, err := NewChangeSource(op, &Options{Slot: randomName("okt_slot_"), StandbyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	holdSlot(t, src)
	_, err = d.Pool.Exec(ctx, `CREATE PUBLICATION `+quote(src.Publication())+` FOR TABLE outbox WITH (publish = 'insert')`)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"})
		return err
	}))
	sink := outboxtest.NewSink()
	r, err := core.NewCDCRelay(op, src, sink, core.StaticRouter{Default: "q"}, nil)
	require.NoError(t, err)
	require.NoError(t, r.Backfill(ctx))
	require.Len(t, sink.Messages(), 1)
	require.Equal(t, uint64(1), r.Stats().Published)
	require.NoError(t, op.WriteAudit(ctx, driver.AuditEntry{Actor: "ops", Command: "backfill", Arguments: `{"config":"relay.yaml"}`, Rows: 1}))
	audit, err := core.NewOperator(s, nil)
	require.NoError(t, err)
	rows, err := audit.AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, rows, 1, "the check left no row")
	require.Equal(t, int64(1), rows[0].Rows)
	require.Equal(t, "backfill", rows[0].Command)
}

// grantedRoles creates an application, a relay and an operator role (with the role options
// given, e.g. LOGIN), dropped when the test ends, and runs the adapter's grants.sql for them on
// d's schema.
func grantedRoles(t *testing.T, d *testDB, options string) (appRole, relayRole, opRole string) {
	t.Helper()
	ctx := context.Background()
	a := admin(t)
	appRole, relayRole, opRole = randomName("okt_app_"), randomName("okt_relay_"), randomName("okt_op_")
	for _, r := range []string{appRole, relayRole, opRole} {
		_, err := a.Exec(ctx, "CREATE ROLE "+quote(r)+" "+options)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := a.Exec(context.Background(), "DROP OWNED BY "+quote(r)+"; DROP ROLE "+quote(r))
			if err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		})
	}
	grants, err := os.ReadFile("../grants.sql")
	require.NoError(t, err)
	script := strings.NewReplacer(`:"schema"`, quote(d.Schema), `:"app_role"`, quote(appRole),
		`:"relay_role"`, quote(relayRole), `:"operator_role"`, quote(opRole)).Replace(string(grants))
	_, err = d.Pool.Exec(ctx, script)
	require.NoError(t, err)
	return appRole, relayRole, opRole
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	require.Error(t, err)
	pe := pgError(err)
	require.NotNil(t, pe, "not a server error: %v", err)
	require.Equal(t, code, pe.Code, "%v", err)
}
