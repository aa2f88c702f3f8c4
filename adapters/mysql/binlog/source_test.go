package binlog_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// binlogMu orders the tests that read the binary log (read lock, in parallel) against the one
// that purges it (write lock): PURGE BINARY LOGS acts on the whole server.
var binlogMu sync.RWMutex

// cdcFixture is a migrated store on a fresh database with its DSN and an outbox writer.
type cdcFixture struct {
	t     *testing.T
	store *mysql.Store
	db    *sql.DB
	dsn   string
	ob    *core.Outbox[*sql.Tx]
}

func newCDCFixture(t *testing.T) *cdcFixture {
	t.Helper()
	db, name := newDB(t)
	s := storeOn(t, db, &mysql.Options{Lanes: 4})
	c := testConfig(t).Clone()
	c.DBName = name
	c.ParseTime = true
	ob, err := core.NewOutbox(t.Context(), driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	return &cdcFixture{t: t, store: s, db: db, dsn: c.FormatDSN(), ob: ob}
}

func (f *cdcFixture) source(mode binlog.GTIDMode) *binlog.ChangeSource {
	f.t.Helper()
	src, err := binlog.NewChangeSource(f.store, &binlog.Options{DSN: f.dsn, GTID: mode, Logger: quietLogger()})
	require.NoError(f.t, err)
	return src
}

func (f *cdcFixture) start(src *binlog.ChangeSource) (driver.ChangeStream, string) {
	f.t.Helper()
	st, pos, err := src.Start(f.t.Context())
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = st.Close() })
	return st, pos
}

func (f *cdcFixture) resume(src *binlog.ChangeSource, pos string) driver.ChangeStream {
	f.t.Helper()
	st, err := src.Resume(f.t.Context(), pos)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = st.Close() })
	return st
}

// write commits one transaction with evs (one Write per event: one statement each).
func (f *cdcFixture) write(evs ...core.Event) {
	f.t.Helper()
	require.NoError(f.t, f.store.InTx(f.t.Context(), func(ctx context.Context, tx *sql.Tx) error {
		for _, e := range evs {
			if _, err := f.ob.Write(ctx, tx, e); err != nil {
				return err
			}
		}
		return nil
	}))
}

func ev(id string) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: "a-" + id, Type: "order.created",
		Payload: []byte(`{"id":"` + id + `"}`)}
}

// ids lists the event ids of txs that carry records (empty transactions are skipped).
func ids(txs []driver.ChangeTx) [][]string {
	var out [][]string
	for _, tx := range txs {
		if len(tx.Records) == 0 {
			continue
		}
		var l []string
		for _, r := range tx.Records {
			l = append(l, r.ID)
		}
		out = append(out, l)
	}
	return out
}

// readRecords reads transactions until n records arrived (or the deadline passes).
func readRecords(t *testing.T, st driver.ChangeStream, n int) []driver.ChangeTx {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []driver.ChangeTx
	got := 0
	for got < n {
		tx, err := st.Next(ctx)
		require.NoError(t, err, "after %d of %d records", got, n)
		require.NotEmpty(t, tx.Position)
		out = append(out, tx)
		got += len(tx.Records)
	}
	require.Equal(t, n, got, "more records than expected")
	return out
}

// filePos returns the file and offset of a position's file part.
func filePos(t *testing.T, pos string) (string, int64) {
	t.Helper()
	i := strings.LastIndex(pos, "file:")
	require.GreaterOrEqual(t, i, 0, pos)
	f := pos[i+len("file:"):]
	j := strings.LastIndexByte(f, ':')
	off, err := strconv.ParseInt(f[j+1:], 10, 64)
	require.NoError(t, err)
	return f[:j], off
}

func posLess(t *testing.T, a, b string) bool {
	fa, oa := filePos(t, a)
	fb, ob := filePos(t, b)
	if fa != fb {
		return fa < fb // binlog.000001 < binlog.000002
	}
	return oa < ob
}

func headPosition(t *testing.T, db *sql.DB) string {
	t.Helper()
	var file, pos string
	var a, b sql.NullString
	require.NoError(t, db.QueryRow("SHOW MASTER STATUS").Scan(&file, &pos, &a, &b))
	return "file:" + file + ":" + pos
}

func TestChangeSourceStream(t *testing.T) {
	t.Parallel()
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	f := newCDCFixture(t)
	ctx := t.Context()
	src := f.source(binlog.GTIDAuto)

	id, err := src.Identity(ctx)
	require.NoError(t, err)
	var dbName string
	require.NoError(t, f.db.QueryRow("SELECT DATABASE()").Scan(&dbName))
	require.Regexp(t, `^mysql:[0-9]+/`+dbName+`\.outbox$`, id)

	st, pos0 := f.start(src)
	require.True(t, strings.HasPrefix(pos0, "gtid:"), "MariaDB always has GTIDs: %s", pos0)

	// A rolled back transaction never appears.
	err = f.store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := f.ob.Write(ctx, tx, ev("rolled-back")); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	require.Error(t, err)

	// One transaction, several statements (a multi-row one among them): statement order.
	// Its text ends in spaces and holds non-ASCII: the binary columns of migration 009 are decoded
	// byte for byte.
	full := core.Event{ID: "full", AggregateType: "order", AggregateID: "42 ", AggregateVersion: 7, Type: "order.paid",
		SchemaID: "order.v1", PartitionKey: "pk-42 é ", Destination: "orders", Payload: []byte{0, 1, 2, 0xff},
		Headers: map[string]string{"trace_id": "abc ", "x-tenant": "t1"}, Tenant: "t1 ", CausationID: "c1  ", CorrelationID: "r1 ✓"}
	require.NoError(t, f.store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := f.ob.Write(ctx, tx, ev("m1")); err != nil {
			return err
		}
		if _, err := f.ob.Write(ctx, tx, ev("m2"), ev("m3"), full); err != nil {
			return err
		}
		_, err := f.ob.Write(ctx, tx, core.Event{ID: "empty-payload", AggregateType: "order", AggregateID: "1", Type: "order.x"})
		return err
	}))

	// Two concurrent transactions committing in reverse insert order: commit order.
	txA, err := f.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = f.ob.Write(ctx, txA, ev("A"))
	require.NoError(t, err)
	txB, err := f.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = f.ob.Write(ctx, txB, ev("B"))
	require.NoError(t, err)
	require.NoError(t, txB.Commit())
	require.NoError(t, txA.Commit())

	txs := readRecords(t, st, 7)
	require.Equal(t, [][]string{{"m1", "m2", "m3", "full", "empty-payload"}, {"B"}, {"A"}}, ids(txs))

	// Records are what Admin.List returns, field for field.
	listed, err := f.store.List(ctx, driver.ListParams{State: driver.StateAll, Limit: 100})
	require.NoError(t, err)
	bySeq := map[int64]driver.Record{}
	for _, r := range listed {
		bySeq[r.Seq] = r
	}
	require.Len(t, listed, 7)
	last := pos0
	for _, tx := range txs {
		require.True(t, posLess(t, last, tx.Position), "positions advance: %s then %s", last, tx.Position)
		last = tx.Position
		for _, r := range tx.Records {
			require.Equal(t, bySeq[r.Seq], r)
		}
	}
	byID := map[string]driver.Record{}
	for _, tx := range txs {
		for _, r := range tx.Records {
			byID[r.ID] = r
		}
	}
	// Write added the transaction group headers; everything else is as given.
	got := byID["full"].Event
	require.Equal(t, "2", got.Headers[core.HeaderTxIndex])
	full.Headers = got.Headers
	require.Equal(t, full, got)
	require.Empty(t, byID["empty-payload"].Payload)
	require.False(t, byID["full"].CreatedAt.IsZero())

	// Relay marks (UPDATE) and deletes are not inserts: they do not appear; transactions
	// without outbox inserts still move the position on.
	_, err = f.db.Exec("UPDATE outbox SET published_at = UTC_TIMESTAMP(6) WHERE id = 'A'")
	require.NoError(t, err)
	_, err = f.db.Exec("DELETE FROM outbox WHERE id = 'B'")
	require.NoError(t, err)
	require.NoError(t, f.store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return effect(ctx, tx, "k") }))
	head := headPosition(t, f.db)
	for posLess(t, last, head) {
		tx, err := st.Next(ctx)
		require.NoError(t, err)
		require.Empty(t, tx.Records)
		require.True(t, posLess(t, last, tx.Position), "positions advance: %s then %s", last, tx.Position)
		last = tx.Position
	}
	f.write(ev("after"))
	require.Equal(t, [][]string{{"after"}}, ids(readRecords(t, st, 1)))
}

func TestChangeSourceResume(t *testing.T) {
	t.Parallel()
	for _, mode := range []binlog.GTIDMode{binlog.GTIDAuto, binlog.GTIDOff} {
		prefix := map[binlog.GTIDMode]string{binlog.GTIDAuto: "gtid:", binlog.GTIDOff: "file:"}[mode]
		t.Run(strings.TrimSuffix(prefix, ":"), func(t *testing.T) {
			t.Parallel()
			binlogMu.RLock()
			defer binlogMu.RUnlock()
			f := newCDCFixture(t)
			src := f.source(mode)
			st, pos0 := f.start(src)
			require.True(t, strings.HasPrefix(pos0, prefix), pos0)
			f.write(ev("t1"))
			f.write(ev("t2a"), ev("t2b"))
			f.write(ev("t3"))
			txs := readRecords(t, st, 4)
			require.Equal(t, [][]string{{"t1"}, {"t2a", "t2b"}, {"t3"}}, ids(txs))
			var after1 string
			for _, tx := range txs {
				require.True(t, strings.HasPrefix(tx.Position, prefix), tx.Position)
				if len(tx.Records) > 0 && tx.Records[0].ID == "t1" {
					after1 = tx.Position
				}
			}
			require.NoError(t, st.Close())
			t.Logf("start %s, after t1 %s", pos0, after1)

			// Resuming after t1 streams exactly t2 and t3 (and what follows), from a new source.
			st2 := f.resume(f.source(mode), after1)
			f.write(ev("t4"))
			txs2 := readRecords(t, st2, 4)
			require.Equal(t, [][]string{{"t2a", "t2b"}, {"t3"}, {"t4"}}, ids(txs2))
			last := after1
			for _, tx := range txs2 {
				require.True(t, strings.HasPrefix(tx.Position, prefix), tx.Position)
				require.True(t, posLess(t, last, tx.Position), "file positions advance after a resume: %s then %s", last, tx.Position)
				last = tx.Position
			}

			// From the start position: everything.
			st3 := f.resume(src, pos0)
			require.Equal(t, [][]string{{"t1"}, {"t2a", "t2b"}, {"t3"}, {"t4"}}, ids(readRecords(t, st3, 5)))
		})
	}
}

func TestChangeSourceRetention(t *testing.T) {
	t.Parallel()
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	f := newCDCFixture(t)
	ctx := t.Context()
	src := f.source(binlog.GTIDAuto)
	st, pos0 := f.start(src)
	r0, err := src.Retention(ctx, pos0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r0.RetainedBytes, int64(0))
	require.Positive(t, r0.HeadroomBytes, "the log holds at least its header before the position")

	payload := []byte(strings.Repeat("x", 1024))
	for i := range 100 {
		e := ev(fmt.Sprint("r", i))
		e.Payload = payload
		f.write(e)
	}
	r1, err := src.Retention(ctx, pos0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, r1.RetainedBytes, r0.RetainedBytes+100*1024, "100 KiB of payload is retained")
	require.Equal(t, r0.HeadroomBytes, r1.HeadroomBytes)

	txs := readRecords(t, st, 100)
	end := txs[len(txs)-1].Position
	r2, err := src.Retention(ctx, end)
	require.NoError(t, err)
	require.Less(t, r2.RetainedBytes, r1.RetainedBytes-100*1024)
	require.GreaterOrEqual(t, r2.HeadroomBytes, r1.HeadroomBytes+100*1024)

	_, err = src.Retention(ctx, "nonsense")
	require.Error(t, err)
}

// TestChangeSourcePositionLost purges the binary logs: it holds binlogMu exclusively.
// Not parallel: the purge must not hit a parallel test whose relay is down between two runs
// (the conformance suite's cdc area), and sequential tests run while every parallel one waits.
func TestChangeSourcePositionLost(t *testing.T) {
	f := newCDCFixture(t)
	ctx := t.Context()
	binlogMu.Lock()
	defer binlogMu.Unlock()

	gsrc, fsrc := f.source(binlog.GTIDAuto), f.source(binlog.GTIDOff)
	gst, _ := f.start(gsrc)
	fst, _ := f.start(fsrc)
	f.write(ev("p1"))
	gpos := readRecords(t, gst, 1)[0].Position
	fpos := readRecords(t, fst, 1)[0].Position
	require.True(t, strings.HasPrefix(gpos, "gtid:"))
	require.True(t, strings.HasPrefix(fpos, "file:"))
	require.NoError(t, gst.Close())
	require.NoError(t, fst.Close())
	f.write(ev("p2")) // the GTID state moves past the checkpoint before the purge
	file, _ := filePos(t, fpos)

	newest := purgeBinaryLogs(t)
	require.Greater(t, newest, file)

	ident, err := fsrc.Identity(ctx)
	require.NoError(t, err)
	check := func(err error, checkpoint string) {
		t.Helper()
		require.ErrorIs(t, err, core.ErrPositionLost)
		var pl *core.PositionLostError
		require.ErrorAs(t, err, &pl)
		require.Equal(t, ident, pl.Source)
		require.Equal(t, checkpoint, pl.Checkpoint)
		require.Contains(t, pl.Available, "file:"+newest+":4")
		require.NotEmpty(t, pl.Reason)
		t.Logf("lost: %v", err)
	}

	// File position: Resume itself reports it.
	_, err = fsrc.Resume(ctx, fpos)
	check(err, fpos)

	// GTID position: the server refuses the dump, reported by the first Next.
	st, err := gsrc.Resume(ctx, gpos)
	if err == nil {
		t.Cleanup(func() { _ = st.Close() })
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err = st.Next(tctx)
		check(err, gpos)
		_, err2 := st.Next(tctx)
		require.ErrorIs(t, err2, core.ErrPositionLost, "the error is sticky")
	} else {
		check(err, gpos)
	}
	r, err := gsrc.Retention(ctx, gpos)
	require.NoError(t, err)
	require.Zero(t, r.HeadroomBytes, "a lost position has no headroom")
}

func TestChangeSourceOptions(t *testing.T) {
	t.Parallel()
	_, err := binlog.NewChangeSource(nil, &binlog.Options{DSN: "u@tcp(127.0.0.1:1)/db"})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe, "a nil store")
	require.Equal(t, "store", oe.Field)
	s := newStore(t, nil)
	_, err = binlog.NewChangeSource(s, nil)
	require.ErrorAs(t, err, &oe, "no DSN here or in the Store's Options")
	require.Equal(t, "DSN", oe.Field)
	_, err = binlog.NewChangeSource(s, &binlog.Options{DSN: "u@udp(127.0.0.1:1)/db"})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "DSN", oe.Field)
	// The Store's DSN is the default; nil options take every default.
	db, _ := newDB(t)
	withDSN, err := mysql.New(t.Context(), db, &mysql.Options{DSN: "u@tcp(127.0.0.1:1)/db", Logger: quietLogger()})
	require.NoError(t, err)
	src, err := binlog.NewChangeSource(withDSN, nil)
	require.NoError(t, err)
	require.NotNil(t, src)
	_, err = mysql.New(t.Context(), db, &mysql.Options{DSN: "u@tcp(127.0.0.1:1/db", Logger: quietLogger()})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "DSN", oe.Field)
	_, err = binlog.NewChangeSource(s, &binlog.Options{DSN: "u@tcp(127.0.0.1:1)/db", Flavor: "oracle"})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Flavor", oe.Field)
	_, err = binlog.NewChangeSource(s, &binlog.Options{DSN: "u@tcp(127.0.0.1:1)/db", GTID: binlog.GTIDMode(9)})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "GTID", oe.Field)
}

// TestChangeSourceStartSnapshot: every row committed while Start runs is visible to a query
// begun after Start returned or streamed (what Backfill relies on); rows committed after the
// position but before the query may be both.
func TestChangeSourceStartSnapshot(t *testing.T) {
	t.Parallel()
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	f := newCDCFixture(t)
	ctx := t.Context()
	src := f.source(binlog.GTIDAuto)
	_, err := src.Identity(ctx) // inspect the server before the writers start
	require.NoError(t, err)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var written atomic.Int64
	errs := make([]error, 4)
	for w := range errs {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				err := f.store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
					_, err := f.ob.Write(ctx, tx, ev(fmt.Sprintf("w%d-%d", w, i)))
					return err
				})
				if err != nil {
					errs[w] = err
					return
				}
				written.Add(1)
			}
		})
	}
	for written.Load() < 50 {
		time.Sleep(time.Millisecond) // let the writers get going (not synchronisation)
	}
	st, _ := f.start(src)
	visible, err := f.store.List(ctx, driver.ListParams{State: driver.StateAll, Limit: 1_000_000})
	require.NoError(t, err)
	for n := written.Load(); written.Load() < n+50; {
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	all, err := f.store.List(ctx, driver.ListParams{State: driver.StateAll, Limit: 1_000_000})
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, r := range visible {
		seen[r.ID] = true
	}
	// Stream until every row was seen (a row neither visible nor streamed times out).
	missing := map[string]bool{}
	for _, r := range all {
		if !seen[r.ID] {
			missing[r.ID] = true
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	both, streamed := 0, 0
	for len(missing) > 0 {
		tx, err := st.Next(tctx)
		require.NoError(t, err, "rows neither visible after Start nor streamed: %v", missing)
		for _, r := range tx.Records {
			if seen[r.ID] {
				both++
			}
			seen[r.ID] = true
			delete(missing, r.ID)
			streamed++
		}
	}
	require.Positive(t, streamed-both, "rows were committed after Start's position")
	t.Logf("%d rows: %d visible after Start, %d streamed, %d both", len(all), len(visible), streamed, both)
}

// An idle CDC relay writes (almost) no binary log: the transactions that only save its
// checkpoint are not read back as positions to checkpoint again, and positions without outbox
// records (its own marks, other databases' transactions) are checkpointed at most once per
// CheckpointInterval. The binary log
// of the test's database is measured from the server's own SHOW BINLOG EVENTS. Real events still
// move the checkpoint.
func TestCDCRelayIdleWritesLittleLog(t *testing.T) {
	t.Parallel()
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	f := newCDCFixture(t)
	var name string
	require.NoError(t, f.db.QueryRow(`SELECT DATABASE()`).Scan(&name))
	var sent atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		sent.Add(int64(len(msgs)))
		return make([]error, len(msgs))
	})
	// Other tests' databases move the binary log too: their positions are checkpointed once
	// per interval. Alone on the server, the relay writes nothing at all.
	const interval = time.Second
	relay, err := core.NewCDCRelay(f.store, f.source(binlog.GTIDAuto), sink, core.StaticRouter{Default: "t"},
		&core.CDCOptions{CheckpointInterval: interval, Logger: quietLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	f.write(ev("a"), ev("b"))
	require.Eventually(t, func() bool {
		st := relay.Stats()
		return st.Published == 2 && st.Phase == core.PhaseStreaming && st.Live && st.LanesHeld == 4
	}, 30*time.Second, 10*time.Millisecond)
	time.Sleep(interval + interval/2) // the marks' position is checkpointed within an interval
	before := relay.Stats()
	file, pos := binlogHead(t, f.db)
	const window = 3 * time.Second
	time.Sleep(window)
	after := relay.Stats()
	bytes := binlogBytesOf(t, f.db, name, file, pos)
	t.Logf("idle %v: %d bytes of binary log for the relay's database, %d checkpoints, %d transactions read",
		window, bytes, after.Checkpoints-before.Checkpoints, after.Transactions-before.Transactions)
	require.LessOrEqual(t, float64(bytes)/window.Seconds(), 2048.0, "binary log bytes per second of an idle relay")
	require.LessOrEqual(t, after.Checkpoints-before.Checkpoints, uint64(window/interval)+1,
		"an idle relay checkpoints at most once per CheckpointInterval")

	f.write(ev("c"))
	require.Eventually(t, func() bool {
		st := relay.Stats()
		return st.Published == 3 && st.Checkpoint != after.Checkpoint
	}, 30*time.Second, 10*time.Millisecond, "the checkpoint follows real events")
	require.Equal(t, int64(3), sent.Load())
	// The measurement sees the database's writes: the insert, its mark and the checkpoint.
	require.Greater(t, binlogBytesOf(t, f.db, name, file, pos), int64(0))
}

// binlogHead is the end of the server's binary log.
func binlogHead(t *testing.T, db *sql.DB) (string, int64) {
	t.Helper()
	rows, err := db.Query(`SHOW MASTER STATUS`)
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	require.True(t, rows.Next(), "SHOW MASTER STATUS is empty")
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	require.NoError(t, rows.Scan(ptrs...))
	pos, err := strconv.ParseInt(vals[1].String, 10, 64)
	require.NoError(t, err)
	return vals[0].String, pos
}

// binlogBytesOf sums the binary log of the transactions, from file:pos on, that wrote a table of
// database name (a table map event names it).
func binlogBytesOf(t *testing.T, db *sql.DB, name, file string, pos int64) int64 {
	t.Helper()
	var files []string
	rows, err := db.Query(`SHOW BINARY LOGS`)
	require.NoError(t, err)
	cols, err := rows.Columns()
	require.NoError(t, err)
	for rows.Next() {
		dest := []any{new(string)}
		for range len(cols) - 1 {
			dest = append(dest, new(sql.RawBytes))
		}
		require.NoError(t, rows.Scan(dest...))
		if f := *dest[0].(*string); f >= file {
			files = append(files, f)
		}
	}
	require.NoError(t, rows.Err())
	rows.Close()
	var total int64
	for i, f := range files {
		q := fmt.Sprintf("SHOW BINLOG EVENTS IN '%s'", f)
		if i == 0 {
			q += fmt.Sprintf(" FROM %d", pos)
		}
		ev, err := db.Query(q)
		require.NoError(t, err)
		var start int64
		ours := false
		for ev.Next() {
			var logName, typ, info string
			var at, server, end int64
			require.NoError(t, ev.Scan(&logName, &at, &typ, &server, &end, &info))
			switch {
			case typ == "Gtid" || (typ == "Query" && info == "BEGIN"):
				start, ours = at, false
			case typ == "Table_map" && strings.Contains(info, "("+name+"."):
				ours = true
			case typ == "Xid" || (typ == "Query" && strings.HasPrefix(info, "COMMIT")):
				if ours {
					total += end - start
				}
				ours = false
			}
		}
		require.NoError(t, ev.Err())
		ev.Close()
	}
	return total
}
