package postgres

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// inboxParts is the store's partitioned inbox.
func (s *Store[TTx]) inboxParts(t testing.TB) ranges {
	r, ok := s.inboxRanges()
	require.True(t, ok, "the inbox is not partitioned")
	return r
}

// seedInbox writes records of consumer straight into the partitioned inbox, as if processed at
// processed (its partition must exist), each occurred at occurred with payload "p".
func seedInbox(t testing.TB, s *Store[pgx.Tx], consumer string, processed, occurred time.Time, ids ...string) {
	t.Helper()
	digest := sha256.Sum256([]byte("p"))
	for _, id := range ids {
		_, err := s.db.exec(context.Background(), `INSERT INTO `+s.n.inbox+` (consumer, event_id, digest, outcome, occurred_at, processed_at)
			VALUES ($1, $2, $3, $4, $5, $6)`, consumer, id, digest[:], int16(core.Applied), occurred, processed)
		require.NoError(t, err)
	}
}

func inboxMsg(id, payload string, at time.Time) core.InboxMessage {
	return core.InboxMessage{EventID: id, Payload: []byte(payload), OccurredAt: at}
}

func TestInboxPartitioningOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		field string
		opts  Options
	}{
		{"InboxPartitioning.Interval", Options{InboxPartitioning: &Partitioning{Interval: 30 * time.Minute}}},
		{"InboxPartitioning.Ahead", Options{InboxPartitioning: &Partitioning{Ahead: 1001}}},
	} {
		_, _, err := c.opts.resolve()
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, c.field)
		require.Equal(t, c.field, oe.Field)
	}
	for _, f := range []func(*Options) (string, error){MigrationSQL, InboxMigrationSQL} {
		_, err := f(&Options{InboxPartitioning: &Partitioning{}})
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "InboxPartitioning", oe.Field)
	}
}

// TestInboxPartitioningMigrate: Migrate and MigrateInbox create the partitioned inbox with its
// partitions ahead; a store whose options disagree with the inbox's layout is refused by
// Migrate, MigrateInbox and core.NewInbox with core.ErrSchemaMismatch, and changes nothing.
func TestInboxPartitioningMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	part := &Partitioning{Interval: 6 * time.Hour, Ahead: 2}
	s, d := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: part})
	parts, err := s.listPartitions(ctx, s.db, s.inboxParts(t))
	require.NoError(t, err)
	require.Len(t, parts, 3, "the current partition and 2 ahead")
	require.NoError(t, s.Migrate(ctx), "Migrate again")
	require.NoError(t, s.MigrateInbox(ctx), "MigrateInbox on a migrated schema")

	for name, o := range map[string]*Options{
		"plain":          {Schema: d.schema},
		"other interval": {Schema: d.schema, InboxPartitioning: &Partitioning{Interval: time.Hour}},
	} {
		other, err := New(d.pool, o)
		require.NoError(t, err)
		require.ErrorIs(t, other.Migrate(ctx), core.ErrSchemaMismatch, name)
		require.ErrorIs(t, other.MigrateInbox(ctx), core.ErrSchemaMismatch, name)
		_, err = core.NewInbox(ctx, driver.InboxStore[pgx.Tx](other), nil)
		require.ErrorIs(t, err, core.ErrSchemaMismatch, name)
	}
	after, err := s.listPartitions(ctx, s.db, s.inboxParts(t))
	require.NoError(t, err)
	require.Equal(t, parts, after)

	// A plain inbox is not partitioned in place.
	plain, pd := migratedStore(t, dbOptions{}, nil)
	_ = plain
	other, err := New(pd.pool, &Options{Schema: pd.schema, InboxPartitioning: part})
	require.NoError(t, err)
	require.ErrorIs(t, other.Migrate(ctx), core.ErrSchemaMismatch)
	_, err = core.NewInbox(ctx, driver.InboxStore[pgx.Tx](other), nil)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)

	// An inbox-only schema.
	od := newTestDB(t, dbOptions{})
	only, err := New(od.pool, &Options{Schema: od.schema, InboxPartitioning: part})
	require.NoError(t, err)
	require.NoError(t, only.MigrateInbox(ctx))
	parts, err = only.listPartitions(ctx, only.db, only.inboxParts(t))
	require.NoError(t, err)
	require.Len(t, parts, 3)
	in, err := core.NewInbox(ctx, driver.InboxStore[pgx.Tx](only), nil)
	require.NoError(t, err)
	res, err := in.Process(ctx, "c", inboxMsg("m", "p", time.Now()), func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
}

// TestInboxPartitionDrop: Prune drops a sealed partition once every record in it is older than
// its consumer's horizon (never while a consumer without a horizon, or with a lower one, has a
// record there), deletes no record otherwise, and keeps the retention rule: a redelivery of a
// dropped or kept record older than the horizon is refused. Records of earlier partitions are
// found: a redelivery is a Duplicate, other content a conflict.
func TestInboxPartitionDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: &Partitioning{Interval: time.Hour, Ahead: 1}})
	r := s.inboxParts(t)
	var now time.Time
	require.NoError(t, queryRow(ctx, s.db, s.q.now, nil, &now))
	old, older := r.at(now.Add(-3*time.Hour)), r.at(now.Add(-5*time.Hour))
	require.NoError(t, s.createPartition(ctx, s.db, old))
	require.NoError(t, s.createPartition(ctx, s.db, older))
	t0 := now.Add(-48 * time.Hour).UTC().Truncate(time.Second)
	seedInbox(t, s, "a", old.lo, t0, "a1", "a2", "a3")
	seedInbox(t, s, "b", old.lo, t0, "b1")
	seedInbox(t, s, "c", older.lo, t0, "c1")

	in, err := core.NewInbox(ctx, driver.InboxStore[pgx.Tx](s), nil)
	require.NoError(t, err)
	effects := 0
	apply := func(context.Context, pgx.Tx, core.InboxMessage) error { effects++; return nil }
	process := func(consumer string, m core.InboxMessage) (core.InboxResult, error) {
		return in.Process(ctx, consumer, m, apply)
	}

	// Records of earlier partitions are found, whatever the redelivery's time.
	res, err := process("c", inboxMsg("c1", "p", now))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome, "a redelivery of a record of an earlier partition")
	_, err = process("c", inboxMsg("c1", "other", t0))
	require.ErrorIs(t, err, core.ErrDigestMismatch, "other content under the ID of a record of an earlier partition")
	res, err = process("a", inboxMsg("a-new", "p", now))
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)

	partitions := func() map[string]bool {
		parts, err := s.listPartitions(ctx, s.db, r)
		require.NoError(t, err)
		out := map[string]bool{}
		for _, p := range parts {
			out[p.name] = true
		}
		return out
	}
	horizon := t0.Add(time.Hour)
	n, err := in.Prune(ctx, "a", horizon, 0)
	require.NoError(t, err)
	require.Zero(t, n, "b, which has no horizon, keeps the partition; c's has no record of a")
	require.True(t, partitions()[old.name])
	_, err = process("a", inboxMsg("a1", "p", t0))
	require.ErrorIs(t, err, core.ErrBeyondRetention, "a kept record older than the horizon")
	res, err = process("a", inboxMsg("a-new", "p", now))
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)

	n, err = in.Prune(ctx, "b", t0, 0)
	require.NoError(t, err)
	require.Zero(t, n, "b's record is not older than b's horizon")
	require.True(t, partitions()[old.name])

	n, err = in.Prune(ctx, "b", horizon, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "b's record, in the partition dropped")
	require.False(t, partitions()[old.name], "every record of the partition is older than its consumer's horizon")
	require.True(t, partitions()[older.name], "c has no horizon")
	for _, c := range []struct{ consumer, id string }{{"a", "a2"}, {"b", "b1"}} {
		_, err = process(c.consumer, inboxMsg(c.id, "p", t0))
		require.ErrorIs(t, err, core.ErrBeyondRetention, "%s of the dropped partition", c.id)
	}
	require.Equal(t, 1, effects, "only a-new applied")

	// The operator's prune drops partitions too, and audits how many records of its consumer,
	// even through a store built without InboxPartitioning (as `outboxkit inbox prune` builds it).
	cli, err := New(d.pool, &Options{Schema: d.schema})
	require.NoError(t, err)
	op, err := core.NewOperator(cli, nil)
	require.NoError(t, err)
	n, err = op.PruneInbox(ctx, "c", horizon, 0, core.AuditEntry{Actor: "t", Command: "inbox prune"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, partitions()[older.name])
	log, err := op.AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, log, 1)
	require.EqualValues(t, 1, log[0].Rows)
	require.True(t, partitions()[r.at(now).name], "the current partition stays")
}

// TestInboxPartitionedKeyLock: two transactions recording one key on a partitioned inbox
// (whose primary key holds processed_at, so the index alone would take the key twice) do not
// both insert it: the second waits for the first, as on a plain inbox's unique index, and
// then finds its record.
func TestInboxPartitionedKeyLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: &Partitioning{}})
	rec := driver.InboxRecord{Consumer: "c", EventID: "k", Digest: [32]byte{1}, Outcome: core.Applied, OccurredAt: time.Now()}
	inserted := make(chan bool, 1)
	errc := make(chan error, 1)
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, ok, err := s.InsertRecord(ctx, tx, rec)
		if err != nil || !ok {
			return errors.Join(err, errors.New("first insert: not inserted"))
		}
		go func() {
			errc <- s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				second := rec
				second.Digest = [32]byte{2}
				ex, ok, err := s.InsertRecord(ctx, tx, second)
				if err == nil && !ok && ex.Digest != rec.Digest {
					err = errors.New("the second insert found another record than the first's")
				}
				inserted <- ok
				return err
			})
		}()
		select {
		case ok := <-inserted:
			return errors.Join(errors.New("the second transaction did not wait for the first"), map[bool]error{true: errors.New("and inserted the key again")}[ok])
		case <-time.After(500 * time.Millisecond):
		}
		return nil
	})
	require.NoError(t, err)
	require.False(t, <-inserted, "the second transaction inserted the key the first committed")
	require.NoError(t, <-errc)
	var n int
	require.NoError(t, queryRow(ctx, s.db, `SELECT count(*) FROM `+s.n.inbox+` WHERE event_id = 'k'`, nil, &n))
	require.Equal(t, 1, n)
}

// TestInboxPartitionBusy: a prune beside an inbox transaction that holds the inbox longer than
// the lock timeout completes (the prune-beside-delivery rule: no delivery in progress makes a
// prune fail), leaves the partition, and a later prune drops it.
func TestInboxPartitionBusy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: &Partitioning{Interval: time.Hour, Ahead: 1}})
	r := s.inboxParts(t)
	var now time.Time
	require.NoError(t, queryRow(ctx, s.db, s.q.now, nil, &now))
	old := r.at(now.Add(-2 * time.Hour))
	require.NoError(t, s.createPartition(ctx, s.db, old))
	t0 := now.Add(-24 * time.Hour)
	seedInbox(t, s, "c", old.lo, t0, "m")
	in, err := core.NewInbox(ctx, driver.InboxStore[pgx.Tx](s), nil)
	require.NoError(t, err)

	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // a failed check below must not leave the delivery holding the inbox
	held := make(chan error, 1)
	go func() {
		_, err := in.Process(ctx, "c", inboxMsg("held", "p", now), func(context.Context, pgx.Tx, core.InboxMessage) error {
			close(entered)
			<-release
			return nil
		})
		held <- err
	}()
	<-entered
	start := time.Now()
	n, err := in.Prune(ctx, "c", t0.Add(time.Hour), 0)
	require.NoError(t, err, "a prune beside a delivery in progress")
	require.Zero(t, n)
	require.GreaterOrEqual(t, time.Since(start), 4*time.Second, "it waited for the lock timeout")
	unblock()
	require.NoError(t, <-held)
	parts, err := s.listPartitions(ctx, s.db, r)
	require.NoError(t, err)
	require.Equal(t, old.name, parts[0].name, "the busy partition is kept")
	n, err = in.Prune(ctx, "c", t0.Add(time.Hour), 0)
	require.NoError(t, err)
	require.Equal(t, 1, n, "a later prune drops it")
	_, err = in.Process(ctx, "c", inboxMsg("m", "p", t0), func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
	require.ErrorIs(t, err, core.ErrBeyondRetention)
}

// TestInboxPartitionedLaterTransaction: a record committed by a transaction that began after
// this one (so its processed_at is later than this transaction's now()) is still found: a
// look-up that skipped the partitions after this transaction's start would miss it (shown
// with such a look-up), and would apply a redelivery twice.
func TestInboxPartitionedLaterTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: &Partitioning{}})
	rec := driver.InboxRecord{Consumer: "c", EventID: "k", Digest: [32]byte{1}, Outcome: core.Applied, OccurredAt: time.Now()}
	err := s.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		time.Sleep(20 * time.Millisecond)
		if err := s.InTx(ctx, func(ctx context.Context, later pgx.Tx) error {
			_, _, err := s.InsertRecord(ctx, later, rec)
			return err
		}); err != nil {
			return err
		}
		var mine, theirs time.Time
		if err := tx.QueryRow(ctx, `SELECT now(), (SELECT processed_at FROM `+s.n.inbox+` WHERE event_id = 'k')`).Scan(&mine, &theirs); err != nil {
			return err
		}
		require.True(t, theirs.After(mine), "the record's processed_at %v is after this transaction's start %v", theirs, mine)
		ex, inserted, err := s.InsertRecord(ctx, tx, rec)
		require.NoError(t, err)
		require.False(t, inserted, "the record of a later transaction was not found")
		require.Equal(t, rec.Digest, ex.Digest)
		return nil
	})
	require.NoError(t, err)
}

// TestInboxLookupPlan: the look-up of a batch's records (InboxGetMany) probes the primary key
// once per key in its generic plan (the one a prepared statement keeps after five runs), on a
// plain and on a partitioned inbox whose records were never analysed: never a plan that reads
// every record of the consumer at each call.
func TestInboxLookupPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, part := range map[string]*Partitioning{"plain": nil, "partitioned": {}} {
		s, d := migratedStore(t, dbOptions{}, &Options{InboxPartitioning: part})
		_, err := d.pool.Exec(ctx, `INSERT INTO `+s.n.inbox+` (consumer, event_id, digest, outcome, occurred_at)
			SELECT 'c', 'evt-' || g, sha256(g::text::bytea), 1, now() FROM generate_series(1, 20000) AS g`)
		require.NoError(t, err)
		conn, err := d.pool.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "PREPARE lookup(text, text, text[], text[]) AS "+s.q.inboxGetMany)
		require.NoError(t, err)
		const run = `EXECUTE lookup('c', '', '{"", ""}', '{evt-1, x}')`
		for range 6 {
			_, err = conn.Exec(ctx, run)
			require.NoError(t, err)
		}
		var plan []string
		rows, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) "+run)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		conn.Release()
		text := strings.Join(plan, "\n")
		require.NotContains(t, text, "Hash", "%s: %s", name, text)
		require.Contains(t, text, "event_id = k.event_id", "%s: every key is an index condition\n%s", name, text)
	}
}
