package conformance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func fencingCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "stale-settle", lanes: 2, run: testFencingStale[TTx]},
		{name: "expired", lanes: 1, run: testFencingExpired[TTx]},
		{name: "race", lanes: 40, run: testFencingRace[TTx]},
	}
}

// lostLanes checks that err is a claim loss naming exactly lanes.
func lostLanes(err error, lanes ...int) error {
	var lost *driver.LanesLostError
	if !errors.Is(err, core.ErrClaimLost) || !errors.As(err, &lost) {
		return fmt.Errorf("got %v, want a *driver.LanesLostError (errors.Is ErrClaimLost) naming lanes %v", err, lanes)
	}
	got := slices.Clone(lost.Lanes)
	slices.Sort(got)
	if !slices.Equal(got, lanes) {
		return fmt.Errorf("LanesLostError names lanes %v, want %v", lost.Lanes, lanes)
	}
	return nil
}

// unchanged fails when any record differs in its bookkeeping from before.
func (e *env[TTx]) unchanged(before map[string]driver.Record, what string) {
	e.t.Helper()
	after := e.byID()
	if len(after) != len(before) {
		e.fatalf("%s: %d records before, %d after", what, len(before), len(after))
	}
	for id, b := range before {
		a := after[id]
		if !a.PublishedAt.Equal(b.PublishedAt) || a.Attempts != b.Attempts || a.LastError != b.LastError ||
			!a.ParkedAt.Equal(b.ParkedAt) || !a.NextAttemptAt.Equal(b.NextAttemptAt) {
			e.fatalf("%s changed record %s:\nbefore %+v\nafter  %+v", what, id, b, a)
		}
	}
}

// testFencingStale: a worker whose lane was taken over cannot settle: ErrClaimLost naming the
// lost lane, and nothing changes, not even on its other, still held lane.
func testFencingStale[TTx any](e *env[TTx]) {
	k0, k1 := keyForLane(2, 0, 0), keyForLane(2, 1, 0)
	e.write(event(k0, 1), event(k0, 2), event(k0, 3), event(k1, 1), event(k1, 2))
	a := e.claim("a", 2, 10*time.Second, t0)
	if len(a) != 2 {
		e.fatalf("claimed %d lanes, want 2", len(a))
	}
	recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: a, Limit: 100, Now: t0})
	e.must(err, "Fetch")
	if len(recs) != 5 {
		e.fatalf("Fetch returned %d records, want 5", len(recs))
	}
	var seqs, lane0 []int64
	var fails []driver.Failure
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
		fails = append(fails, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "boom", Delay: time.Second, Park: r.Seq%2 == 0})
		if r.Lane == 0 {
			lane0 = append(lane0, r.Seq)
		}
	}
	// a keeps lane 0; b takes lane 1 over after it expired.
	kept := e.renew(a[:1], 10*time.Second, t0.Add(9*time.Second))
	if len(kept) != 1 {
		e.fatalf("renewing lane 0 failed")
	}
	b := e.claim("b", 2, 10*time.Second, t0.Add(11*time.Second))
	if fmt.Sprint(sortedLanes(b)) != "[1]" {
		e.fatalf("takeover claimed lanes %v, want [1]", sortedLanes(b))
	}
	stale := []driver.Lease{kept[0], a[1]}
	before := e.byID()
	now := t0.Add(12 * time.Second)
	for _, p := range []driver.SettleParams{
		{Leases: stale, Published: seqs, Now: now},
		{Leases: stale, Published: seqs, Delete: true, Now: now},
		{Leases: stale, Failed: fails, Now: now},
		{Leases: stale[1:], Published: seqs[:1], Failed: fails[1:], Now: now},
	} {
		err := e.a.Settle(e.ctx, p)
		want := []int{1}
		if err := lostLanes(err, want...); err != nil {
			e.fatalf("stale Settle (published %d, failed %d, delete %v): %v", len(p.Published), len(p.Failed), p.Delete, err)
		}
		e.unchanged(before, "a refused Settle")
	}
	// The held lane alone settles; records of the other lane are not its to change.
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: kept, Published: seqs, Now: now}), "Settle with the held lease")
	for id, r := range e.byID() {
		isLane0 := slices.Contains(lane0, r.Seq)
		switch {
		case isLane0 && !r.PublishedAt.Equal(now):
			e.fatalf("record %s of the held lane: PublishedAt %v, want %v", id, r.PublishedAt, now)
		case !isLane0 && !r.PublishedAt.IsZero():
			e.fatalf("record %s of lane %d was published through a lease of another lane", id, r.Lane)
		}
	}
}

// testFencingExpired: an expired lease cannot settle even with no takeover; Until == now is
// expired.
func testFencingExpired[TTx any](e *env[TTx]) {
	e.write(event("x", 1), event("x", 2))
	a := e.claim("a", 1, 10*time.Second, t0)
	recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: a, Limit: 10, Now: t0})
	e.must(err, "Fetch")
	if len(recs) != 2 {
		e.fatalf("Fetch returned %d records, want 2", len(recs))
	}
	before := e.byID()
	for _, at := range []time.Duration{10 * time.Second, 10*time.Second + time.Microsecond, time.Hour} {
		now := t0.Add(at)
		err := e.a.Settle(e.ctx, driver.SettleParams{Leases: a, Published: []int64{recs[0].Seq}, Now: now})
		if err := lostLanes(err, 0); err != nil {
			e.fatalf("Settle at t0+%v with a lease until t0+10s: %v", at, err)
		}
		err = e.a.Settle(e.ctx, driver.SettleParams{Leases: a, Failed: []driver.Failure{{Seq: recs[1].Seq, Lane: 0, Error: "x", Delay: time.Second}}, Now: now})
		if err := lostLanes(err, 0); err != nil {
			e.fatalf("Settle of a failure at t0+%v with a lease until t0+10s: %v", at, err)
		}
		e.unchanged(before, "a Settle with an expired lease")
	}
	now := t0.Add(5 * time.Second)
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: a, Published: []int64{recs[0].Seq},
		Failed: []driver.Failure{{Seq: recs[1].Seq, Lane: 0, Error: "x", Delay: time.Second}}, Now: now}), "Settle within the lease")
	after := e.byID()
	if p := after[recs[0].ID].PublishedAt; !p.Equal(now) {
		e.fatalf("PublishedAt %v, want %v", p, now)
	}
	if r := after[recs[1].ID]; r.Attempts != 1 || r.LastError != "x" || !r.NextAttemptAt.Equal(now.Add(time.Second)) || !r.ParkedAt.IsZero() {
		e.fatalf("failure recorded as %+v, want attempts 1, last error x, next attempt now+1s, not parked", r)
	}
}

// raceResult is one lane's outcome in one round of testFencingRace.
type raceResult struct {
	settleErr error
	takenBy   string
	sawBefore bool // the new owner's Fetch after its claim saw the record unchanged
	fetchErr  error
}

// testFencingRace: 1,000 races of a stale worker's Settle against a takeover of its lane.
// Per race: Settle succeeded <=> the record changed; and a Settle never succeeds after the
// takeover: when the new owner, after its claim, read the record unchanged, the old owner's
// Settle must have failed.
func testFencingRace[TTx any](e *env[TTx]) {
	const rounds = 25 // x 40 lanes = 1,000 races
	L := e.lanes
	keys := make([][]string, L) // lane -> one key per round
	for i := 0; ; i++ {
		k := fmt.Sprintf("race-%d", i)
		l := driver.LaneOf(k, L)
		if len(keys[l]) < rounds {
			keys[l] = append(keys[l], k)
		}
		done := true
		for _, ks := range keys {
			done = done && len(ks) == rounds
		}
		if done {
			break
		}
	}
	var lastSeq int64
	violations := 0
	for round := range rounds {
		tr := t0.Add(time.Duration(round) * time.Hour)
		evs := make([]core.Event, L)
		for lane := range L {
			evs[lane] = event(keys[lane][round], round)
		}
		e.write(evs...)
		page, err := e.a.List(e.ctx, driver.ListParams{AfterSeq: lastSeq, Limit: L + 1})
		e.must(err, "List")
		if len(page) != L {
			e.fatalf("round %d: listed %d new records, want %d", round, len(page), L)
		}
		lastSeq = page[len(page)-1].Seq
		rowOf := make([]driver.Record, L)
		for _, r := range page {
			rowOf[r.Lane] = r
		}
		a := e.claim("old", L, 10*time.Second, tr)
		if len(a) != L {
			e.fatalf("round %d: the old owner claimed %d lanes, want all %d", round, len(a), L)
		}
		res := make([]raceResult, L)
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		newLeases := []driver.Lease{}
		var claimErrs []error
		var racers []func()
		for i := range L {
			lease := a[i]
			row := rowOf[lease.Lane]
			publish := i%2 == 0
			racers = append(racers, func() {
				p := driver.SettleParams{Leases: []driver.Lease{lease}, Now: tr.Add(5 * time.Second)}
				if publish {
					p.Published = []int64{row.Seq}
				} else {
					p.Failed = []driver.Failure{{Seq: row.Seq, Lane: row.Lane, Error: "race", Delay: 0}}
				}
				err := e.a.Settle(e.ctx, p)
				mu.Lock()
				res[lease.Lane].settleErr = err
				mu.Unlock()
			})
			owner := fmt.Sprintf("new-%d", i)
			racers = append(racers, func() {
				now := tr.Add(11 * time.Second)
				ls, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Owner: owner, Max: 1, TTL: 10 * time.Second, Now: now})
				if err != nil {
					mu.Lock()
					claimErrs = append(claimErrs, err)
					mu.Unlock()
					return
				}
				if len(ls) == 0 {
					return
				}
				recs, ferr := e.a.Fetch(e.ctx, driver.FetchParams{Leases: ls, Limit: 10, Now: now})
				mu.Lock()
				defer mu.Unlock()
				newLeases = append(newLeases, ls...)
				r := &res[ls[0].Lane]
				r.takenBy, r.fetchErr = owner, ferr
				for _, rec := range recs {
					if rec.Seq == rowOf[ls[0].Lane].Seq && rec.Attempts == 0 {
						r.sawBefore = true
					}
				}
			})
		}
		// Start the racers in random order, each after a few random yields, so that every
		// interleaving shows up even with one CPU.
		rand.Shuffle(len(racers), func(i, j int) { racers[i], racers[j] = racers[j], racers[i] })
		for _, race := range racers {
			wg.Go(func() {
				<-start
				for range rand.IntN(8) {
					runtime.Gosched()
				}
				race()
			})
		}
		close(start)
		wg.Wait()
		if len(claimErrs) > 0 {
			e.fatalf("round %d: concurrent ClaimLanes: %v", round, errors.Join(claimErrs...))
		}
		after := e.byID()
		for lane, r := range res {
			row := after[rowOf[lane].ID]
			publish := slices.IndexFunc(a, func(l driver.Lease) bool { return l.Lane == lane })%2 == 0
			changed := !row.PublishedAt.IsZero() || row.Attempts != 0
			switch {
			case r.fetchErr != nil:
				e.fatalf("round %d lane %d: the new owner's Fetch: %v", round, lane, r.fetchErr)
			case r.settleErr != nil && lostLanes(r.settleErr, lane) != nil:
				e.fatalf("round %d lane %d: stale Settle: %v", round, lane, lostLanes(r.settleErr, lane))
			case r.settleErr != nil && r.takenBy == "":
				e.fatalf("round %d lane %d: Settle failed (%v) although nobody took the lane over", round, lane, r.settleErr)
			case r.settleErr == nil && !changed:
				e.fatalf("round %d lane %d: Settle succeeded but the record is unchanged: %+v", round, lane, row)
			case r.settleErr != nil && changed:
				e.fatalf("round %d lane %d: Settle failed (%v) but the record changed: %+v", round, lane, r.settleErr, row)
			case r.settleErr == nil && publish && !row.PublishedAt.Equal(tr.Add(5*time.Second)):
				e.fatalf("round %d lane %d: published at %v, want the settle's now %v", round, lane, row.PublishedAt, tr.Add(5*time.Second))
			case r.settleErr == nil && !publish && (row.Attempts != 1 || row.LastError != "race"):
				e.fatalf("round %d lane %d: failure recorded as attempts %d error %q", round, lane, row.Attempts, row.LastError)
			case r.settleErr == nil && r.sawBefore:
				violations++
				e.t.Errorf("round %d lane %d: the stale Settle succeeded AFTER %s took the lane over and read the record unchanged (unfenced Settle)", round, lane, r.takenBy)
				if violations >= 5 {
					e.fatalf("too many fencing violations")
				}
			}
		}
		// The new owners settle what is left, so that every round starts clean.
		var pub []int64
		for _, l := range newLeases {
			if row := after[rowOf[l.Lane].ID]; row.PublishedAt.IsZero() {
				pub = append(pub, row.Seq)
			}
		}
		e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: newLeases, Published: pub, Now: tr.Add(12 * time.Second)}), "the new owners' Settle")
	}
}
