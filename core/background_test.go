package core_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// Start and Stop are Run and Shutdown in one call each: a Stop while a send is in flight
// settles that batch, and the next relay resends nothing.
func TestStartStopResendsNothing(t *testing.T) {
	t.Parallel()
	b := setupStop(t, 100, 3)
	r := b.relay(t, "first")
	running := core.Start(context.Background(), r)
	<-b.sink.entered // the third send is in flight
	require.Nil(t, running.Err())
	require.NoError(t, shutdownDuringSend(stopper{running}, b.sink.release))
	<-running.Done()
	require.NoError(t, running.Err())
	require.NoError(t, running.Stop(context.Background()), "Stop again")

	sent, dups := b.sink.duplicates()
	require.Zero(t, dups)
	require.EqualValues(t, sent, r.Stats().Published, "every acknowledged event was settled")
	require.ErrorIs(t, r.Health(), core.ErrNotRunning)

	b.drainRest(t)
	sent, dups = b.sink.duplicates()
	require.Equal(t, 100, sent)
	require.Zero(t, dups, "a graceful stop resends nothing")
}

// Stop returns Run's own error.
func TestStopReturnsRunError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	running := core.Start(context.Background(), failingRunner{boom})
	<-running.Done()
	require.ErrorIs(t, running.Err(), boom)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.ErrorIs(t, running.Stop(ctx), boom)
}

type failingRunner struct{ err error }

func (f failingRunner) Run(context.Context) error      { return f.err }
func (f failingRunner) Shutdown(context.Context) error { return nil }

// stopper is a Running seen as what shutdownDuringSend stops.
type stopper struct{ *core.Running }

func (s stopper) Shutdown(ctx context.Context) error { return s.Stop(ctx) }
