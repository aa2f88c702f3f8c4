package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func TestPartitioningOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		field string
		opts  Options
	}{
		{"Partitioning.Interval", Options{Partitioning: &Partitioning{Interval: 90 * time.Minute}}},
		{"Partitioning.Interval", Options{Partitioning: &Partitioning{Interval: -time.Hour}}},
		{"Partitioning.Interval", Options{Partitioning: &Partitioning{Interval: 32 * 24 * time.Hour}}},
		{"Partitioning.Ahead", Options{Partitioning: &Partitioning{Ahead: -1}}},
		{"Partitioning", Options{Partitioning: &Partitioning{}, UniqueAggregateVersion: true}},
	} {
		_, _, err := c.opts.resolve()
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, c.field)
		require.Equal(t, c.field, oe.Field)
	}
	o, _, err := (&Options{Partitioning: &Partitioning{}}).resolve()
	require.NoError(t, err)
	require.Equal(t, Partitioning{Interval: 24 * time.Hour, Ahead: 7}, *o.Partitioning)
}

func TestPartitioningMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Partitioning: &Partitioning{Interval: 6 * time.Hour, Ahead: 2}})
	parts, err := s.listPartitions(ctx, s.db, s.mustRanges(t))
	require.NoError(t, err)
	require.Len(t, parts, 3, "the current partition and 2 ahead")
	for i := 1; i < len(parts); i++ {
		require.Equal(t, parts[i-1].hi, parts[i].lo)
	}
	require.NoError(t, s.Migrate(ctx), "idempotent")
	require.NoError(t, s.EnsurePartitions(ctx))

	for _, o := range []*Options{
		{Schema: d.schema},
		{Schema: d.schema, Partitioning: &Partitioning{Interval: 24 * time.Hour}},
	} {
		other, err := New(d.pool, o)
		require.NoError(t, err)
		require.ErrorIs(t, other.Migrate(ctx), core.ErrSchemaMismatch)
	}
	plain, pd := migratedStore(t, dbOptions{}, nil)
	_ = plain
	other, err := New(pd.pool, &Options{Schema: pd.schema, Partitioning: &Partitioning{}})
	require.NoError(t, err)
	require.ErrorIs(t, other.Migrate(ctx), core.ErrSchemaMismatch)
}

// A sealed partition is dropped only when all its rows are published before the cut-off and
// below the watermarks; one unpublished row keeps it.
func TestPartitioningDropKeepsUnpublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 4, Partitioning: &Partitioning{}})
	var now time.Time
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT now()`).Scan(&now))

	// A partition three days ago, with four rows, one of them unpublished. Each step below leaves
	// exactly one reason to keep it.
	old := s.partitionAt(now.Add(-72 * time.Hour))
	err := s.createPartition(ctx, s.db, old)
	require.NoError(t, err)
	at := old.lo.Add(time.Hour)
	for i, id := range []string{"old-1", "old-2", "old-3", "old-4"} {
		var pub any = at.Add(time.Minute)
		if i == 2 {
			pub = nil
		}
		_, err := d.pool.Exec(ctx, `WITH ids AS (INSERT INTO outbox_ids (id, created_at) VALUES ($1, $2))
			INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane, created_at, published_at)
			VALUES ($1, 'order', $1, 'order.created', $1, 0, $2, $3)`, id, at, pub)
		require.NoError(t, err)
	}
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{ID: "new-1", AggregateType: "order", AggregateID: "n", Type: "order.created"})
		return err
	}))
	partitions := func() int {
		parts, err := s.listPartitions(ctx, s.db, s.mustRanges(t))
		require.NoError(t, err)
		return len(parts)
	}
	before := partitions()
	drop := func(belowSeq int64) int {
		n, err := s.DropPartitions(ctx, driver.PruneParams{PublishedBefore: now.Add(-time.Hour), BelowSeq: belowSeq})
		require.NoError(t, err)
		return n
	}

	require.Equal(t, 0, drop(0), "one unpublished row keeps the partition")
	require.Equal(t, before, partitions())

	// All published (as a settle does: the pending row goes, a settle log entry lists it); BelowSeq
	// inside the partition keeps it.
	_, err = d.pool.Exec(ctx, `WITH p AS (DELETE FROM outbox_pending AS p USING outbox AS o
			WHERE o.seq = p.seq AND o.id = 'old-3' RETURNING p.seq)
		INSERT INTO outbox_settled (at, min_seq, max_seq, seqs) SELECT $1, seq, seq, ARRAY[seq] FROM p`, at.Add(time.Minute))
	require.NoError(t, err)
	var maxOld int64
	require.NoError(t, d.pool.QueryRow(ctx, `SELECT max(seq) FROM outbox WHERE id LIKE 'old-%'`).Scan(&maxOld))
	require.Equal(t, 0, drop(maxOld), "BelowSeq inside the partition")
	require.Equal(t, before, partitions())

	// A row published (again: a replay) after the cut-off keeps it.
	_, err = d.pool.Exec(ctx, `INSERT INTO outbox_settled (at, min_seq, max_seq, seqs)
		SELECT now(), seq, seq, ARRAY[seq] FROM outbox WHERE id = 'old-4'`)
	require.NoError(t, err)
	require.Equal(t, 0, drop(0), "a row published after the cut-off")
	require.Equal(t, before, partitions())

	// An unpublished row of a later partition with a lower seq (the relay's watermark) keeps it.
	_, err = d.pool.Exec(ctx, `DELETE FROM outbox_settled WHERE at > $1`, at.Add(time.Minute))
	require.NoError(t, err)
	late := s.partitionAt(now.Add(-48 * time.Hour))
	err = s.createPartition(ctx, s.db, late)
	require.NoError(t, err)
	_, err = d.pool.Exec(ctx, `INSERT INTO outbox (seq, id, aggregate_type, aggregate_id, type, partition_key, lane, created_at)
		VALUES ($1, 'late-1', 'order', 'l', 'order.created', 'l', 0, $2)`, maxOld-1, late.lo.Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, 0, drop(0), "an unpublished row with a lower seq elsewhere")
	require.Equal(t, before+1, partitions())
	_, err = d.pool.Exec(ctx, `DELETE FROM outbox WHERE id = 'late-1'`)
	require.NoError(t, err)

	// Everything published long ago: the old partitions are dropped whole (the emptied one
	// too), their IDs released, the new row kept. Through CleanupOutbox, which calls it first.
	n, err := core.CleanupOutbox(ctx, s, &core.CleanupOptions{Retention: time.Hour})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, before-1, partitions())
	var ids []string
	rows, err := d.pool.Query(ctx, `SELECT id FROM outbox_ids ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"new-1"}, ids)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Pending: 1, OldestPendingAt: st.OldestPendingAt}, st)

	// A duplicate of a live ID is still refused.
	err = s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{ID: "new-1", AggregateType: "order", AggregateID: "n", Type: "order.created"})
		return err
	})
	require.ErrorIs(t, err, core.ErrDuplicateEvent)
}

// mustRanges is the store's partitioned outbox.
func (s *Store[TTx]) mustRanges(t testing.TB) ranges {
	r, ok := s.outboxRanges()
	require.True(t, ok, "the outbox is not partitioned")
	return r
}
