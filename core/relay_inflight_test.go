package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// overlapSink records how many Send calls run at once, whether two of them ever held messages of
// one group at the same time, and the order in which each group's events arrived.
type overlapSink struct {
	delay     time.Duration
	mu        sync.Mutex
	inFlight  int
	maxFlight int
	groups    map[string]bool // groups of the calls in flight
	overlap   string          // a group seen in two calls at once
	order     map[string][]int64
	sent      map[string]int
}

func newOverlapSink(delay time.Duration) *overlapSink {
	return &overlapSink{delay: delay, groups: map[string]bool{}, order: map[string][]int64{}, sent: map[string]int{}}
}

func (s *overlapSink) Send(_ context.Context, msgs []core.Message) []error {
	s.mu.Lock()
	s.inFlight++
	s.maxFlight = max(s.maxFlight, s.inFlight)
	mine := map[string]bool{}
	for _, m := range msgs {
		if s.groups[m.GroupID] && !mine[m.GroupID] {
			s.overlap = m.GroupID
		}
		mine[m.GroupID] = true
	}
	for g := range mine {
		s.groups[g] = true
	}
	s.mu.Unlock()
	time.Sleep(s.delay)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight--
	for g := range mine {
		delete(s.groups, g)
	}
	for _, m := range msgs {
		if s.sent[m.Record.ID] == 0 {
			s.order[m.GroupID] = append(s.order[m.GroupID], m.Record.AggregateVersion)
		}
		s.sent[m.Record.ID]++
	}
	return make([]error, len(msgs))
}

// inflightOutbox writes n events over keys keys (versions 1, 2, ... per key) to a fresh memory
// outbox of lanes lanes.
func inflightOutbox(t *testing.T, lanes, keys, n int) *memory.Store {
	t.Helper()
	ctx := context.Background()
	store, err := memory.New(&memory.Options{Lanes: lanes})
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "acct", AggregateID: strconv.Itoa(i % keys),
				AggregateVersion: int64(i/keys + 1), Type: "credited"})
			return err
		}))
	}
	return store
}

// A relay keeps up to InFlight batches in flight at once, over disjoint lanes: never two sends
// holding one partition key, and each key's events still arrive in order, each once. With
// InFlight 1 the sends never overlap (the check can tell the two apart).
func TestRelayInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		inFlight, wantMin int
	}{{1, 1}, {4, 2}} {
		t.Run(fmt.Sprintf("inflight=%d", tc.inFlight), func(t *testing.T) {
			t.Parallel()
			const keys, n = 40, 400
			store := inflightOutbox(t, 8, keys, n)
			sink := newOverlapSink(20 * time.Millisecond)
			r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
				PollInterval: 5 * time.Millisecond, BatchSize: 10, InFlight: tc.inFlight, Logger: slog.New(slog.DiscardHandler),
			})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			waitFor(t, 60*time.Second, func() bool { return r.Stats().Published == n }, "everything published")
			shut, cancelShut := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancelShut()
			require.NoError(t, r.Shutdown(shut))
			cancel()
			require.NoError(t, <-done)

			// The relay's timings: every batch was fetched, sent (20 ms each) and settled.
			st := r.Stats()
			require.GreaterOrEqual(t, st.Fetches, uint64(n/10))
			require.GreaterOrEqual(t, st.SendTime, time.Duration(st.Sends)*20*time.Millisecond)
			require.Positive(t, st.FetchTime)
			require.Positive(t, st.SettleTime)

			sink.mu.Lock()
			defer sink.mu.Unlock()
			require.Empty(t, sink.overlap, "two sends in flight held one partition key")
			require.LessOrEqual(t, sink.maxFlight, tc.inFlight, "sends in flight at once")
			require.GreaterOrEqual(t, sink.maxFlight, tc.wantMin, "sends in flight at once")
			require.Len(t, sink.sent, n)
			for id, c := range sink.sent {
				require.Equal(t, 1, c, "event %s sent %d times", id, c)
			}
			for g, vs := range sink.order {
				for i, v := range vs {
					require.Equal(t, int64(i+1), v, "key %s: versions arrived as %v", g, vs)
				}
			}
		})
	}
}

// Shutdown with several batches in flight settles all of them: a successor resends nothing.
func TestRelayInFlightShutdownResendsNothing(t *testing.T) {
	t.Parallel()
	const n = 300
	store := inflightOutbox(t, 8, 30, n)
	sink := newOverlapSink(30 * time.Millisecond)
	relay := func(owner string) *core.Relay {
		r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
			Owner: owner, PollInterval: 5 * time.Millisecond, BatchSize: 10, InFlight: 4, Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		return r
	}
	first := relay("first")
	done := make(chan error, 1)
	go func() { done <- first.Run(context.Background()) }()
	waitFor(t, 30*time.Second, func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.inFlight >= 2
	}, "two batches in flight")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, first.Shutdown(ctx))
	require.NoError(t, <-done)
	require.Less(t, first.Stats().Published, uint64(n), "the first relay stopped before the end")

	second := relay("second")
	go func() { done <- second.Run(context.Background()) }()
	waitFor(t, 60*time.Second, func() bool { return first.Stats().Published+second.Stats().Published == n }, "the rest published")
	require.NoError(t, second.Shutdown(ctx))
	require.NoError(t, <-done)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	require.Len(t, sink.sent, n)
	for id, c := range sink.sent {
		require.Equal(t, 1, c, "event %s sent %d times", id, c)
	}
}

func TestRelayInFlightBounds(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error { return make([]error, len(msgs)) })
	for _, v := range []int{-1, core.MaxInFlight + 1} {
		_, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{InFlight: v})
		var oe *core.OptionError
		require.True(t, errors.As(err, &oe), "InFlight %d: %v", v, err)
		require.Equal(t, "InFlight", oe.Field)
	}
	_, err = core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{InFlight: core.MaxInFlight})
	require.NoError(t, err)
}
