package conformance

import (
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"math/rand/v2"
	"sync"
	"time"
)

func laneCases[TTx any]() []tcase[TTx] {
	cases := []tcase[TTx]{
		{name: "exclusive", lanes: 16, run: testLanesExclusive[TTx]},
		{name: "lowest-first", lanes: 8, run: testLanesLowestFirst[TTx]},
		{name: "fair-share", lanes: 8, run: testLanesFairShare[TTx]},
		{name: "expiry-takeover", lanes: 2, run: testLanesExpiry[TTx]},
		{name: "taken-over", lanes: 3, run: testLanesTakenOver[TTx]},
		{name: "generation", lanes: 1, run: testLanesGeneration[TTx]},
		{name: "release", lanes: 4, run: testLanesRelease[TTx]},
		{name: "renew", lanes: 1, run: testLanesRenew[TTx]},
		{name: "heartbeat", run: testLanesHeartbeat[TTx]},
	}
	return append(cases, resizeCases[TTx]()...)
}

func (e *env[TTx]) claim(owner string, max int, ttl time.Duration, now time.Time) []driver.Lease {
	e.t.Helper()
	ls, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Owner: owner, Max: max, TTL: ttl, Now: now})
	e.must(err, "ClaimLanes")
	for _, l := range ls {
		if l.Owner != owner || l.Lane < 0 || l.Lane >= e.lanes {
			e.fatalf("ClaimLanes(%s) returned a bad lease %+v", owner, l)
		}
		if !l.Until.Equal(now.Add(ttl)) {
			e.fatalf("ClaimLanes at %v with TTL %v returned Until %v, want now+TTL", now, ttl, l.Until)
		}
	}
	if len(ls) > max {
		e.fatalf("ClaimLanes(Max %d) returned %d leases", max, len(ls))
	}
	return ls
}

func (e *env[TTx]) renew(ls []driver.Lease, ttl time.Duration, now time.Time) []driver.Lease {
	e.t.Helper()
	out, err := e.a.RenewLanes(e.ctx, driver.RenewParams{Leases: ls, TTL: ttl, Now: now})
	e.must(err, "RenewLanes")
	return out
}

// testLanesExclusive: concurrent claimers get disjoint lanes, never more than L, and every
// hand-over raises the lane's generation. Rounds move the injected clock past every lease.
func testLanesExclusive[TTx any](e *env[TTx]) {
	const workers, rounds = 8, 15
	lastGen := make([]int64, e.lanes)
	for round := range rounds {
		now := t0.Add(time.Duration(round) * time.Hour)
		var (
			mu  sync.Mutex
			got = map[int][]string{}
			all []driver.Lease
			wg  sync.WaitGroup
		)
		start := make(chan struct{})
		errs := make(chan error, workers)
		for w := range workers {
			owner := fmt.Sprintf("w%d", w)
			max := 1 + rand.IntN(e.lanes)
			wg.Go(func() {
				<-start
				ls, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Owner: owner, Max: max, TTL: time.Minute, Now: now})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for _, l := range ls {
					got[l.Lane] = append(got[l.Lane], owner)
					all = append(all, l)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			e.fatalf("round %d: concurrent ClaimLanes: %v", round, err)
		}
		for lane, owners := range got {
			if len(owners) > 1 {
				e.fatalf("round %d: lane %d was handed to %d claimers at once: %v", round, lane, len(owners), owners)
			}
		}
		if len(all) > e.lanes {
			e.fatalf("round %d: %d leases handed out for %d lanes", round, len(all), e.lanes)
		}
		for _, l := range all {
			if l.Generation <= lastGen[l.Lane] {
				e.fatalf("round %d: lane %d handed over with generation %d, not above the previous %d", round, l.Lane, l.Generation, lastGen[l.Lane])
			}
			lastGen[l.Lane] = l.Generation
		}
	}
	// With every lease expired, one claimer asking for all lanes gets all of them.
	ls := e.claim("final", e.lanes, time.Minute, t0.Add(rounds*time.Hour))
	if len(ls) != e.lanes {
		e.fatalf("after every lease expired, ClaimLanes(Max %d) got %d lanes", e.lanes, len(ls))
	}
	if more := e.claim("other", e.lanes, time.Minute, t0.Add(rounds*time.Hour)); len(more) != 0 {
		e.fatalf("ClaimLanes handed out lanes %v that another owner holds", sortedLanes(more))
	}
}

// testLanesLowestFirst: ClaimLanes takes the lowest free lanes and at most Max.
func testLanesLowestFirst[TTx any](e *env[TTx]) {
	a := e.claim("a", 3, time.Minute, t0)
	if fmt.Sprint(sortedLanes(a)) != "[0 1 2]" {
		e.fatalf("first ClaimLanes(Max 3) got lanes %v, want [0 1 2]", sortedLanes(a))
	}
	b := e.claim("b", 2, time.Minute, t0)
	if fmt.Sprint(sortedLanes(b)) != "[3 4]" {
		e.fatalf("second ClaimLanes(Max 2) got lanes %v, want [3 4]", sortedLanes(b))
	}
	if z := e.claim("c", 0, time.Minute, t0); len(z) != 0 {
		e.fatalf("ClaimLanes(Max 0) got lanes %v", sortedLanes(z))
	}
}

// testLanesFairShare: several real relays split the lanes, each holding at most
// ceil(L/live), together all L; when one stops the others take its lanes over.
func testLanesFairShare[TTx any](e *env[TTx]) {
	sink := NewSink()
	rs := []*running{}
	for range 3 {
		rs = append(rs, e.startRelay(e.a, sink, nil))
	}
	balanced := func(rs []*running) func() bool {
		return func() bool {
			share := (e.lanes + len(rs) - 1) / len(rs)
			total := 0
			for _, r := range rs {
				n := r.r.Stats().Lanes
				if n > share {
					return false
				}
				total += n
			}
			return total == e.lanes
		}
	}
	e.waitFor("3 relays to hold all 8 lanes, at most 3 each", balanced(rs))
	e.stopRelay(rs[2])
	e.waitFor("2 relays to hold all 8 lanes, 4 each", balanced(rs[:2]))
}

// testLanesExpiry: an unexpired lease cannot be taken; an expired one can, with a higher
// generation, and the old holder can no longer renew it.
func testLanesExpiry[TTx any](e *env[TTx]) {
	a := e.claim("a", 2, time.Minute, t0)
	if len(a) != 2 {
		e.fatalf("claimed %d lanes, want 2", len(a))
	}
	if b := e.claim("b", 2, time.Minute, t0.Add(59*time.Second)); len(b) != 0 {
		e.fatalf("lanes %v were taken over before their lease expired", sortedLanes(b))
	}
	// Until == now is expired: a lease is held only while Until > now.
	b := e.claim("b", 2, time.Minute, t0.Add(time.Minute))
	if len(b) != 2 {
		e.fatalf("after expiry the new owner claimed %d lanes, want 2", len(b))
	}
	for i := range b {
		if b[i].Lane != a[i].Lane || b[i].Generation <= a[i].Generation {
			e.fatalf("takeover lease %+v does not supersede old lease %+v", b[i], a[i])
		}
	}
	if r := e.renew(a, time.Minute, t0.Add(time.Minute)); len(r) != 0 {
		e.fatalf("the old owner renewed lanes %v after they were taken over", sortedLanes(r))
	}
	if r := e.renew(b, time.Minute, t0.Add(time.Minute+time.Second)); len(r) != 2 {
		e.fatalf("the new owner renewed %d of its 2 lanes", len(r))
	}
}

// testLanesTakenOver: ClaimLanes marks TakenOver exactly the leases of lanes that still had an
// owner (expired), not those of free lanes (never claimed, or released).
func testLanesTakenOver[TTx any](e *env[TTx]) {
	check := func(step string, ls []driver.Lease, want map[int]bool) {
		e.t.Helper()
		got := map[int]bool{}
		for _, l := range ls {
			got[l.Lane] = l.TakenOver
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			e.fatalf("%s: ClaimLanes returned lanes with TakenOver %v, want %v", step, got, want)
		}
	}
	a := e.claim("a", 3, time.Minute, t0)
	check("fresh lanes", a, map[int]bool{0: false, 1: false, 2: false})
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{a[0]}), "ReleaseLanes")
	b := e.claim("b", 3, time.Minute, t0.Add(time.Second))
	check("a released lane", b, map[int]bool{0: false})
	// Every lease ran out: each lane is taken over from its last owner.
	c := e.claim("c", 3, time.Minute, t0.Add(2*time.Minute))
	check("expired leases", c, map[int]bool{0: true, 1: true, 2: true})
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{c[1]}), "ReleaseLanes")
	d := e.claim("d", 3, time.Minute, t0.Add(4*time.Minute))
	check("one released, two expired", d, map[int]bool{0: true, 1: false, 2: true})
	if r := e.renew(d, time.Minute, t0.Add(4*time.Minute+time.Second)); len(r) != 3 {
		e.fatalf("leases marked TakenOver were not renewable: %d of 3 renewed", len(r))
	}
}

// testLanesGeneration: the generation increases on every hand-over: release and re-claim,
// expiry takeover, and a re-claim by the same owner.
func testLanesGeneration[TTx any](e *env[TTx]) {
	var last int64
	now := t0
	step := func(owner string) driver.Lease {
		ls := e.claim(owner, 1, time.Minute, now)
		if len(ls) != 1 {
			e.fatalf("%s could not claim the free lane at %v", owner, now)
		}
		if ls[0].Generation <= last {
			e.fatalf("%s got generation %d, not above the previous %d", owner, ls[0].Generation, last)
		}
		last = ls[0].Generation
		return ls[0]
	}
	l := step("a")
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{l}), "ReleaseLanes")
	step("b")
	now = now.Add(2 * time.Minute) // expired
	l = step("c")
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{l}), "ReleaseLanes")
	step("c") // the same owner again: still a new generation
}

// testLanesRelease: a release frees the lane at once; releasing a lease that is no longer
// held is ignored.
func testLanesRelease[TTx any](e *env[TTx]) {
	a := e.claim("a", 4, time.Minute, t0)
	if len(a) != 4 {
		e.fatalf("claimed %d lanes, want 4", len(a))
	}
	if b := e.claim("b", 4, time.Minute, t0); len(b) != 0 {
		e.fatalf("claimed held lanes %v", sortedLanes(b))
	}
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{a[1], a[3]}), "ReleaseLanes")
	b := e.claim("b", 4, time.Minute, t0)
	if fmt.Sprint(sortedLanes(b)) != "[1 3]" {
		e.fatalf("after releasing lanes 1 and 3 another owner claimed %v, want [1 3]", sortedLanes(b))
	}
	// a's stale leases on lanes 1 and 3 must not free b's.
	e.must(e.a.ReleaseLanes(e.ctx, []driver.Lease{a[1], a[3]}), "ReleaseLanes (stale)")
	if c := e.claim("c", 4, time.Minute, t0); len(c) != 0 {
		e.fatalf("a stale release freed lanes %v", sortedLanes(c))
	}
	// a still holds lanes 0 and 2.
	if r := e.renew([]driver.Lease{a[0], a[2]}, time.Minute, t0.Add(time.Second)); len(r) != 2 {
		e.fatalf("the unreleased leases were not renewable: %d of 2 renewed", len(r))
	}
}

// testLanesRenew: a renewal extends the lease; after a takeover it drops it.
func testLanesRenew[TTx any](e *env[TTx]) {
	a := e.claim("a", 1, 10*time.Second, t0)
	r := e.renew(a, 10*time.Second, t0.Add(5*time.Second))
	if len(r) != 1 || !r[0].Until.Equal(t0.Add(15*time.Second)) || r[0].Generation != a[0].Generation {
		e.fatalf("renewal at t0+5s with TTL 10s returned %+v, want the same lease until t0+15s", r)
	}
	if b := e.claim("b", 1, 10*time.Second, t0.Add(12*time.Second)); len(b) != 0 {
		e.fatalf("the renewed lease was taken over before its new expiry")
	}
	b := e.claim("b", 1, 10*time.Second, t0.Add(16*time.Second))
	if len(b) != 1 {
		e.fatalf("the lease was not taken over after its renewed expiry")
	}
	for _, at := range []time.Duration{13 * time.Second, 16 * time.Second} {
		if r := e.renew(r, 10*time.Second, t0.Add(at)); len(r) != 0 {
			e.fatalf("the old owner renewed at t0+%v after a takeover: %+v", at, r)
		}
	}
	if r := e.renew(b, 10*time.Second, t0.Add(17*time.Second)); len(r) != 1 {
		e.fatalf("the new owner could not renew its lease")
	}
}

// testLanesHeartbeat: Heartbeat counts live workers; TTL <= 0 deregisters; expiry drops.
func testLanesHeartbeat[TTx any](e *env[TTx]) {
	hb := func(owner string, ttl, at time.Duration) int {
		n, err := e.a.Heartbeat(e.ctx, driver.HeartbeatParams{Owner: owner, TTL: ttl, Now: t0.Add(at)})
		e.must(err, "Heartbeat")
		return n
	}
	if n := hb("a", 10*time.Second, 0); n != 1 {
		e.fatalf("first worker: live %d, want 1", n)
	}
	if n := hb("b", 10*time.Second, time.Second); n != 2 {
		e.fatalf("second worker: live %d, want 2", n)
	}
	if n := hb("a", 10*time.Second, 2*time.Second); n != 2 {
		e.fatalf("repeated heartbeat: live %d, want 2", n)
	}
	if n := hb("a", 0, 3*time.Second); n != 1 {
		e.fatalf("after a deregisters: live %d, want 1", n)
	}
	if n := hb("c", 10*time.Second, 11*time.Second); n != 1 {
		e.fatalf("after b expired: live %d, want 1 (c)", n)
	}
}
