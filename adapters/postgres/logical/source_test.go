package logical

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// slotSem bounds the replication slots (and WAL senders) this package's tests hold at once: the
// test server has max_replication_slots = max_wal_senders = 10, shared by every parallel test.
var slotSem = make(chan struct{}, 3)

// cdcFixture is one test's outbox and change source (its own slot, dropped at cleanup).
type cdcFixture struct {
	s   *postgres.Store[pgx.Tx]
	d   *testDB
	src *ChangeSource
	ob  *core.Outbox[pgx.Tx]
}

func newCDC(t *testing.T, opts *postgres.Options, co *Options) *cdcFixture {
	t.Helper()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, opts)
	f := &cdcFixture{s: s, d: d}
	f.src = f.source(t, co)
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	f.ob = ob
	return f
}

// source returns a change source on the fixture's outbox with a fresh slot; the slot is dropped
// at cleanup, after the streams opened later are closed.
func (f *cdcFixture) source(t *testing.T, co *Options) *ChangeSource {
	t.Helper()
	var o Options
	if co != nil {
		o = *co
	}
	if o.Slot == "" {
		o.Slot = randomName("okt_slot_")
	}
	if o.StandbyTimeout == 0 {
		o.StandbyTimeout = 200 * time.Millisecond
	}
	if o.StallTimeout == 0 {
		// Well above a loaded server's keepalive answer and connection time: derived from the
		// short StandbyTimeout it would be 600 ms, which also bounds opening a replication
		// connection, and a test on a busy machine failed to connect within it.
		o.StallTimeout = 10 * time.Second
	}
	src, err := NewChangeSource(f.s, &o)
	require.NoError(t, err)
	holdSlot(t, src)
	return src
}

// holdSlot takes one of slotSem's places for the test and drops src's slot and publication at
// cleanup (registered first, so it runs after the streams opened later are closed).
func holdSlot(t *testing.T, src *ChangeSource) {
	t.Helper()
	select {
	case slotSem <- struct{}{}:
	case <-time.After(2 * time.Minute):
		t.Fatal("no replication slot became free")
	}
	t.Cleanup(func() {
		defer func() { <-slotSem }()
		ctx := context.Background()
		if err := src.DropSlot(ctx); err != nil {
			t.Errorf("drop slot %s: %v", src.Slot(), err)
		}
		_, _ = admin(t).Exec(ctx, `DROP PUBLICATION IF EXISTS `+quote(src.Publication()))
	})
}

// nilPool is a pool that is never used to connect.
func nilPool(t *testing.T) *pgxpool.Pool {
	p, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// write commits one transaction with the given events and returns them as written.
func (f *cdcFixture) write(t *testing.T, evs ...core.Event) []core.Event {
	t.Helper()
	var out []core.Event
	require.NoError(t, pgx.BeginFunc(context.Background(), f.d.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = f.ob.Write(context.Background(), tx, evs...)
		return err
	}))
	return out
}

func ev(id string) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: id, Type: "order.created", Payload: []byte("p-" + id)}
}

func start(t *testing.T, src *ChangeSource) (driver.ChangeStream, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, pos, err := src.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st, pos
}

func resume(t *testing.T, src *ChangeSource, pos string) driver.ChangeStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := src.Resume(ctx, pos)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	return st
}

// nextRecords returns the next n transactions that carry records, skipping position-only ones,
// and checks that positions never go backwards.
func nextRecords(t *testing.T, st driver.ChangeStream, after string, n int) []driver.ChangeTx {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last := lsn(t, after)
	var out []driver.ChangeTx
	for len(out) < n {
		tx, err := st.Next(ctx)
		require.NoError(t, err)
		p := lsn(t, tx.Position)
		require.GreaterOrEqual(t, p, last, "positions never go backwards")
		if len(tx.Records) > 0 {
			require.Greater(t, p, last, "a transaction's position is after the previous one")
			out = append(out, tx)
		}
		last = p
	}
	return out
}

// requireQuiet checks that no transaction with records arrives within d.
func requireQuiet(t *testing.T, st driver.ChangeStream, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for {
		tx, err := st.Next(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return
		}
		require.NoError(t, err)
		require.Empty(t, tx.Records, "unexpected transaction at %s", tx.Position)
	}
}

func lsn(t *testing.T, s string) pglogrepl.LSN {
	t.Helper()
	l, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err, s)
	return l
}

func ids(recs []driver.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

// listed returns every record of the outbox as Admin.List does.
func (f *cdcFixture) listed(t *testing.T) []driver.Record {
	t.Helper()
	recs, err := f.s.List(context.Background(), driver.ListParams{Limit: 1000})
	require.NoError(t, err)
	return recs
}

func TestCDCStream(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)

	full := core.Event{
		ID: "full", AggregateType: "order", AggregateID: "o-1", AggregateVersion: 7, Type: "order.paid",
		SchemaID: "order.v1", PartitionKey: "key-1", Destination: "orders",
		Payload: []byte{0, 1, 2, '\\', 'x', 0xfe, 0xff, '\'', '"'},
		Headers: map[string]string{"trace": "abc", "quote": `a "b" \ c`, "unicode": "é✓"},
		Tenant:  "t-1", CausationID: "cause", CorrelationID: "corr",
	}
	wrote := f.write(t, ev("a1"), full, ev("a3"))
	// A rolled-back transaction never appears.
	err := pgx.BeginFunc(ctx, f.d.Pool, func(tx pgx.Tx) error {
		if _, err := f.ob.Write(ctx, tx, ev("rolled-back")); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	require.Error(t, err)
	empty := f.write(t, core.Event{ID: "empty", AggregateType: "order", AggregateID: "e", Type: "order.created"})

	txs := nextRecords(t, st, pos, 2)
	require.Equal(t, []string{"a1", "full", "a3"}, ids(txs[0].Records), "statement order")
	require.Equal(t, []string{"empty"}, ids(txs[1].Records))

	listed := f.listed(t)
	require.Len(t, listed, 4)
	require.Equal(t, listed, append(append([]driver.Record{}, txs[0].Records...), txs[1].Records...),
		"stream records equal Admin.List's")
	require.Equal(t, wrote[1].Headers, txs[0].Records[1].Headers) // full's, with its transaction group
	require.Equal(t, full.Payload, txs[0].Records[1].Payload)
	require.Nil(t, txs[1].Records[0].Payload)
	require.Equal(t, empty[0].Headers, txs[1].Records[0].Headers) // only the transaction group
	require.NotZero(t, txs[0].Records[0].CreatedAt)
	requireQuiet(t, st, 500*time.Millisecond)

	id, err := f.src.Identity(ctx)
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^postgres:[0-9]+/`+f.src.Slot()+`/`+f.d.Schema+`\.outbox$`), id)
}

func TestCDCCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)

	first, err := f.d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	_, err = f.ob.Write(ctx, first, ev("inserted-first"))
	require.NoError(t, err)
	second, err := f.d.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = second.Rollback(ctx) }()
	_, err = f.ob.Write(ctx, second, ev("inserted-second-1"), ev("inserted-second-2"))
	require.NoError(t, err)
	require.NoError(t, second.Commit(ctx))
	require.NoError(t, first.Commit(ctx))

	txs := nextRecords(t, st, pos, 2)
	require.Equal(t, []string{"inserted-second-1", "inserted-second-2"}, ids(txs[0].Records), "commit order, not insert order")
	require.Equal(t, []string{"inserted-first"}, ids(txs[1].Records))
	require.Greater(t, txs[0].Records[0].Seq, txs[1].Records[0].Seq)
}

func TestCDCKeepalivePositions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)

	// WAL from another table only: the stream's position must still advance past it, so that a
	// checkpoint can let the slot release that WAL.
	_, err := f.d.Pool.Exec(ctx, `CREATE TABLE other (n int); INSERT INTO other SELECT generate_series(1, 100)`)
	require.NoError(t, err)
	var head string
	require.NoError(t, f.d.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&head))

	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	last := lsn(t, pos)
	for last < lsn(t, head) {
		tx, err := st.Next(ctx)
		require.NoError(t, err)
		require.Empty(t, tx.Records)
		p := lsn(t, tx.Position)
		require.Greater(t, p, last, "only advancing positions are reported")
		last = p
	}
	// Confirming a keepalive position is allowed, and the stream goes on.
	require.NoError(t, st.Confirm(ctx, last.String()))
	f.write(t, ev("after"))
	txs := nextRecords(t, st, last.String(), 1)
	require.Equal(t, []string{"after"}, ids(txs[0].Records))
}

func TestCDCResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)
	f.write(t, ev("t1"))
	f.write(t, ev("t2a"), ev("t2b"))
	f.write(t, ev("t3"))
	txs := nextRecords(t, st, pos, 3)
	require.NoError(t, st.Confirm(ctx, txs[0].Position))
	require.NoError(t, st.Close())

	_, err := f.src.Resume(ctx, "not-a-position")
	require.Error(t, err)
	require.NotErrorIs(t, err, core.ErrPositionLost)

	// Resuming from the first transaction's position gives exactly the following ones.
	st2 := resume(t, f.src, txs[0].Position)
	again := nextRecords(t, st2, txs[0].Position, 2)
	require.Equal(t, []string{"t2a", "t2b"}, ids(again[0].Records))
	require.Equal(t, []string{"t3"}, ids(again[1].Records))
	require.Equal(t, txs[1:], again, "same records and positions as the first time")
	f.write(t, ev("t4"))
	next := nextRecords(t, st2, again[1].Position, 1)
	require.Equal(t, []string{"t4"}, ids(next[0].Records), "nothing in between")
	require.NoError(t, st2.Confirm(ctx, next[0].Position))
	require.NoError(t, st2.Close())

	// A resumed stream ends at once with its position lost when the slot is re-created by Start
	// after the checkpoint: the transactions in between are not in the new slot.
	st3, _ := start(t, f.src)
	require.NoError(t, st3.Close())
	_, err = f.src.Resume(ctx, next[0].Position)
	requirePositionLost(t, f.src, err, next[0].Position)
}

func requirePositionLost(t *testing.T, src *ChangeSource, err error, checkpoint string) {
	t.Helper()
	require.ErrorIs(t, err, core.ErrPositionLost)
	var pl *core.PositionLostError
	require.ErrorAs(t, err, &pl)
	id, ierr := src.Identity(context.Background())
	require.NoError(t, ierr)
	require.Equal(t, id, pl.Source)
	require.Equal(t, checkpoint, pl.Checkpoint)
	require.NotEmpty(t, pl.Reason)
}

func TestCDCDroppedSlot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)
	f.write(t, ev("x"))
	txs := nextRecords(t, st, pos, 1)
	require.NoError(t, st.Confirm(ctx, txs[0].Position))
	require.NoError(t, st.Close())

	_, err := admin(t).Exec(ctx, `SELECT pg_drop_replication_slot($1)`, f.src.Slot())
	require.NoError(t, err)
	_, err = f.src.Resume(ctx, txs[0].Position)
	requirePositionLost(t, f.src, err, txs[0].Position)
	_, err = f.src.Retention(ctx, txs[0].Position)
	requirePositionLost(t, f.src, err, txs[0].Position)

	// A dropped publication loses the position too (the slot could not decode without it).
	st2, pos2 := start(t, f.src)
	require.NoError(t, st2.Close())
	_, err = admin(t).Exec(ctx, `DROP PUBLICATION `+quote(f.src.Publication()))
	require.NoError(t, err)
	_, err = f.src.Resume(ctx, pos2)
	requirePositionLost(t, f.src, err, pos2)
}

func TestCDCSlotActive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, &Options{SlotBusyTimeout: 300 * time.Millisecond})
	st, pos := start(t, f.src)

	// Another relay on the same slot fails at once (after SlotBusyTimeout), it does not hang.
	other, err := NewChangeSource(f.s, &Options{Slot: f.src.Slot(), SlotBusyTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	began := time.Now()
	_, err = other.Resume(ctx, pos)
	require.ErrorIs(t, err, postgres.ErrSlotActive)
	_, _, err = other.Start(ctx)
	require.ErrorIs(t, err, postgres.ErrSlotActive)
	require.Less(t, time.Since(began), 10*time.Second)

	// Once the stream is closed, the slot is free at once.
	require.NoError(t, st.Close())
	_, err = st.Next(ctx)
	require.Error(t, err)
	st2 := resume(t, other, pos)
	f.write(t, ev("y"))
	txs := nextRecords(t, st2, pos, 1)
	require.Equal(t, []string{"y"}, ids(txs[0].Records))
}

func TestCDCRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	st, pos := start(t, f.src)

	payload := make([]byte, 2048)
	_, _ = rand.Read(payload) // incompressible: the WAL holds every byte
	for i := range 5 {
		evs := make([]core.Event, 50)
		for j := range evs {
			evs[j] = core.Event{ID: fmt.Sprintf("r%d-%d", i, j), AggregateType: "a", AggregateID: "1", Type: "t", Payload: payload}
		}
		f.write(t, evs...)
	}
	// Retention measures up to pg_current_wal_lsn, the WAL written so far: with the test
	// cluster's synchronous_commit=off the WAL writer may not have written the last commits yet,
	// so wait for it (wal_writer_delay) instead of reading once.
	var ret core.Retention
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		ret, err = f.src.Retention(ctx, pos)
		require.NoError(t, err)
		if ret.RetainedBytes > int64(5*50*2048) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Greater(t, ret.RetainedBytes, int64(5*50*2048), "the unconfirmed slot retains the writes")
	require.EqualValues(t, -1, ret.HeadroomBytes)
	before := ret.RetainedBytes

	txs := nextRecords(t, st, pos, 5)
	last := txs[4].Position
	// restart_lsn moves at the next running-transactions record after the confirmed position
	// (a CHECKPOINT logs one) and confirmed_flush_lsn is updated asynchronously: poll.
	deadline := time.Now().Add(30 * time.Second)
	for {
		require.NoError(t, st.Confirm(ctx, last))
		ret, err = f.src.Retention(ctx, last)
		require.NoError(t, err)
		if ret.RetainedBytes < before/2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "retention stayed at %d bytes (before confirm: %d)", ret.RetainedBytes, before)
		_, err = admin(t).Exec(ctx, `CHECKPOINT`)
		require.NoError(t, err)
		nctx, cancel := context.WithTimeout(ctx, time.Second)
		tx, err := st.Next(nctx) // a keepalive past the checkpoint record
		cancel()
		if err == nil {
			require.Empty(t, tx.Records)
			last = tx.Position
		}
	}
	var confirmed string
	require.NoError(t, admin(t).QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		f.src.Slot()).Scan(&confirmed))
	require.LessOrEqual(t, lsn(t, confirmed), lsn(t, last), "the server never gets a position that was not confirmed")
}

func TestCDCNeverConfirmsUnconfirmed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A long StandbyTimeout: the periodic status update cannot be what carries the confirmation.
	f := newCDC(t, &postgres.Options{Lanes: 4}, &Options{StandbyTimeout: time.Minute})
	st, pos := start(t, f.src)
	f.write(t, ev("a"))
	f.write(t, ev("b"))
	txs := nextRecords(t, st, pos, 2)
	require.NoError(t, st.Confirm(ctx, txs[0].Position))
	// The confirmed position reaches the server without waiting for a keepalive, and the
	// received but unconfirmed transaction is not confirmed.
	require.Eventually(t, func() bool {
		var confirmed string
		err := admin(t).QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			f.src.Slot()).Scan(&confirmed)
		return err == nil && confirmed == txs[0].Position
	}, 5*time.Second, 10*time.Millisecond)
	requireQuiet(t, st, 700*time.Millisecond)
	var confirmed string
	require.NoError(t, admin(t).QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		f.src.Slot()).Scan(&confirmed))
	require.Equal(t, txs[0].Position, confirmed)
	require.NoError(t, st.Close())

	// So a restart from the slot's own position still delivers b.
	st2 := resume(t, f.src, txs[0].Position)
	again := nextRecords(t, st2, txs[0].Position, 1)
	require.Equal(t, []string{"b"}, ids(again[0].Records))
}

func TestCDCPartitioned(t *testing.T) {
	t.Parallel()
	f := newCDC(t, &postgres.Options{Lanes: 4, Partitioning: &postgres.Partitioning{}}, nil)
	st, pos := start(t, f.src)
	f.write(t, ev("p1"), ev("p2"))
	txs := nextRecords(t, st, pos, 1)
	require.Equal(t, f.listed(t), txs[0].Records)
	var viaRoot bool
	require.NoError(t, admin(t).QueryRow(context.Background(), `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`,
		f.src.Publication()).Scan(&viaRoot))
	require.True(t, viaRoot)
}

func TestCDCDatabaseSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := newTestDB(t, dbOptions{})
	s, err := postgres.NewSQL(d.SQLDB(t), &postgres.Options{Schema: d.Schema, Lanes: 2})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	pgs, err := postgres.New(d.Pool, &postgres.Options{Schema: d.Schema, Lanes: 2})
	require.NoError(t, err)
	src, err := NewChangeSource(s, &Options{Slot: randomName("okt_slot_"), StandbyTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	holdSlot(t, src)
	ob, err := core.NewOutbox(ctx, pgs, nil)
	require.NoError(t, err)
	f := &cdcFixture{s: pgs, d: d, src: src, ob: ob}

	st, pos := start(t, src)
	f.write(t, ev("s1"))
	txs := nextRecords(t, st, pos, 1)
	require.Equal(t, f.listed(t), txs[0].Records)
}

func TestChangeSourceOptions(t *testing.T) {
	t.Parallel()
	_, err := NewChangeSource[pgx.Tx](nil, nil)
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe, "a nil store")
	require.Equal(t, "store", oe.Field)
	s, err := postgres.New(nilPool(t), &postgres.Options{Schema: "Sales", Table: "outbox"})
	require.NoError(t, err)
	src, err := NewChangeSource(s, nil)
	require.NoError(t, err)
	require.Regexp(t, `^outboxkit_sales_outbox_[0-9a-f]{8}$`, src.Slot(), "upper-case names get a hash")
	require.Equal(t, src.Slot(), src.Publication())
	require.Equal(t, 10*time.Second, src.o.StandbyTimeout)
	require.Equal(t, 30*time.Second, src.o.StallTimeout, "3 × StandbyTimeout")
	src, err = NewChangeSource(s, &Options{StandbyTimeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, src.o.StallTimeout, "derived from StandbyTimeout")

	s, err = postgres.New(nilPool(t), &postgres.Options{Schema: "public", Table: "outbox"})
	require.NoError(t, err)
	src, err = NewChangeSource(s, &Options{})
	require.NoError(t, err)
	require.Equal(t, "outboxkit_public_outbox", src.Slot())

	long := defaultSlotName("s2345678901234567890123456789", "t2345678901234567890123456789")
	require.Len(t, long, 63)
	require.Regexp(t, slotRE, long)

	for _, c := range []struct {
		field string
		o     Options
	}{
		{"Slot", Options{Slot: "Upper"}},
		{"Slot", Options{Slot: "with-dash"}},
		{"Publication", Options{Publication: "bad name"}},
		{"StandbyTimeout", Options{StandbyTimeout: -time.Second}},
		{"SlotBusyTimeout", Options{SlotBusyTimeout: -time.Second}},
		{"StallTimeout", Options{StallTimeout: -time.Second}},
		{"ConnString", Options{ConnString: "postgres://[bad"}},
	} {
		_, err := NewChangeSource(s, &c.o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, c.field)
		require.Equal(t, c.field, oe.Field)
	}
}

func TestDecodeText(t *testing.T) {
	t.Parallel()
	for in, want := range map[string][]byte{
		`\x`:           {},
		`\x00ff5c`:     {0, 0xff, '\\'},
		`abc`:          []byte("abc"),
		`a\\b\000\377`: {'a', '\\', 'b', 0, 0xff},
	} {
		got, err := decodeBytea(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{`\xzz`, `a\9`, `a\12`} {
		_, err := decodeBytea(bad)
		require.Error(t, err, bad)
	}
	want := time.Date(2026, 11, 30, 6, 48, 51, 123456000, time.UTC)
	for _, in := range []string{"2026-11-30 06:48:51.123456+00", "2026-11-30 08:48:51.123456+02", "2026-11-30 12:18:51.123456+05:30"} {
		got, err := parseTimestamptz(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	got, err := parseTimestamptz("2026-11-30 06:48:51+00")
	require.NoError(t, err)
	require.Equal(t, want.Truncate(time.Second), got)
	_, err = parseTimestamptz("infinity")
	require.Error(t, err)
}

// An idle CDC relay checkpoints a position without outbox records (the server's keepalives,
// asked for every StandbyTimeout, 200 ms here) at most once per CheckpointInterval, and each
// checkpoint is itself WAL: one small row update (a few hundred bytes, 8 KiB more with a
// full-page image). The WAL of the test's schema is measured with pg_walinspect. Real events
// still move the checkpoint at once.
func TestCDCRelayIdleWritesLittleLog(t *testing.T) {
	t.Parallel()
	f := newCDC(t, &postgres.Options{Lanes: 4}, nil)
	var sent atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		sent.Add(int64(len(msgs)))
		return make([]error, len(msgs))
	})
	const interval = time.Second
	relay, err := core.NewCDCRelay(f.s, f.src, sink, core.StaticRouter{Default: "t"},
		&core.CDCOptions{CheckpointInterval: interval, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	f.write(t, ev("a"), ev("b"))
	require.Eventually(t, func() bool {
		st := relay.Stats()
		return st.Published == 2 && st.Phase == core.PhaseStreaming && st.Live && st.LanesHeld == 4
	}, 30*time.Second, 10*time.Millisecond)
	before := relay.Stats()
	start := pgtest.HoldWAL(t)
	const window = 3 * time.Second
	time.Sleep(window)
	after := relay.Stats()
	bytes := walBytesOf(t, f.d.Schema, start)
	cps := after.Checkpoints - before.Checkpoints
	t.Logf("idle %v: %d bytes of WAL for the relay's schema, %d checkpoints, %d positions read",
		window, bytes, cps, after.Transactions-before.Transactions)
	require.LessOrEqual(t, cps, uint64(window/interval)+1, "an idle relay checkpoints at most once per CheckpointInterval")
	// A checkpoint is a small row update, plus an 8 KiB full-page image once after each server
	// checkpoint.
	require.LessOrEqual(t, float64(bytes)/window.Seconds(), 4096.0, "WAL bytes per second of an idle relay")

	f.write(t, ev("c"))
	require.Eventually(t, func() bool {
		st := relay.Stats()
		return st.Published == 3 && st.Checkpoint != after.Checkpoint && st.Lag > 0
	}, 30*time.Second, 10*time.Millisecond, "the checkpoint follows real events")
	require.Equal(t, int64(3), sent.Load())
	// The measurement sees the schema's writes: the insert, its mark and the checkpoint.
	require.Greater(t, walBytesOf(t, f.d.Schema, start), bytes)
}

// walBytesOf sums, with pg_walinspect, the WAL records from start to the flushed end of the WAL
// that change a relation of schema, and the commit records of their transactions.
func walBytesOf(t *testing.T, schema, start string) int64 {
	t.Helper()
	ctx := t.Context()
	a := admin(t)
	walInspectOnce.Do(func() {
		_, walInspectErr = a.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`)
	})
	require.NoError(t, walInspectErr)
	var total int64
	require.NoError(t, a.QueryRow(ctx, `
		WITH rels AS (
			SELECT c.relfilenode::text AS node FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relfilenode <> 0
		), recs AS (
			SELECT * FROM pg_get_wal_records_info($2::pg_lsn, pg_current_wal_flush_lsn())
		), ours AS (
			SELECT r.* FROM recs AS r
			WHERE EXISTS (SELECT 1 FROM rels WHERE r.block_ref ~ ('rel \d+/\d+/' || rels.node || '( |$)'))
		)
		SELECT coalesce(sum(record_length), 0)::bigint + coalesce((SELECT sum(c.record_length) FROM recs AS c
			WHERE c.resource_manager = 'Transaction' AND c.xid <> '0' AND c.xid IN (SELECT xid FROM ours WHERE xid <> '0')), 0)::bigint
		FROM ours`, schema, start).Scan(&total))
	return total
}

var (
	walInspectOnce sync.Once
	walInspectErr  error
)
