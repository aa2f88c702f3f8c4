package core_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testhook"
)

// droppingSource loses the records of one partition key from the log, as a broken CDC source
// would.
type droppingSource struct {
	driver.ChangeSource
	key string
}

func (d *droppingSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	st, pos, err := d.ChangeSource.Start(ctx)
	return &droppingStream{ChangeStream: st, key: d.key}, pos, err
}

type droppingStream struct {
	driver.ChangeStream
	key string
}

func (s *droppingStream) Next(ctx context.Context) (driver.ChangeTx, error) {
	tx, err := s.ChangeStream.Next(ctx)
	out := tx.Records[:0]
	for _, r := range tx.Records {
		if r.PartitionKey != s.key {
			out = append(out, r)
		}
	}
	tx.Records = out
	return tx, err
}

func writeOne(t *testing.T, s *memory.Store, ob *core.Outbox[*memory.Tx], key string) string {
	t.Helper()
	var id string
	require.NoError(t, s.InTx(context.Background(), func(ctx context.Context, tx *memory.Tx) error {
		evs, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: key, Type: "t", PartitionKey: key})
		if err == nil {
			id = evs[0].ID
		}
		return err
	}))
	return id
}

// The shadow report must catch a change source that misses events (OnlyActive) and an active
// relay that does not publish what the log has (OnlyCDC): the safety check of a cutover
// rehearsal, shown to fire when the property is broken.
func TestShadowReportCatchesDifferences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, s, nil)
	require.NoError(t, err)
	var offset atomic.Int64 // the shadow's clock runs ahead of the real one by this much
	opts := &core.ShadowOptions{Grace: time.Second, ClockMargin: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	testhook.SetClock(opts, func() time.Time { return time.Now().Add(time.Duration(offset.Load())) })
	sh, err := core.NewCDCShadow(&droppingSource{ChangeSource: s.ChangeSource(), key: "lost"}, s, opts)
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- sh.Run(rctx) }()
	require.Eventually(t, func() bool { _, err := sh.Report(ctx); return err == nil }, 5*time.Second, time.Millisecond)
	time.Sleep(5 * time.Millisecond) // past ClockMargin

	read := writeOne(t, s, ob, "read") // read by the shadow; nobody publishes it
	lost := writeOne(t, s, ob, "lost") // committed, never read by the shadow
	require.Eventually(t, func() bool { r, _ := sh.Report(ctx); return r.Seen == 1 }, 5*time.Second, time.Millisecond)

	rep, err := sh.Report(ctx)
	require.NoError(t, err)
	require.False(t, rep.Differences(), "within Grace nothing is a difference yet: %+v", rep)
	require.Equal(t, 2, rep.InFlight)

	offset.Store(int64(2 * time.Second)) // past Grace
	rep, err = sh.Report(ctx)
	require.NoError(t, err)
	require.True(t, rep.Differences())
	require.Equal(t, []string{read}, rep.OnlyCDC)
	require.Equal(t, []string{lost}, rep.OnlyActive)
	cancel()
	require.NoError(t, <-done)
}

// Run refuses a checkpoint of another change log: resuming a position of another server or slot
// would skip or repeat arbitrary events.
func TestCDCRelayRefusesAnotherSourcesCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	p, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC})
	require.NoError(t, err)
	require.NoError(t, s.SaveCheckpoint(ctx, driver.Checkpoint{Source: "postgres:other/slot/t", Position: "0/16B3748", Generation: p.Generation}))
	r, err := core.NewCDCRelay(s, s.ChangeSource(), core.SinkFunc(func(_ context.Context, m []core.Message) []error { return make([]error, len(m)) }),
		core.StaticRouter{Default: "q"}, &core.CDCOptions{LeaseTTL: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	err = r.Run(ctx)
	var lost *core.PositionLostError
	require.ErrorAs(t, err, &lost)
	require.True(t, errors.Is(err, core.ErrPositionLost))
	require.Equal(t, "0/16B3748", lost.Checkpoint)
}

// A position that carried no outbox record is checkpointed at most once per CheckpointInterval
// (each checkpoint is itself a write to the change log), the latest one still gets checkpointed
// when the log goes quiet, and a position after records is checkpointed at once.
func TestCDCRelayThrottlesEmptyCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, s, nil)
	require.NoError(t, err)
	const interval = 300 * time.Millisecond
	r, err := core.NewCDCRelay(s, s.ChangeSource(), core.SinkFunc(func(_ context.Context, m []core.Message) []error { return make([]error, len(m)) }),
		core.StaticRouter{Default: "q"}, &core.CDCOptions{CheckpointInterval: interval, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	require.Eventually(t, func() bool { return r.Stats().Phase == core.PhaseStreaming }, 5*time.Second, time.Millisecond)

	before := r.Stats()
	start := time.Now()
	for time.Since(start) < time.Second { // empty transactions, one every millisecond
		require.NoError(t, s.InTx(ctx, func(context.Context, *memory.Tx) error { return nil }))
		time.Sleep(time.Millisecond)
	}
	mid := r.Stats()
	require.Greater(t, mid.Transactions-before.Transactions, uint64(100))
	require.LessOrEqual(t, mid.Checkpoints-before.Checkpoints, uint64(time.Since(start)/interval)+1)
	require.Eventually(t, func() bool { st := r.Stats(); return st.Checkpoint == st.Position },
		3*interval, 10*time.Millisecond, "the last empty position is checkpointed once the log is quiet")

	quiet := r.Stats()
	writeOne(t, s, ob, "k")
	require.Eventually(t, func() bool {
		st := r.Stats()
		return st.Published == 1 && st.Checkpoint != quiet.Checkpoint
	}, interval/2, time.Millisecond, "a position after records is checkpointed at once")
	require.Positive(t, r.Stats().Lag)
}

// livingStore gives the memory store a Liveness whose signs of life the test ends, and
// renewals the test can make fail.
type livingStore struct {
	*memory.Store
	mu        sync.Mutex
	lives     []*fakeLife // every sign of life taken, in order
	failRenew atomic.Bool
}

func (l *livingStore) HoldLiveness(context.Context, string) (driver.Life, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := &fakeLife{}
	l.lives = append(l.lives, f)
	return f, nil
}

func (l *livingStore) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	if l.failRenew.Load() {
		return nil, errors.New("database unreachable")
	}
	return l.Store.RenewLanes(ctx, p)
}

func (l *livingStore) taken() []*fakeLife {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lives)
}

type fakeLife struct{ dead, released atomic.Bool }

func (f *fakeLife) Check(context.Context) error {
	if f.dead.Load() {
		return errors.New("session gone")
	}
	return nil
}

func (f *fakeLife) Release() error { f.released.Store(true); return nil }

// A CDC relay holds a sign of life while it runs and reports it in Stats. When its session
// breaks (the sign of life is lost) the relay goes on, relying on its leases, and takes a new
// sign of life after its next renewal. Leases that expired before a renewal, lanes no one else
// claimed, are claimed again; when another claimer takes its lanes it stops with
// ErrClaimLost. It releases its signs of life when it stops.
func TestCDCRelayKeepsGoingUnlessAnotherClaimerTakesItsLanes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := memory.New(&memory.Options{Lanes: 4, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	s := &livingStore{Store: m}
	var published atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		published.Add(int64(len(msgs)))
		return make([]error, len(msgs))
	})
	r, err := core.NewCDCRelay(s, m.ChangeSource(), sink, core.StaticRouter{Default: "q"},
		&core.CDCOptions{Owner: "a", LeaseTTL: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.Equal(t, core.PhaseStopped, r.Stats().Phase)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		st := r.Stats()
		return st.Phase == core.PhaseStreaming && st.Live && st.LanesHeld == 4 && st.Lanes == 4 && !st.LastResume.IsZero()
	}, 5*time.Second, time.Millisecond)

	first := s.taken()[0]
	first.dead.Store(true)
	require.Eventually(t, func() bool {
		return len(s.taken()) == 2 && first.released.Load() && r.Stats().Live
	}, 5*time.Second, time.Millisecond, "a new sign of life after the next renewal")
	select {
	case err := <-done:
		t.Fatalf("Run returned when the sign of life was lost: %v", err)
	default:
	}
	ob, err := core.NewOutbox[*memory.Tx](ctx, m, nil)
	require.NoError(t, err)
	writeOne(t, m, ob, "k")
	require.Eventually(t, func() bool { return published.Load() == 1 && r.Stats().Published == 1 },
		5*time.Second, time.Millisecond, "it goes on publishing")

	// Its leases expire before a renewal (the database did not answer) while no one else
	// claims the lanes: it claims them again and goes on.
	s.failRenew.Store(true)
	time.Sleep(600 * time.Millisecond) // two LeaseTTLs
	s.failRenew.Store(false)
	require.Eventually(t, func() bool { return r.Stats().LanesHeld == 4 && r.Stats().Published == 1 }, 5*time.Second, time.Millisecond)
	writeOne(t, m, ob, "k")
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("Run returned after its leases expired unclaimed: %v", err)
		default:
		}
		return r.Stats().Published == 2
	}, 5*time.Second, time.Millisecond, "it publishes after taking its expired lanes back")
	select {
	case err := <-done:
		t.Fatalf("Run returned after a late renewal: %v", err)
	default:
	}

	// Another claimer takes its lanes once their leases expired: it stops.
	s.taken()[1].dead.Store(true)
	s.failRenew.Store(true)
	var other []driver.Lease
	require.Eventually(t, func() bool {
		other, err = m.ClaimLanes(ctx, driver.ClaimParams{Generation: r.Stats().Generation, Owner: "b", Max: 4, TTL: time.Minute, Now: time.Now()})
		return err == nil && len(other) == 4
	}, 5*time.Second, 10*time.Millisecond, "b takes the expired lanes")
	s.failRenew.Store(false)
	select {
	case err := <-done:
		require.ErrorIs(t, err, core.ErrClaimLost)
	case <-time.After(5 * time.Second):
		t.Fatal("the relay went on after another claimer took its lanes")
	}
	st := r.Stats()
	require.Equal(t, core.PhaseStopped, st.Phase)
	require.False(t, st.Live)
	require.Zero(t, st.LanesHeld)
	for _, l := range s.taken() {
		require.True(t, l.released.Load())
	}
}

// waitingSource's streams are VisibleWaiters whose AwaitVisible holds until release is closed.
type waitingSource struct {
	driver.ChangeSource
	asked   chan string
	release chan struct{}
}

func (w *waitingSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	st, pos, err := w.ChangeSource.Start(ctx)
	return &waitingStream{ChangeStream: st, w: w}, pos, err
}

func (w *waitingSource) Resume(ctx context.Context, position string) (driver.ChangeStream, error) {
	st, err := w.ChangeSource.Resume(ctx, position)
	return &waitingStream{ChangeStream: st, w: w}, err
}

type waitingStream struct {
	driver.ChangeStream
	w *waitingSource
}

func (s *waitingStream) AwaitVisible(ctx context.Context, position string) error {
	select {
	case s.w.asked <- position:
	default:
	}
	select {
	case <-s.w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A stream that is a VisibleWaiter is asked before every mark of records it returned: the
// records are sent, but not marked until AwaitVisible returns.
func TestCDCRelayMarksOnlyAfterAwaitVisible(t *testing.T) {
	t.Parallel()
	b := setupCDCStop(t, 0)
	src := &waitingSource{ChangeSource: b.store.ChangeSource(), asked: make(chan string, 1), release: make(chan struct{})}
	r, err := core.NewCDCRelay(b.store, src, b.sink, core.StaticRouter{Default: "x"},
		&core.CDCOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	cancel, done := runStreaming(t, r)
	id := writeOne(t, b.store, b.ob, "k")
	select {
	case pos := <-src.asked:
		require.NotEmpty(t, pos)
	case <-time.After(10 * time.Second):
		t.Fatal("AwaitVisible was not called")
	}
	sent, _ := b.sink.duplicates()
	require.Equal(t, 1, sent, "the record was sent before the wait")
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, r.Stats().Published, "no mark while AwaitVisible waits")
	close(src.release)
	waitFor(t, 10*time.Second, func() bool { return r.Stats().Published == 1 }, "marked once AwaitVisible returned")
	recs, err := b.store.List(context.Background(), driver.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, id, recs[0].ID)
	require.False(t, recs[0].PublishedAt.IsZero())
	cancel()
	require.NoError(t, <-done)
}
