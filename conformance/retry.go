package conformance

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func retryCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "fetch-blocking", lanes: 2, run: testRetryFetchBlocking[TTx]},
		{name: "holds-key", lanes: 4, run: testRetryHoldsKey[TTx]},
		{name: "park-unpark", lanes: 4, run: testRetryParkUnpark[TTx]},
		{name: "permanent", lanes: 4, run: testRetryPermanent[TTx]},
		{name: "prefix-violation", lanes: 4, run: testRetryPrefixViolation[TTx]},
		{name: "sink-down", lanes: 4, run: testRetrySinkDown[TTx]},
	}
}

func (e *env[TTx]) fetchIDs(leases []driver.Lease, limit int, now time.Time) []string {
	e.t.Helper()
	recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: leases, Limit: limit, Now: now})
	e.must(err, "Fetch")
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
		if i > 0 && recs[i].Seq <= recs[i-1].Seq {
			e.fatalf("Fetch returned records out of Seq order")
		}
	}
	return out
}

// testRetryFetchBlocking checks Fetch's per-key blocking and Settle's failure bookkeeping
// directly: a failed record that is not yet due, or parked, holds back the later records of
// its key only; Unpark releases them; only leased lanes are read; Limit is respected.
func testRetryFetchBlocking[TTx any](e *env[TTx]) {
	ka, kb, kc := keyForLane(2, 0, 0), keyForLane(2, 0, 1), keyForLane(2, 1, 0)
	evs := []core.Event{event(ka, 1), event(kb, 1), event(ka, 2), event(kc, 1), event(kb, 2), event(ka, 3)}
	for i := range evs {
		evs[i].ID = []string{"a1", "b1", "a2", "c1", "b2", "a3"}[i]
	}
	e.write(evs...)
	ls := e.claim("w", 1, 24*time.Hour, t0)
	if len(ls) != 1 || ls[0].Lane != 0 {
		e.fatalf("claimed %v, want lane 0", sortedLanes(ls))
	}
	expect := func(what string, limit int, now time.Time, want ...string) {
		e.t.Helper()
		if got := e.fetchIDs(ls, limit, now); !slices.Equal(got, want) {
			e.fatalf("%s: Fetch returned %v, want %v", what, got, want)
		}
	}
	expect("fresh records of lane 0", 100, t0, "a1", "b1", "a2", "b2", "a3")
	expect("Limit 2", 2, t0, "a1", "b1")
	seq := map[string]int64{}
	for _, r := range e.list(driver.StateAll) {
		seq[r.ID] = r.Seq
	}
	settle := func(now time.Time, p driver.SettleParams) {
		e.t.Helper()
		p.Leases, p.Now = ls, now
		e.must(e.a.Settle(e.ctx, p), "Settle")
	}
	settle(t0, driver.SettleParams{Failed: []driver.Failure{{Seq: seq["a1"], Lane: 0, Error: "first", Delay: time.Minute}}})
	expect("a1 not due: key a held back", 100, t0.Add(time.Second), "b1", "b2")
	expect("a1 due at NextAttemptAt", 100, t0.Add(time.Minute), "a1", "b1", "a2", "b2", "a3")
	settle(t0.Add(time.Minute), driver.SettleParams{Failed: []driver.Failure{{Seq: seq["a1"], Lane: 0, Error: "second", Delay: 2 * time.Minute}}})
	r := e.byID()["a1"]
	if r.Attempts != 2 || r.LastError != "second" || !r.NextAttemptAt.Equal(t0.Add(3*time.Minute)) || !r.ParkedAt.IsZero() {
		e.fatalf("after two failures a1 is %+v, want attempts 2, last error %q, next attempt t0+3m, not parked", r, "second")
	}
	now := t0.Add(3 * time.Minute)
	settle(now, driver.SettleParams{Published: []int64{seq["a1"], seq["b1"]},
		Failed: []driver.Failure{{Seq: seq["a2"], Lane: 0, Error: "fatal", Park: true}}})
	r = e.byID()["a2"]
	if !r.ParkedAt.Equal(now) || r.Attempts != 1 || r.LastError != "fatal" {
		e.fatalf("parked a2 is %+v, want ParkedAt %v, attempts 1", r, now)
	}
	expect("a2 parked: key a held back for good", 100, now.Add(24*time.Hour), "b2")
	if st := e.stats(); st.Parked != 1 || st.Pending != 3 || st.Published != 2 {
		e.fatalf("Stats = %+v, want parked 1, pending 3 (b2, a3, c1), published 2", st)
	}
	parked := e.list(driver.StateParked)
	if len(parked) != 1 || parked[0].ID != "a2" {
		e.fatalf("List(StateParked) returned %d records, want only a2", len(parked))
	}
	keys, err := e.a.ParkedKeys(e.ctx)
	e.must(err, "Admin.ParkedKeys")
	if len(keys) != 1 || keys[0] != ka {
		e.fatalf("ParkedKeys = %q, want only %q (a1's failure is not parked, a2 is)", keys, ka)
	}
	n, err := e.a.Unpark(e.ctx, ka)
	e.must(err, "Unpark")
	if n < 1 {
		e.fatalf("Unpark(%s) changed %d records, want at least the parked one", ka, n)
	}
	r = e.byID()["a2"]
	if !r.ParkedAt.IsZero() || !r.NextAttemptAt.IsZero() || r.Attempts != 0 {
		e.fatalf("after Unpark a2 is %+v, want ParkedAt, NextAttemptAt and Attempts cleared", r)
	}
	expect("after Unpark", 100, now, "a2", "b2", "a3")
	if st := e.stats(); st.Parked != 0 || st.Pending != 4 {
		e.fatalf("Stats after Unpark = %+v, want parked 0, pending 4", st)
	}
	if keys, err := e.a.ParkedKeys(e.ctx); err != nil || len(keys) != 0 {
		e.fatalf("ParkedKeys after Unpark = %q, %v; want none", keys, err)
	}
}

// testRetryHoldsKey: a key failing retryably holds back only its own later events; other keys
// flow; once the failure clears the key is delivered in order.
func testRetryHoldsKey[TTx any](e *env[TTx]) {
	sink := NewSink()
	want := map[string][]string{}
	var evs []core.Event
	for i := range 3 {
		for _, k := range []string{"hold-a", "hold-b", "hold-c"} {
			evs = append(evs, event(k, i))
		}
	}
	stored := e.write(evs...)
	var others []string
	for _, ev := range stored {
		want[ev.PartitionKey] = append(want[ev.PartitionKey], ev.ID)
		if ev.PartitionKey != "hold-a" {
			others = append(others, ev.ID)
		}
	}
	a := want["hold-a"]
	sink.FailKey("hold-a", errInjected)
	e.startRelay(e.a, sink, nil)
	e.waitFor("the other keys to be delivered", func() bool { return sink.AllAcked(others) })
	e.waitFor("the failing event to be retried 3 times", func() bool { return e.byID()[a[0]].Attempts >= 3 })
	recs := e.byID()
	if r := recs[a[0]]; !strings.Contains(r.LastError, errInjected.Error()) || r.NextAttemptAt.IsZero() || !r.ParkedAt.IsZero() || !r.PublishedAt.IsZero() {
		e.fatalf("the failing event is %+v, want LastError with %q, NextAttemptAt set, not parked or published", r, errInjected)
	}
	for _, id := range a {
		if sink.Acks(id) > 0 || !recs[id].PublishedAt.IsZero() {
			e.fatalf("event %s of the failing key was delivered or published", id)
		}
	}
	sink.FailKey("hold-a", nil)
	e.waitFor("the failing key to be delivered once its failure cleared", func() bool { return sink.AllAcked(a) })
	e.checkOrder(sink, want)
	e.waitSettled()
}

// testRetryParkUnpark: when the retry budget is used up the record is parked (Admin and
// Stats show it) and its key stops; Unpark delivers the key in order.
func testRetryParkUnpark[TTx any](e *env[TTx]) {
	sink := NewSink()
	o := relayOptions(e.name("parking"))
	// Delays of 2ms: the 4th failure finds 3 x 2ms >= Deadline and parks.
	o.Retry = core.RetryPolicy{Initial: 2 * time.Millisecond, Max: 2 * time.Millisecond, Jitter: -1, Deadline: 6 * time.Millisecond}
	stored := e.write(event("park", 1), event("park", 2), event("park", 3))
	p := ids(stored)
	sink.FailID(p[0], errInjected)
	r := e.startRelay(e.a, sink, o)
	e.waitFor("the failing event to be parked", func() bool { return e.stats().Parked == 1 })
	parked := e.list(driver.StateParked)
	if len(parked) != 1 || parked[0].ID != p[0] {
		e.fatalf("List(StateParked) = %d records, want only %s", len(parked), p[0])
	}
	if rec := parked[0]; rec.Attempts != 4 || rec.ParkedAt.IsZero() || !strings.Contains(rec.LastError, errInjected.Error()) {
		e.fatalf("parked record %+v, want 4 attempts, ParkedAt and the injected error", rec)
	}
	// The relay keeps running: a new key is delivered, the parked key's later events are not.
	later := e.write(event("other", 1))
	e.waitFor("another key to be delivered while one is parked", func() bool { return sink.AllAcked(ids(later)) })
	for _, id := range p[1:] {
		if sink.Acks(id) > 0 {
			e.fatalf("event %s was delivered although an earlier event of its key is parked", id)
		}
	}
	if r.r.Stats().Parked < 1 {
		e.fatalf("relay Stats().Parked = %d, want >= 1", r.r.Stats().Parked)
	}
	sink.FailID(p[0], nil)
	n, err := e.a.Unpark(e.ctx, "park")
	e.must(err, "Unpark")
	if n < 1 {
		e.fatalf("Unpark changed %d records, want >= 1", n)
	}
	e.waitFor("the unparked key to be delivered", func() bool { return sink.AllAcked(p) })
	e.checkOrder(sink, map[string][]string{"park": p, "other": ids(later)})
	e.waitSettled()
}

// testRetryPermanent: a permanent sink error and an unknown destination park at once.
func testRetryPermanent[TTx any](e *env[TTx]) {
	sink := NewSink()
	x := ids(e.write(event("perm", 1), event("perm", 2)))
	u1, u2 := event("unrouted", 1), event("unrouted", 2)
	u1.Destination = "nowhere"
	u := ids(e.write(u1, u2))
	ok := ids(e.write(event("fine", 1)))
	sink.FailID(x[0], core.Permanent(errInjected))
	router := core.StaticRouter{ByDestination: map[string]string{"known": "queue"}, ByType: map[string]string{"order.changed": "queue"}}
	o := relayOptions(e.name("relay"))
	if e.h.Logger != nil {
		o.Logger = e.h.Logger
	}
	relay, err := core.NewRelay(e.a, sink, router, o)
	e.must(err, "NewRelay")
	e.run(relay)
	e.waitFor("both failing events to be parked", func() bool { return e.stats().Parked == 2 })
	e.waitFor("the routable key to be delivered", func() bool { return sink.AllAcked(ok) })
	recs := e.byID()
	for _, id := range []string{x[0], u[0]} {
		if r := recs[id]; r.Attempts != 1 || r.ParkedAt.IsZero() {
			e.fatalf("event %s: attempts %d, parked at %v; want parked after its first attempt", id, r.Attempts, r.ParkedAt)
		}
	}
	if !strings.Contains(recs[u[0]].LastError, "unknown destination") {
		e.fatalf("unroutable event's LastError %q does not say unknown destination", recs[u[0]].LastError)
	}
	if sink.Sent(u[0]) != 0 {
		e.fatalf("the unroutable event was sent")
	}
	for _, id := range []string{x[1], u[1]} {
		if sink.Acks(id) > 0 || !recs[id].PublishedAt.IsZero() || !recs[id].ParkedAt.IsZero() {
			e.fatalf("event %s behind a parked event was delivered, published or parked: %+v", id, recs[id])
		}
	}
}

// testRetryPrefixViolation: a sink that acknowledges a later event of a failed key breaks the
// sink contract; the relay does not trust it and leaves that event unpublished.
func testRetryPrefixViolation[TTx any](e *env[TTx]) {
	sink := NewSink()
	v := ids(e.write(event("liar", 1), event("liar", 2), event("liar", 3)))
	sink.FailID(v[0], errInjected)
	sink.ViolatePrefix("liar", true)
	e.startRelay(e.a, sink, nil)
	e.waitFor("the later events to be acknowledged out of order by the broken sink", func() bool {
		return sink.Acks(v[1]) > 0 && e.byID()[v[0]].Attempts >= 2
	})
	recs := e.byID()
	for _, id := range v[1:] {
		if !recs[id].PublishedAt.IsZero() {
			e.fatalf("event %s was marked published although an earlier event of its key failed in the same send", id)
		}
	}
	if r := recs[v[0]]; !strings.Contains(r.LastError, errInjected.Error()) {
		e.fatalf("failing event LastError %q, want the injected error", r.LastError)
	}
	sink.FailID(v[0], nil)
	e.waitFor("the key to be delivered once the failure cleared", func() bool {
		st := e.stats()
		return st.Pending == 0 && st.Published == 3
	})
	before := sink.Acks(v[1])
	if before < 2 {
		e.fatalf("event %s was acknowledged %d times; it must be resent after the earlier event", v[1], before)
	}
}

// testRetrySinkDown: while the sink fails every message nothing is published or parked and
// attempts are recorded; when it recovers everything is delivered in order.
func testRetrySinkDown[TTx any](e *env[TTx]) {
	sink := NewSink()
	sink.FailAll(errInjected)
	want := map[string][]string{}
	var all []string
	for k := range 4 {
		key := fmt.Sprintf("down-%d", k)
		for _, ev := range e.write(event(key, 1), event(key, 2), event(key, 3)) {
			want[key] = append(want[key], ev.ID)
			all = append(all, ev.ID)
		}
	}
	e.startRelay(e.a, sink, nil)
	e.waitFor("every key's first event to fail twice", func() bool {
		recs := e.byID()
		for _, ids := range want {
			if recs[ids[0]].Attempts < 2 {
				return false
			}
		}
		return true
	})
	st := e.stats()
	if st.Published != 0 || st.Parked != 0 || st.Pending != int64(len(all)) {
		e.fatalf("while the sink is down Stats = %+v, want all %d pending", st, len(all))
	}
	recs := e.byID()
	for _, ids := range want {
		for _, id := range ids[1:] {
			if recs[id].Attempts != 0 {
				e.fatalf("event %s behind a failed event of its key has %d attempts, want 0", id, recs[id].Attempts)
			}
		}
	}
	sink.FailAll(nil)
	e.waitFor("everything to be delivered once the sink recovered", func() bool { return sink.AllAcked(all) })
	e.checkOrder(sink, want)
	e.waitSettled()
}
