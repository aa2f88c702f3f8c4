package core_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

type cdcStopBundle struct {
	store *memory.Store
	ob    *core.Outbox[*memory.Tx]
	sink  *gatedSink
}

// setupCDCStop returns an empty memory outbox and a sink that holds its gateAt-th send.
func setupCDCStop(t *testing.T, gateAt int) *cdcStopBundle {
	t.Helper()
	store, err := memory.New(&memory.Options{Lanes: 4, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	return &cdcStopBundle{store: store, ob: ob, sink: newGatedSink(gateAt)}
}

func (b *cdcStopBundle) relay(t *testing.T, owner string) *core.CDCRelay {
	t.Helper()
	r, err := core.NewCDCRelay(b.store, b.store.ChangeSource(), b.sink, core.StaticRouter{Default: "x"}, &core.CDCOptions{
		Owner: owner, BatchSize: 5, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	return r
}

// streamUntilGated starts r, waits until it streams, then writes events (one transaction each)
// until the gated send is in flight, and returns how many it wrote and Run's result channel.
func (b *cdcStopBundle) streamUntilGated(t *testing.T, ctx context.Context, r *core.CDCRelay) (int, chan error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Phase == core.PhaseStreaming }, "the relay streams")
	written := 0
	for {
		writeOne(t, b.store, b.ob, "k"+string(rune('a'+written%7)))
		written++
		select {
		case <-b.sink.entered:
			for range 20 { // more for the reader to read ahead while the send is held
				writeOne(t, b.store, b.ob, "k"+string(rune('a'+written%7)))
				written++
			}
			return written, done
		case <-time.After(time.Millisecond):
		}
	}
}

// drainRest runs a second CDC relay (resuming from the first one's checkpoint) until the outbox
// has nothing pending.
func (b *cdcStopBundle) drainRest(t *testing.T) {
	t.Helper()
	r := b.relay(t, "second")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st.Pending == 0 && r.Stats().Phase == core.PhaseStreaming
	}, "the second relay drains the outbox")
	cancel()
	require.NoError(t, <-done)
}

// A CDC relay stopped with Shutdown while a send is in flight lets it finish, marks it and
// checkpoints its position: the next relay, resuming from that checkpoint, resends nothing.
func TestCDCRelayShutdownResendsNothing(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 3)
	r := b.relay(t, "first")
	written, done := b.streamUntilGated(t, context.Background(), r)
	require.NoError(t, shutdownDuringSend(r, b.sink.release))
	require.NoError(t, <-done)

	sent, dups := b.sink.duplicates()
	require.Zero(t, dups)
	st := r.Stats()
	require.EqualValues(t, sent, st.Published, "every acknowledged event was marked")
	require.Less(t, sent, written, "the events read ahead were not sent")
	require.Equal(t, st.Position, st.Checkpoint, "the position of the last send is checkpointed")
	require.Equal(t, core.PhaseStopped, st.Phase)
	require.Zero(t, st.LanesHeld, "lanes released")
	require.NoError(t, r.Run(context.Background()), "Shutdown is final")

	b.drainRest(t)
	sent, dups = b.sink.duplicates()
	require.Equal(t, written, sent)
	require.Zero(t, dups, "a graceful stop resends nothing")
}

// Cancelling a CDC relay's Run stays a hard stop: the send in flight is not marked nor
// checkpointed, and the next relay resends it. (Shutdown avoids this; if it ever changed, Run's
// documentation must change with it.)
func TestCDCRelayCancelIsHardStop(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 3)
	r := b.relay(t, "first")
	ctx, cancel := context.WithCancel(context.Background())
	written, done := b.streamUntilGated(t, ctx, r)
	cancel()
	b.sink.release()
	require.NoError(t, <-done)

	b.drainRest(t)
	sent, dups := b.sink.duplicates()
	require.Equal(t, written, sent)
	require.Positive(t, dups, "the abandoned send is sent again")
}

// A CDC relay's Shutdown whose ctx ends first stops it hard and says so; a second session
// meanwhile is refused.
func TestCDCRelayShutdownTimeoutIsHardStop(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 1)
	r := b.relay(t, "first")
	_, done := b.streamUntilGated(t, context.Background(), r)
	require.ErrorIs(t, r.Run(context.Background()), core.ErrRelayRunning)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- r.Shutdown(ctx) }()
	time.Sleep(100 * time.Millisecond) // past Shutdown's deadline, the send is still held
	b.sink.release()
	require.ErrorIs(t, <-errc, context.DeadlineExceeded)
	require.NoError(t, <-done)
	require.Zero(t, r.Stats().Published, "the send was abandoned, not marked")
}

// hookedSettle is a memory store that runs before ahead of every Settle: an error it returns
// is the Settle's (a failing database); a before that blocks is a slow one.
type hookedSettle struct {
	*memory.Store
	before func(context.Context, driver.SettleParams) error
}

func (h *hookedSettle) Settle(ctx context.Context, p driver.SettleParams) error {
	if err := h.before(ctx, p); err != nil {
		return err
	}
	return h.Store.Settle(ctx, p)
}

// failIf is a hookedSettle.before that fails every Settle for which fails returns true.
func failIf(fails func(driver.SettleParams) bool) func(context.Context, driver.SettleParams) error {
	return func(_ context.Context, p driver.SettleParams) error {
		if fails(p) {
			return errors.New("database gone")
		}
		return nil
	}
}

// runStreaming runs r until cancel is called and waits until it streams; done receives Run's
// result.
func runStreaming(t *testing.T, r *core.CDCRelay) (cancel context.CancelFunc, done chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done = make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitFor(t, 30*time.Second, func() bool { return r.Stats().Phase == core.PhaseStreaming }, "the relay streams")
	return cancel, done
}

// A failed mark makes the CDC relay unhealthy at once, even when nothing more comes from the
// log, instead of leaving acknowledged records unmarked behind a relay that looks healthy; Run
// does not return (a failed mark is not one of its documented ends): the relay replaces its
// stream, and once the database takes marks again it resends from its checkpoint and marks
// everything. Health wraps ErrNotRunning before Run and after it returned.
func TestCDCRelayRecoversWhenAMarkFails(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 0)
	var fail atomic.Bool
	store := &hookedSettle{Store: b.store, before: failIf(func(driver.SettleParams) bool { return fail.Load() })}
	r, err := core.NewCDCRelay(store, b.store.ChangeSource(), b.sink, core.StaticRouter{Default: "x"},
		&core.CDCOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.ErrorIs(t, r.Health(), core.ErrNotRunning, "before Run")
	cancel, done := runStreaming(t, r)
	require.NoError(t, r.Health())
	fail.Store(true)
	writeOne(t, b.store, b.ob, "k")
	waitFor(t, 10*time.Second, func() bool {
		err := r.Health()
		return errors.Is(err, core.ErrLogUnavailable) && strings.Contains(err.Error(), "database gone")
	}, "Health reports the failed mark")
	require.Equal(t, core.PhaseReconnecting, r.Stats().Phase)
	require.False(t, r.Stats().LogDownSince.IsZero())
	select {
	case err := <-done:
		t.Fatalf("Run returned on a failed mark: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	fail.Store(false)
	waitFor(t, 30*time.Second, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st.Pending == 0 && r.Health() == nil
	}, "the relay marks the record once the database takes marks again")
	st := r.Stats()
	require.Positive(t, st.Restarts)
	require.Equal(t, core.PhaseStreaming, st.Phase)
	require.True(t, st.LogDownSince.IsZero())
	cancel()
	require.NoError(t, <-done)
	require.ErrorIs(t, r.Health(), core.ErrNotRunning, "after Run returned")
}

// A Backfill stopped before it finished never returns nil, however it was stopped: by
// cancelling its ctx (a hard stop), or by a Shutdown whose own ctx ended first. The checkpoint
// has not moved, so a caller that retries on error backfills again.
func TestCDCRelayBackfillStoppedIsAnError(t *testing.T) {
	t.Parallel()
	for _, stop := range []string{"cancel", "shutdown-timeout"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			b := setupCDCStop(t, 1)
			for i := range 12 { // more than one batch of 5
				writeOne(t, b.store, b.ob, "k"+string(rune('a'+i%3)))
			}
			r := b.relay(t, "first")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- r.Backfill(ctx) }()
			<-b.sink.entered // the first batch's send is held
			switch stop {
			case "cancel":
				cancel()
				b.sink.release()
				require.ErrorIs(t, <-done, context.Canceled)
			case "shutdown-timeout":
				sctx, scancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer scancel()
				errc := make(chan error, 1)
				go func() { errc <- r.Shutdown(sctx) }()
				time.Sleep(100 * time.Millisecond) // past Shutdown's deadline, the send is still held
				b.sink.release()
				require.ErrorIs(t, <-errc, context.DeadlineExceeded)
				require.ErrorIs(t, <-done, context.Canceled)
			}
			_, ok, err := b.store.LoadCheckpoint(context.Background())
			require.NoError(t, err)
			require.False(t, ok, "the checkpoint has not moved")
		})
	}
}

// A park that the database did not record (its settle failed) is not forgotten by the stream
// that replaces the failed one: the key's event is sent again and parked then, and later
// events of the key stay unpublished. (The relay kept the key as parked in memory once, and
// the new stream skipped its event for good: seen in the conformance case cdc/parked-key.)
func TestCDCRelayParkIsRetriedAfterAFailedSettle(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 0)
	var failed atomic.Bool // the first settle that parks a record fails
	store := &hookedSettle{Store: b.store, before: failIf(func(p driver.SettleParams) bool {
		return slices.ContainsFunc(p.Failed, func(f driver.Failure) bool { return f.Park }) && failed.CompareAndSwap(false, true)
	})}
	var sends atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		out := make([]error, len(msgs))
		for i, m := range msgs {
			if m.PartitionKey == "p" {
				sends.Add(1)
				out[i] = core.Permanent(errors.New("rejected"))
			}
		}
		return out
	})
	r, err := core.NewCDCRelay(store, b.store.ChangeSource(), sink, core.StaticRouter{Default: "x"},
		&core.CDCOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cancel, done := runStreaming(t, r)
	writeOne(t, b.store, b.ob, "p")
	waitFor(t, 30*time.Second, func() bool {
		st, err := b.store.Stats(context.Background())
		return err == nil && st.Parked == 1
	}, "the event is parked once the database records it")
	require.True(t, failed.Load(), "the first park failed")
	require.GreaterOrEqual(t, sends.Load(), int64(2), "the event was sent again by the new stream")
	require.Positive(t, r.Stats().Restarts)
	cancel()
	require.NoError(t, <-done)
}
