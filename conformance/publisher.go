package conformance

import (
	"errors"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// publisherCases: publisher generations (AcquireGeneration) and what they fence.
func publisherCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "join-and-bump", run: func(e *env[TTx]) {
			p, err := e.a.Generation(e.ctx)
			e.must(err, "Generation")
			if p.Generation != 0 || p.Kind != "" {
				e.fatalf("a fresh outbox has publisher %+v, want generation 0 and no kind", p)
			}
			steps := []struct {
				kind string
				join bool
				want int64
			}{
				{driver.KindPolling, true, 1},  // first polling worker takes a generation
				{driver.KindPolling, true, 1},  // the second joins it
				{driver.KindCDC, false, 2},     // a CDC relay takes over
				{driver.KindCDC, false, 3},     // a second CDC relay fences the first
				{driver.KindCDC, true, 3},      // joining the same kind keeps it
				{driver.KindPolling, true, 4},  // polling takes over again: other kind, no join
				{driver.KindPolling, false, 5}, // without Join a polling worker takes over too
			}
			for i, s := range steps {
				got, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: s.kind, Holder: e.name("holder"), Join: s.join})
				e.must(err, "AcquireGeneration")
				if got.Generation != s.want || got.Kind != s.kind {
					e.fatalf("step %d: AcquireGeneration(%s, join=%v) = generation %d kind %q, want %d %q", i, s.kind, s.join, got.Generation, got.Kind, s.want, s.kind)
				}
				cur, err := e.a.Generation(e.ctx)
				e.must(err, "Generation")
				if cur.Generation != got.Generation || cur.Kind != got.Kind || cur.Holder != got.Holder {
					e.fatalf("step %d: Generation() = %+v, AcquireGeneration returned %+v", i, cur, got)
				}
			}
		}},
		{name: "stale-claim-and-renew", run: func(e *env[TTx]) {
			old, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "old", Join: true, Now: t0})
			e.must(err, "AcquireGeneration")
			held, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: old.Generation, Owner: "old", Max: 2, TTL: time.Minute, Now: t0})
			e.must(err, "ClaimLanes")
			if len(held) != 2 {
				e.fatalf("claimed %d lanes, want 2", len(held))
			}
			evs := e.write(event(keyForLane(e.lanes, held[0].Lane, 0), 0))
			cur, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "new", Now: t0})
			e.must(err, "AcquireGeneration")
			if cur.Generation <= old.Generation {
				e.fatalf("takeover generation %d is not above %d", cur.Generation, old.Generation)
			}
			// The stale generation can neither claim nor renew, and changes nothing trying.
			got, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: old.Generation, Owner: "old", Max: e.lanes, TTL: time.Minute, Now: t0})
			if !errors.Is(err, core.ErrFenced) || len(got) != 0 {
				e.fatalf("ClaimLanes with a stale generation = %d lanes, %v; want none and ErrFenced", len(got), err)
			}
			got, err = e.a.RenewLanes(e.ctx, driver.RenewParams{Generation: old.Generation, Leases: held, TTL: time.Hour, Now: t0.Add(time.Second)})
			if !errors.Is(err, core.ErrFenced) || len(got) != 0 {
				e.fatalf("RenewLanes with a stale generation = %d leases, %v; want none and ErrFenced", len(got), err)
			}
			// Leases held before the takeover stay valid until they end: the batch in flight may
			// still be settled (lanes never have two publishers).
			recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: held, Limit: 10, Now: t0})
			e.must(err, "Fetch")
			if len(recs) != 1 || recs[0].ID != evs[0].ID {
				e.fatalf("Fetch = %d records, want the 1 written", len(recs))
			}
			e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: held[:1], Published: []int64{recs[0].Seq}, Now: t0}), "Settle of the batch in flight")
			// The new generation gets every lane but the two still leased; once those leases
			// run out (the stale renew did not extend them), it gets them too.
			newOwner := e.name("new")
			got, err = e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: cur.Generation, Owner: newOwner, Max: e.lanes, TTL: time.Hour, Now: t0.Add(time.Second)})
			e.must(err, "ClaimLanes of the new generation")
			if len(got) != e.lanes-2 {
				e.fatalf("new generation claimed %d lanes, want %d", len(got), e.lanes-2)
			}
			got, err = e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: cur.Generation, Owner: newOwner, Max: e.lanes, TTL: time.Hour, Now: t0.Add(2 * time.Minute)})
			e.must(err, "ClaimLanes after the old leases expired")
			if lanes := sortedLanes(got); len(lanes) != 2 || lanes[0] != held[0].Lane || lanes[1] != held[1].Lane {
				e.fatalf("after expiry the new generation claimed lanes %v, want %v", lanes, sortedLanes(held))
			}
		}},
		{name: "concurrent-acquire", run: func(e *env[TTx]) {
			const n = 16
			gens := make([]int64, n)
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() {
					p, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: e.name("cdc")})
					gens[i], errs[i] = p.Generation, err
				})
			}
			wg.Wait()
			seen := map[int64]bool{}
			var top int64
			for i, g := range gens {
				e.must(errs[i], "AcquireGeneration")
				if seen[g] {
					e.fatalf("two concurrent takeovers got generation %d: %v", g, gens)
				}
				seen[g] = true
				top = max(top, g)
			}
			cur, err := e.a.Generation(e.ctx)
			e.must(err, "Generation")
			if cur.Generation != top || top != n {
				e.fatalf("after %d takeovers the generation is %d (highest returned %d), want %d", n, cur.Generation, top, n)
			}
		}},
		{name: "checkpoint-fenced", run: func(e *env[TTx]) {
			if !e.offers(CheckpointStore) { // no CDC support
				return
			}
			cs := capable[driver.CheckpointStore](e, CheckpointStore)
			if _, ok, err := cs.LoadCheckpoint(e.ctx); err != nil || ok {
				e.fatalf("LoadCheckpoint on a fresh outbox = ok %v, %v; want none", ok, err)
			}
			g1, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "a"})
			e.must(err, "AcquireGeneration")
			want := driver.Checkpoint{Source: "src-1", Position: "pos-1", Generation: g1.Generation}
			e.must(cs.SaveCheckpoint(e.ctx, want), "SaveCheckpoint")
			g2, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "b"})
			e.must(err, "AcquireGeneration")
			err = cs.SaveCheckpoint(e.ctx, driver.Checkpoint{Source: "src-1", Position: "pos-2", Generation: g1.Generation})
			if !errors.Is(err, core.ErrFenced) {
				e.fatalf("SaveCheckpoint of a fenced generation = %v, want ErrFenced", err)
			}
			got, ok, err := cs.LoadCheckpoint(e.ctx)
			e.must(err, "LoadCheckpoint")
			if !ok || got.Source != want.Source || got.Position != want.Position || got.Generation != want.Generation || got.UpdatedAt.IsZero() {
				e.fatalf("LoadCheckpoint = %+v (ok %v), want %+v with UpdatedAt set: a fenced save changed it", got, ok, want)
			}
			e.must(cs.SaveCheckpoint(e.ctx, driver.Checkpoint{Source: "src-1", Position: "pos-3", Generation: g2.Generation}), "SaveCheckpoint of the current generation")
			got, _, err = cs.LoadCheckpoint(e.ctx)
			e.must(err, "LoadCheckpoint")
			if got.Position != "pos-3" || got.Generation != g2.Generation {
				e.fatalf("LoadCheckpoint = %+v, want pos-3 of generation %d", got, g2.Generation)
			}
		}},
		{name: "polling-relay-fenced", run: func(e *env[TTx]) {
			sink := NewSink()
			o := relayOptions(e.name("relay"))
			rr := e.startRelay(e.a, sink, o)
			evs := e.write(event("k", 0), event("k", 1))
			e.waitFor("the polling relay to deliver", func() bool { return sink.AllAcked(ids(evs)) })
			if g := rr.r.Stats().Generation; g < 1 {
				e.fatalf("a running polling relay reports generation %d", g)
			}
			cur, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "takeover"})
			e.must(err, "AcquireGeneration")
			if err := returned(e, rr, "the polling relay to stop after a takeover"); !errors.Is(err, core.ErrFenced) {
				e.fatalf("the fenced polling relay's Run returned %v, want ErrFenced", err)
			}
			// It released its lanes on the way out: the new generation gets all of them at once.
			got, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: cur.Generation, Owner: "takeover", Max: e.lanes, TTL: time.Minute})
			e.must(err, "ClaimLanes")
			if len(got) != e.lanes {
				e.fatalf("after the fenced relay stopped, the new generation claimed %d of %d lanes", len(got), e.lanes)
			}
		}},
	}
}
