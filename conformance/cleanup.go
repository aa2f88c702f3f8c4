package conformance

import (
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testhook"
)

func cleanupCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "retention", lanes: 1, run: testCleanupRetention[TTx]},
		{name: "below-seq", lanes: 1, run: testCleanupBelowSeq[TTx]},
		{name: "batches", lanes: 1, run: testCleanupBatches[TTx]},
	}
}

// writeNumbered writes n events e1..en (IDs), each with its own key, and returns their seqs.
func (e *env[TTx]) writeNumbered(n int) map[string]int64 {
	e.t.Helper()
	evs := make([]core.Event, n)
	for i := range evs {
		evs[i] = event(fmt.Sprintf("c%d", i+1), i)
		evs[i].ID = fmt.Sprintf("e%d", i+1)
	}
	e.write(evs...)
	seq := map[string]int64{}
	for _, r := range e.list(driver.StateAll) {
		seq[r.ID] = r.Seq
	}
	return seq
}

// cleanup runs core.CleanupOutbox with o as if the time were now.
func (e *env[TTx]) cleanup(now time.Time, o core.CleanupOptions) int {
	e.t.Helper()
	testhook.SetClock(&o, func() time.Time { return now })
	n, err := core.CleanupOutbox(e.ctx, e.a, &o)
	e.must(err, "CleanupOutbox")
	return n
}

func (e *env[TTx]) remaining() []string {
	e.t.Helper()
	var out []string
	for _, r := range e.list(driver.StateAll) {
		out = append(out, r.ID)
	}
	return out
}

func (e *env[TTx]) expectRemaining(what string, want ...string) {
	e.t.Helper()
	if got := e.remaining(); !slices.Equal(got, want) {
		e.fatalf("%s: remaining records %v, want %v", what, got, want)
	}
}

// testCleanupRetention: only published rows older than the retention and below the lowest
// unpublished seq are deleted; unpublished, parked and failed (in flight) rows never are.
func testCleanupRetention[TTx any](e *env[TTx]) {
	seq := e.writeNumbered(10)
	ls := e.claim("w", 1, 24*time.Hour, t0)
	settle := func(now time.Time, p driver.SettleParams) {
		e.t.Helper()
		p.Leases, p.Now = ls, now
		e.must(e.a.Settle(e.ctx, p), "Settle")
	}
	settle(t0, driver.SettleParams{Published: []int64{seq["e1"], seq["e2"], seq["e3"], seq["e5"], seq["e6"]},
		Failed: []driver.Failure{{Seq: seq["e8"], Error: "x", Park: true}, {Seq: seq["e9"], Error: "y", Delay: time.Hour}}})
	settle(t0.Add(2*time.Hour), driver.SettleParams{Published: []int64{seq["e7"]}})
	opts := core.CleanupOptions{Retention: time.Hour, BatchSize: 100}
	if n := e.cleanup(t0.Add(150*time.Minute), opts); n != 3 {
		e.fatalf("first cleanup deleted %d rows, want 3 (e1-e3, below the unpublished e4)", n)
	}
	e.expectRemaining("first cleanup", "e4", "e5", "e6", "e7", "e8", "e9", "e10")
	settle(t0.Add(time.Hour), driver.SettleParams{Published: []int64{seq["e4"]}})
	if n := e.cleanup(t0.Add(150*time.Minute), opts); n != 3 {
		e.fatalf("second cleanup deleted %d rows, want 3 (e4-e6; e7 is within the retention, e8 is parked)", n)
	}
	e.expectRemaining("second cleanup", "e7", "e8", "e9", "e10")
	settle(t0, driver.SettleParams{Published: []int64{seq["e10"]}})
	if n := e.cleanup(t0.Add(10*time.Hour), opts); n != 1 {
		e.fatalf("third cleanup deleted %d rows, want 1 (e7; e10 is above the parked e8)", n)
	}
	e.expectRemaining("third cleanup", "e8", "e9", "e10")
	if n := e.cleanup(t0.Add(1000*time.Hour), core.CleanupOptions{Retention: time.Nanosecond}); n != 0 {
		e.fatalf("cleanup deleted %d rows while the only older rows are parked or failed", n)
	}
	e.expectRemaining("last cleanup", "e8", "e9", "e10")
}

// testCleanupBelowSeq: the BelowSeq watermark bounds the cleanup.
func testCleanupBelowSeq[TTx any](e *env[TTx]) {
	seq := e.writePublished(6)
	n := e.cleanup(t0.Add(2*time.Hour), core.CleanupOptions{Retention: time.Hour, BelowSeq: seq["e4"]})
	if n != 3 {
		e.fatalf("cleanup below e4's seq deleted %d rows, want 3", n)
	}
	e.expectRemaining("cleanup below e4", "e4", "e5", "e6")
}

// testCleanupBatches: a batch size smaller than the eligible rows still deletes them all; a
// List without a Limit returns driver.DefaultListLimit records.
func testCleanupBatches[TTx any](e *env[TTx]) {
	e.writePublished(250)
	page, err := e.a.List(e.ctx, driver.ListParams{State: driver.StatePublished})
	e.must(err, "Admin.List")
	if len(page) != driver.DefaultListLimit {
		e.fatalf("List without a Limit returned %d records, want driver.DefaultListLimit (%d)", len(page), driver.DefaultListLimit)
	}
	if n := e.cleanup(t0.Add(2*time.Hour), core.CleanupOptions{Retention: time.Hour, BatchSize: 40}); n != 250 {
		e.fatalf("cleanup in batches of 40 deleted %d rows, want 250", n)
	}
	e.expectRemaining("batched cleanup")
	if st := e.stats(); st != (driver.Stats{}) {
		e.fatalf("Stats after cleanup = %+v, want zero", st)
	}
}

// writePublished writes n numbered events (see writeNumbered) and publishes them all at t0 on a
// one-lane outbox. It returns their seqs by name.
func (e *env[TTx]) writePublished(n int) map[string]int64 {
	seq := e.writeNumbered(n)
	ls := e.claim("w", 1, 24*time.Hour, t0)
	var all []int64
	for _, s := range seq {
		all = append(all, s)
	}
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: ls, Published: all, Now: t0}), "Settle")
	return seq
}
