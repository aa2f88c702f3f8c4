package sqlite_test

import (
	"context"
	"database/sql"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// A Write whose context is cancelled at a random point must never end the caller's
// transaction behind its back: whatever Write returns, the caller's later statements still run
// in its transaction, and its Commit writes its domain rows together with either all of the
// events or none of them.
func TestWriteCancelledAtRandomPointsKeepsCallersTx(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.db.ExecContext(b.ctx, `CREATE TABLE domain (k TEXT NOT NULL)`)
	require.NoError(t, err)
	// Two statements (more rows than one INSERT may bind) inside a savepoint, and one statement.
	sizes := []int{3000, 1500}
	// Measure a Write so that the random cancellations fall before, inside and after it.
	start := time.Now()
	_, err = b.write(t, manyEvents("warm", sizes[0], 50)...)
	require.NoError(t, err)
	span := time.Since(start)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	// About 4 s of tries, and then on (up to 30 s) until both outcomes, a Write cancelled and one
	// that completed, were seen: under load a Write takes longer than the warm-up one measured.
	soft, hard := time.Now().Add(4*time.Second), time.Now().Add(30*time.Second)
	tries, cancelled := 0, 0
	for ; tries < 200 && time.Now().Before(hard) && (time.Now().Before(soft) || cancelled == 0 || cancelled == tries); tries++ {
		n := sizes[tries%len(sizes)]
		before := b.count(t)
		var domainBefore int
		require.NoError(t, b.db.QueryRowContext(b.ctx, `SELECT count(*) FROM domain`).Scan(&domainBefore))

		tx, err := b.db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(b.ctx, `INSERT INTO domain (k) VALUES ('before')`)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(b.ctx)
		delay := rng.Int64N(int64(span) + 1)
		if tries%4 == 3 {
			// Every fourth try early in the Write: under heavy load a Write's time is mostly
			// waiting for the CPU, and a cancellation late in the span finds it done (a fresh
			// clone once saw 13 tries, none cancelled).
			delay /= 10
		}
		timer := time.AfterFunc(time.Duration(delay), cancel)
		began := time.Now()
		_, werr := b.out.Write(ctx, tx, manyEvents("t"+time.Now().Format("150405.000000000"), n, 50)...)
		timer.Stop()
		span = max(span, time.Since(began)) // cancellations keep falling within a Write under load
		cancel()
		if werr != nil {
			cancelled++
			require.ErrorIs(t, werr, context.Canceled)
		}
		// The caller's transaction is intact: its next statement and its commit succeed.
		_, err = tx.ExecContext(b.ctx, `INSERT INTO domain (k) VALUES ('after')`)
		require.NoError(t, err, "try %d: the caller's transaction was ended by Write (%v)", tries, werr)
		require.NoError(t, tx.Commit(), "try %d: Write error %v", tries, werr)

		var domain int
		require.NoError(t, b.db.QueryRowContext(b.ctx, `SELECT count(*) FROM domain`).Scan(&domain))
		require.Equal(t, domainBefore+2, domain)
		if werr == nil {
			require.Equal(t, before+n, b.count(t))
		} else {
			require.Equal(t, before, b.count(t), "a failed Write wrote nothing")
		}
		// Every other try rolls back instead, which must also leave nothing behind.
	}
	t.Logf("%d tries, %d cancelled inside Write", tries, cancelled)
	require.Greater(t, cancelled, 0)
	require.Less(t, cancelled, tries)
}

func TestWriteRefusesForeignAndNilTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Another database, migrated alike: Write must refuse its transaction instead of writing to
	// a lane no relay of this Store leases.
	other := newTestStore(t, nil)
	tx, err := other.DB().BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.out.Write(b.ctx, tx, event("e1", "k"))
	require.ErrorIs(t, err, core.ErrInvalidTx)
	require.NoError(t, tx.Rollback())
	var n int
	require.NoError(t, other.DB().QueryRow(`SELECT count(*) FROM outbox`).Scan(&n))
	require.Equal(t, 0, n)

	_, err = b.out.Write(b.ctx, nil, event("e2", "k"))
	require.ErrorIs(t, err, core.ErrInvalidTx)

	tx, err = b.db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	_, err = b.out.Write(b.ctx, tx, event("e3", "k"))
	require.ErrorIs(t, err, core.ErrInvalidTx)
	require.Equal(t, 0, b.count(t))

	// The inbox methods refuse the same transactions (the Store's statements are prepared by
	// its first InTx), and write nothing in the other database.
	require.Empty(t, testkit.InboxTxCalls[*sql.Tx](b.ctx, b.store, nil), "nil")
	require.Empty(t, testkit.InboxTxCalls(b.ctx, b.store, tx), "ended")
	require.NoError(t, b.store.InTx(b.ctx, func(context.Context, *sql.Tx) error { return nil }))
	tx, err = other.DB().BeginTx(b.ctx, nil)
	require.NoError(t, err)
	require.Empty(t, testkit.InboxTxCalls(b.ctx, b.store, tx), "of another database")
	require.NoError(t, tx.Commit())
	require.NoError(t, other.DB().QueryRow(`SELECT count(*) FROM inbox`).Scan(&n))
	require.Equal(t, 0, n, "nothing written in the other database")
}

func TestNewRefusesReservedTableNames(t *testing.T) {
	t.Parallel()
	db, err := sqlite.OpenDB(context.Background(), filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	for _, o := range []sqlite.Options{{Table: "sqlite_outbox"}, {InboxTable: "SQLite_inbox"}} {
		_, err := sqlite.New(db, &o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%+v", o)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
}

// An unmigrated database fails every entry point with core.ErrSchemaMismatch.
func TestUnmigratedIsSchemaMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlite.New(db, &sqlite.Options{Logger: quiet})
	require.NoError(t, err)
	_, err = core.NewOutbox[*sql.Tx](ctx, s, nil)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	_, err = core.NewInbox[*sql.Tx](ctx, s, nil)
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	err = s.InTx(ctx, func(context.Context, *sql.Tx) error { return nil })
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
	require.Empty(t, testkit.UnmigratedCalls(ctx, s)) // before the transaction below: it holds the one writer
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	err = s.Insert(ctx, tx, []driver.Record{{Event: event("e", "k")}})
	require.ErrorIs(t, err, core.ErrSchemaMismatch)
}

// The probe that overflowed SQLite's microsecond times: a far-future OccurredAt is refused
// before anything is stored, so a Prune can never make the message apply a second time.
func TestInboxFarFutureOccurredAtRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	in, err := core.NewInbox[*sql.Tx](t.Context(), b.store, nil)
	require.NoError(t, err)
	applied := 0
	msg := core.InboxMessage{EventID: "e", OccurredAt: time.Date(294247, 1, 11, 0, 0, 0, 0, time.UTC)}
	for range 2 {
		_, err := in.Process(b.ctx, "c", msg, func(context.Context, *sql.Tx, core.InboxMessage) error { applied++; return nil })
		require.ErrorIs(t, err, core.ErrInvalidMessage)
		_, err = in.Prune(b.ctx, "c", time.Now(), 0)
		require.NoError(t, err)
	}
	require.Zero(t, applied)
}
