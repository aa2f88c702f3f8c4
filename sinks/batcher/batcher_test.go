package batcher_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/batcher"
)

func TestPlanRespectsLimitsAndGroupOrder(t *testing.T) {
	t.Parallel()
	var items []batcher.Item
	for i := 0; i < 25; i++ {
		items = append(items, batcher.Item{Group: fmt.Sprint("g", i%3), Dest: "q", Size: 100})
	}
	bs, out := batcher.Plan(items, batcher.Options{MaxEntries: 10, MaxBytes: 1 << 20})
	require.Len(t, bs, 3)
	for _, e := range out {
		require.NoError(t, e)
	}
	bs, _ = batcher.Plan(items, batcher.Options{MaxEntries: 10, MaxBytes: 350})
	require.Len(t, bs, 9) // 3 per request by size
	bs, _ = batcher.Plan(items, batcher.Options{MaxEntries: 10, MaxBytes: 1 << 20, OnePerGroup: true})
	require.Len(t, bs, 9)
	for _, b := range bs {
		seen := map[string]bool{}
		for _, i := range b.Items {
			require.False(t, seen[items[i].Group])
			seen[items[i].Group] = true
		}
	}
}

func TestPlanHoldsBackBehindPrefailedItem(t *testing.T) {
	t.Parallel()
	bad := core.Permanent(errors.New("too big"))
	items := []batcher.Item{
		{Group: "a", Dest: "q"}, {Group: "a", Dest: "q", Err: bad}, {Group: "a", Dest: "q"}, {Group: "b", Dest: "q"},
	}
	bs, out := batcher.Plan(items, batcher.Options{MaxEntries: 10, MaxBytes: 100})
	require.Len(t, bs, 1)
	require.Equal(t, []int{0, 3}, bs[0].Items)
	require.NoError(t, out[0])
	require.ErrorIs(t, out[1], bad)
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged)
}

// TestRunKeepsContractUnderRandomFailures drives Run with a sender that fails, drops and
// accepts entries at random and checks every invariant the sinks rely on.
func TestRunKeepsContractUnderRandomFailures(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 200; seed++ {
		rnd := rand.New(rand.NewPCG(seed, seed))
		n := 1 + rnd.IntN(120)
		groups := 1 + rnd.IntN(12)
		sticky := rnd.IntN(2) == 0 // each group to one destination: Plan's waves (with Concurrency > 1)
		items := make([]batcher.Item, n)
		msgs := make([]core.Message, n)
		for i := range items {
			gn := rnd.IntN(groups)
			g := fmt.Sprint("g", gn)
			dest := fmt.Sprint("q", rnd.IntN(3))
			if sticky {
				dest = fmt.Sprint("q", gn%3)
			}
			items[i] = batcher.Item{Group: g, Dest: dest, Size: 1 + rnd.IntN(300)}
			if rnd.IntN(60) == 0 {
				items[i].Err = core.Permanent(errors.New("bad"))
			}
			msgs[i] = core.Message{Record: driver.Record{Event: core.Event{ID: fmt.Sprint(i)}}, GroupID: g}
		}
		var (
			mu       sync.Mutex
			inflight = map[string]bool{}
			lastSent = map[string]int{}
			rmu      sync.Mutex
		)
		o := batcher.Options{MaxEntries: 1 + rnd.IntN(10), MaxBytes: 300 + rnd.IntN(1000), Concurrency: 1 + rnd.IntN(8), OnePerGroup: rnd.IntN(4) == 0}
		unordered := rnd.IntN(3) == 0 // then q0 keeps no order: its requests do not wait
		if unordered {
			o.Unordered = func(dest string) bool { return dest == "q0" }
		}
		out := batcher.Run(context.Background(), items, o, func(ctx context.Context, dest string, idx []int) []error {
			require.LessOrEqual(t, len(idx), o.MaxEntries)
			size := 0
			mu.Lock()
			gs := map[string]bool{}
			for _, i := range idx {
				size += items[i].Size
				require.Equal(t, dest, items[i].Dest)
				g := items[i].Group
				if !unordered {
					if !gs[g] {
						require.False(t, inflight[g], "two requests of group %s in flight", g)
					}
					if l, ok := lastSent[g]; ok {
						require.Greater(t, i, l, "group %s sent out of order", g)
					}
				}
				gs[g] = true
				inflight[g] = true
				lastSent[g] = i
				require.Nil(t, items[i].Err)
			}
			mu.Unlock()
			require.LessOrEqual(t, size, o.MaxBytes)
			res := make([]error, len(idx))
			rmu.Lock()
			for k := range res {
				switch rnd.IntN(10) {
				case 0:
					res[k] = errors.New("entry failed")
				case 1:
					res[k] = core.ErrNotAcknowledged
				}
			}
			rmu.Unlock()
			mu.Lock()
			for g := range gs {
				inflight[g] = false
			}
			mu.Unlock()
			return res
		})
		require.NoError(t, core.CheckOutcomes(msgs, out), "seed %d", seed)
		for i, it := range items {
			if it.Err != nil && !errors.Is(out[i], it.Err) {
				require.ErrorIs(t, out[i], core.ErrNotAcknowledged, "seed %d: a pre-failed item is its own error or held back", seed)
			}
		}
	}
}

func TestRunCancelledContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	items := []batcher.Item{{Group: "a", Dest: "q", Size: 1}, {Group: "b", Dest: "q", Size: 1}}
	called := false
	out := batcher.Run(ctx, items, batcher.Options{MaxEntries: 10, MaxBytes: 100, Concurrency: 2}, func(context.Context, string, []int) []error {
		called = true
		return nil
	})
	require.False(t, called)
	for _, e := range out {
		require.ErrorIs(t, e, context.Canceled)
		require.False(t, core.IsPermanent(e))
	}
}

// TestRunHoldsBackAcknowledgedAfterFailure: the broker takes entries 0 and 2 of group a and
// refuses entry 1. Taken as the broker answered, the outcomes break the sink contract; Run
// reports entry 2 not acknowledged.
func TestRunHoldsBackAcknowledgedAfterFailure(t *testing.T) {
	t.Parallel()
	items := []batcher.Item{{Group: "a", Dest: "q"}, {Group: "a", Dest: "q"}, {Group: "a", Dest: "q"}, {Group: "b", Dest: "q"}}
	msgs := make([]core.Message, len(items))
	for i := range msgs {
		msgs[i] = core.Message{Record: driver.Record{Event: core.Event{ID: fmt.Sprint(i)}}, GroupID: items[i].Group}
	}
	refused := errors.New("refused")
	answer := []error{nil, refused, nil, nil}
	require.Error(t, core.CheckOutcomes(msgs, answer), "the raw answer breaks the prefix rule")
	out := batcher.Run(context.Background(), items, batcher.Options{}, func(_ context.Context, dest string, idx []int) []error {
		require.Equal(t, "q", dest)
		require.Equal(t, []int{0, 1, 2, 3}, idx, "zero options: one request per destination")
		return answer
	})
	require.NoError(t, core.CheckOutcomes(msgs, out))
	require.NoError(t, out[0])
	require.ErrorIs(t, out[1], refused)
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged)
	require.NoError(t, out[3])
}

// TestRunHoldsBackLaterBatchesOfFailedGroup: once a group failed in one request, its messages
// in later requests of the same call are not sent.
func TestRunHoldsBackLaterBatchesOfFailedGroup(t *testing.T) {
	t.Parallel()
	items := []batcher.Item{{Group: "a", Dest: "q"}, {Group: "a", Dest: "q"}, {Group: "b", Dest: "q"}}
	var sent [][]int
	out := batcher.Run(context.Background(), items, batcher.Options{MaxEntries: 1}, func(_ context.Context, _ string, idx []int) []error {
		sent = append(sent, idx)
		if idx[0] == 0 {
			return []error{errors.New("boom")}
		}
		return []error{nil}
	})
	require.ElementsMatch(t, [][]int{{0}, {2}}, sent, "batch {1} of the failed group is not sent")
	require.Error(t, out[0])
	require.ErrorIs(t, out[1], core.ErrNotAcknowledged)
	require.NoError(t, out[2])
}

// TestRunUnorderedDestination: to a destination that keeps no order, the batches of one group
// are in flight at once; when the earlier one fails after the later one was acknowledged, the
// later one is reported not acknowledged (the per-group prefix holds across requests). A
// destination that keeps order sends the same batches one after the other.
func TestRunUnorderedDestination(t *testing.T) {
	t.Parallel()
	items := []batcher.Item{{Group: "a", Dest: "std"}, {Group: "a", Dest: "std"}, {Group: "a", Dest: "std"}}
	msgs := make([]core.Message, len(items))
	for i := range msgs {
		msgs[i] = core.Message{Record: driver.Record{Event: core.Event{ID: fmt.Sprint(i)}}, GroupID: "a"}
	}
	refused := errors.New("refused")
	o := batcher.Options{MaxEntries: 1, Concurrency: 3, Unordered: func(dest string) bool { return dest == "std" }}
	later := make(chan struct{}, 2)
	out := batcher.Run(context.Background(), items, o, func(_ context.Context, _ string, idx []int) []error {
		if idx[0] == 0 {
			// Fails only once both later messages were acknowledged: they were in flight
			// while this one was.
			<-later
			<-later
			return []error{refused}
		}
		later <- struct{}{}
		return []error{nil}
	})
	require.ErrorIs(t, out[0], refused)
	require.ErrorIs(t, out[1], core.ErrNotAcknowledged, "acknowledged behind a failure of its group")
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged)
	require.NoError(t, core.CheckOutcomes(msgs, out))

	var mu sync.Mutex
	inflight := 0
	o.Unordered = func(string) bool { return false }
	out = batcher.Run(context.Background(), items, o, func(_ context.Context, _ string, idx []int) []error {
		mu.Lock()
		inflight++
		require.Equal(t, 1, inflight, "an ordered destination has one request of a group in flight")
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		inflight--
		mu.Unlock()
		return []error{nil}
	})
	for _, err := range out {
		require.NoError(t, err)
	}
}

// TestPlanKeepsGroupsTogether: 500 items of 64 interleaved groups in requests of at most 100
// land whole-group in 6 batches that share no group, so Run sends them all at once; placing
// each item in the first batch with room made every batch share groups with the one before,
// and the requests went one after the other.
func TestPlanKeepsGroupsTogether(t *testing.T) {
	t.Parallel()
	var items []batcher.Item
	for i := range 500 {
		items = append(items, batcher.Item{Group: fmt.Sprint("g", i%64), Dest: "q", Size: 1})
	}
	o := batcher.Options{MaxEntries: 100, Concurrency: 8}
	bs, _ := batcher.Plan(items, o)
	require.Len(t, bs, 6)
	owner := map[string]int{}
	for j, b := range bs {
		require.LessOrEqual(t, len(b.Items), 100)
		require.True(t, slices.IsSorted(b.Items))
		for _, i := range b.Items {
			g := items[i].Group
			if k, ok := owner[g]; ok {
				require.Equal(t, k, j, "group %s in two batches", g)
			}
			owner[g] = j
		}
	}
	require.Len(t, owner, 64)

	var mu sync.Mutex
	inflight, most := 0, 0
	all := make(chan struct{})
	out := batcher.Run(context.Background(), items, o, func(_ context.Context, _ string, idx []int) []error {
		mu.Lock()
		inflight++
		most = max(most, inflight)
		if inflight == len(bs) {
			close(all)
		}
		mu.Unlock()
		select { // hold every request until all are in flight (or give up)
		case <-all:
		case <-time.After(5 * time.Second):
		}
		mu.Lock()
		inflight--
		mu.Unlock()
		return make([]error, len(idx))
	})
	for _, err := range out {
		require.NoError(t, err)
	}
	require.Equal(t, len(bs), most, "the batches share no group: all in flight at once")
}
