package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// The operator commands work on an existing outbox as it is (no migration, lane count read from
// the database): a parked key is listed, counted and released by unpark, and cleanup keeps
// published rows behind an unpublished one.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ops.db")
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	store, err := sqlite.New(db, &sqlite.Options{Lanes: 4})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	require.NoError(t, err)
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	evs, err := ob.Write(ctx, tx,
		core.Event{AggregateType: "order", AggregateID: "1", Type: "order.created"},
		core.Event{AggregateType: "order", AggregateID: "2", Type: "order.created"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	// Park order/1, publish order/2.
	leases, err := store.ClaimLanes(ctx, core.ClaimParams{Owner: "w", Max: 4, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := store.Fetch(ctx, core.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	p := core.SettleParams{Leases: leases}
	for _, r := range recs {
		if r.ID == evs[0].ID {
			p.Failed = append(p.Failed, core.Failure{Seq: r.Seq, Lane: r.Lane, Error: "rejected schema", Park: true})
		} else {
			p.Published = append(p.Published, r.Seq)
		}
	}
	require.NoError(t, store.Settle(ctx, p))

	ops := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		require.Equal(t, 0, run(ctx, append(args[:1:1], append([]string{"--db", path}, args[1:]...)...), &out, &errb), errb.String())
		return out.String()
	}
	require.Contains(t, ops("stats"), "pending=0 parked=1 published=1")
	parked := ops("parked")
	require.Contains(t, parked, evs[0].ID)
	require.Contains(t, parked, `key="order/1"`)
	require.Contains(t, parked, `error="rejected schema"`)
	// The published order/2 was written after the parked order/1: it stays behind the
	// watermark (the lowest unpublished seq) until order/1 is delivered.
	require.Contains(t, ops("cleanup", "--retention", "1ns"), "deleted=0")
	require.Equal(t, "unparked=1\n", ops("unpark", "order/1"))
	require.Contains(t, ops("stats"), "pending=1 parked=0 published=1")

	var out, errb bytes.Buffer
	require.Equal(t, 1, run(ctx, []string{"stats", "--db", filepath.Join(t.TempDir(), "missing.db")}, &out, &errb))
	require.Contains(t, errb.String(), "no such file")
}
