package logical

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// AwaitVisible waits for a transaction that the log streamed but new snapshots still show as
// running (the moment between its commit record and its end in the server's process array,
// which a test cannot hold open): here a transaction that is simply still open. The daemon's CDC
// scenario found the relay marking such records too early: two sent and counted events stayed
// unpublished (TestDaemonPostgresCDC covers the stream end to end).
func TestCDCAwaitVisibleWaitsForRunningTransaction(t *testing.T) {
	t.Parallel()
	f := newCDC(t, nil, nil)
	ctx := context.Background()
	open := func() (pgx.Tx, uint32) {
		tx, err := f.d.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		var xid int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid))
		return tx, uint32(xid)
	}
	st := &changeStream{src: f.src, closing: make(chan struct{})}
	tx, xid := open()
	st.noteStreamed(0x200, xid)
	_, later := open() // streamed after the position waited for: not waited for
	st.noteStreamed(0x300, later)

	done := make(chan error, 1)
	go func() { done <- st.AwaitVisible(ctx, "0/200") }()
	select {
	case err := <-done:
		t.Fatalf("AwaitVisible returned (%v) while the transaction runs", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitVisible still waits after the commit")
	}
	require.Equal(t, []streamed{{pos: 0x300, xid: later}}, st.unseen, "only the shown transaction is forgotten")
	require.NoError(t, st.AwaitVisible(ctx, "0/2FF"), "nothing streamed by then is unseen")

	// An ending context and a closing stream end the wait.
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, st.AwaitVisible(cctx, "0/300"), context.DeadlineExceeded)
	go func() { done <- st.AwaitVisible(ctx, "0/300") }()
	close(st.closing)
	select {
	case err := <-done:
		require.ErrorIs(t, err, errStreamClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitVisible ignores the stream's close")
	}
	require.ErrorContains(t, st.AwaitVisible(ctx, "nope"), "position")
}

func TestSnapshotShows(t *testing.T) {
	t.Parallel()
	snap, err := parseSnapshot("100:110:103,107")
	require.NoError(t, err)
	for xid, want := range map[uint32]bool{99: true, 100: true, 103: false, 105: true, 107: false, 109: true, 110: false, 200: false} {
		require.Equal(t, want, snap.shows(xid), "xid %d", xid)
	}
	empty, err := parseSnapshot("42:42:")
	require.NoError(t, err)
	require.True(t, empty.shows(41))
	require.False(t, empty.shows(42))

	// Around a wraparound of the 32-bit ID: epoch 3 began a few transactions ago.
	const epoch = uint64(3) << 32
	wrap := pgSnapshot{xmin: epoch - 10, xmax: epoch + 5, xip: map[uint64]struct{}{epoch - 2: {}}}
	require.Equal(t, epoch-20, wrap.widen(0xFFFFFFEC))
	require.Equal(t, epoch+4, wrap.widen(4))
	require.True(t, wrap.shows(0xFFFFFFEC))  // before xmin, in the previous epoch
	require.False(t, wrap.shows(0xFFFFFFFE)) // running
	require.True(t, wrap.shows(0xFFFFFFFF))
	require.True(t, wrap.shows(4))
	require.False(t, wrap.shows(5)) // at xmax
	// xmax just before a wraparound: a 32-bit ID just after it is in the next epoch, running.
	late := pgSnapshot{xmin: epoch - 10, xmax: epoch - 3}
	require.Equal(t, epoch+2, late.widen(2))
	require.False(t, late.shows(2))
	require.True(t, late.shows(0xFFFFFFF7))

	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "1:2:x", "1:2:3,"} {
		_, err := parseSnapshot(bad)
		require.Error(t, err, bad)
	}
}
