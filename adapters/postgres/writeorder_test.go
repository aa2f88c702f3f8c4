package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
)

// Order per key is the order in which rows got their sequence numbers (at insert), not commit
// order, and the relay publishes what is visible: two unserialised transactions on one key that
// commit in the reverse order of their inserts are published in commit order when the relay
// polls between the commits, i.e. the later version first (docs/guarantees.md). Serialising the
// writers (the aggregate row locked FOR UPDATE in the same transaction) keeps the order.
func TestWriteOrderFollowsSequence(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, d := migratedStore(t, dbOptions{}, nil)
	_, err := d.pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, version bigint NOT NULL)`)
	require.NoError(t, err)
	_, err = d.pool.Exec(ctx, `INSERT INTO orders VALUES ('o1', 0), ('o2', 0)`)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	sink := conformance.NewSink()
	r, err := core.NewRelay(s, sink, core.StaticRouter{Default: "q"}, &core.RelayOptions{Owner: "w", PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	acked := func(id string) {
		t.Helper()
		require.Eventually(t, func() bool { return sink.Acks(id) > 0 }, 10*time.Second, 5*time.Millisecond, "%s not published", id)
	}
	write := func(tx pgx.Tx, order, id string, version int64, lock bool) {
		t.Helper()
		if lock { // the recipe: lock the aggregate row and take its next version in this transaction
			require.NoError(t, tx.QueryRow(ctx, `UPDATE orders SET version = version + 1 WHERE id = $1 RETURNING version`, order).Scan(&version))
		}
		_, err := ob.Write(ctx, tx, core.Event{ID: id, AggregateType: "order", AggregateID: order, AggregateVersion: version,
			Type: "order.changed", Payload: []byte(`{}`)})
		require.NoError(t, err)
	}
	order := func(key string) []string {
		var ids []string
		for _, m := range sink.Deliveries() {
			if m.PartitionKey == key {
				ids = append(ids, m.ID)
			}
		}
		return ids
	}

	// Unserialised: v1 takes the lower sequence number, v2 commits first and is published alone;
	// v1 follows when it commits. The consumer sees v2 before v1.
	t1, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = t1.Rollback(ctx) }()
	write(t1, "o1", "o1-v1", 1, false)
	require.NoError(t, pgx.BeginFunc(ctx, d.pool, func(t2 pgx.Tx) error { write(t2, "o1", "o1-v2", 2, false); return nil }))
	acked("o1-v2")
	require.NoError(t, t1.Commit(ctx))
	acked("o1-v1")
	require.Equal(t, []string{"o1-v2", "o1-v1"}, order("order/o1"), "unserialised writers: published in commit order")

	// Serialised with the recipe: the second writer waits for the first one's lock, so sequence
	// order, commit order and version order agree.
	t3, err := d.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = t3.Rollback(ctx) }()
	write(t3, "o2", "o2-first", 0, true)
	second := make(chan error, 1)
	go func() {
		second <- pgx.BeginFunc(ctx, d.pool, func(t4 pgx.Tx) error { write(t4, "o2", "o2-second", 0, true); return nil })
	}()
	select {
	case err := <-second:
		t.Fatalf("the second writer committed (%v) while the first held the aggregate row", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, t3.Commit(ctx))
	require.NoError(t, <-second)
	acked("o2-second")
	acked("o2-first")
	require.Equal(t, []string{"o2-first", "o2-second"}, order("order/o2"), "serialised writers: published in write order")
}
