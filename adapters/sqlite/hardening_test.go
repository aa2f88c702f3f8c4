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
