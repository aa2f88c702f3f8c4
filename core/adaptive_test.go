package core

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// feed sends and settles full batches of 1,000 at perSecond batches a second for d, each
// settle taking settle; it returns the clock after.
func feed(c *rateControl, now time.Time, d time.Duration, perSecond int, settle time.Duration) time.Time {
	step := time.Second / time.Duration(perSecond)
	for end := now.Add(d); now.Before(end); now = now.Add(step) {
		c.sent(now, 1000)
		c.settled(now, 1000, settle)
	}
	return now
}

// The adaptive drain's law: it leaves the rate alone while full-batch settles stay near the
// fastest, cuts it (to 0.7 of the achieved rate, at most once a second) when they take more
// than twice as long, recovers when they are fast again, never goes above MaxRate nor below
// one batch per second, and ignores batches that are not full.
func TestAdaptiveRateLaw(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	lim := rate.NewLimiter(rate.Inf, 1000)
	c := newRateControl(lim, 0, 1000)

	now := feed(c, t0, 3*time.Second, 10, 10*time.Millisecond)
	if l, cuts := c.state(); l != 0 || cuts != 0 || lim.Limit() != rate.Inf {
		t.Fatalf("settles at their baseline: limit %v (limiter %v), %d cuts; want unlimited, none", l, lim.Limit(), cuts)
	}

	// Settles take 3x as long: one cut to 0.7 x the achieved 10,000/s in the first second...
	now = feed(c, now, 500*time.Millisecond, 10, 30*time.Millisecond)
	l, cuts := c.state()
	if cuts != 1 || math.Abs(l-7000) > 1 || float64(lim.Limit()) != l {
		t.Fatalf("after settles rose to 3x: limit %v (limiter %v), %d cuts; want one cut to 7000", l, lim.Limit(), cuts)
	}
	// ...and one more per second while they stay slow, down to the floor of one batch a second.
	now = feed(c, now, 2*time.Second, 10, 30*time.Millisecond)
	if l2, cuts := c.state(); cuts != 3 || l2 >= l {
		t.Fatalf("2 s more of slow settles: limit %v after %v, %d cuts; want 3 cuts, lower", l2, l, cuts)
	}
	now = feed(c, now, 30*time.Second, 10, 30*time.Millisecond)
	if l, _ := c.state(); l != 1000 {
		t.Fatalf("slow settles for long: limit %v, want the floor 1000", l)
	}

	// Small batches say nothing: no backlog.
	cutsBefore := c.cuts
	for i := range 50 {
		c.sent(now, 10)
		c.settled(now.Add(time.Duration(i)*time.Second), 10, time.Second)
	}
	if c.cuts != cutsBefore {
		t.Fatalf("a slow settle of 10 records cut the rate")
	}

	// Fast again: it recovers, back to unlimited (4x above what it achieves).
	now = feed(c, now, 10*time.Second, 10, 10*time.Millisecond)
	if l, _ := c.state(); l != 0 || lim.Limit() != rate.Inf {
		t.Fatalf("settles back at their baseline for 10 s: limit %v (limiter %v), want unlimited again", l, lim.Limit())
	}

	// With a MaxRate it never goes above it, and recovers to exactly it.
	capped := rate.NewLimiter(5000, 1000)
	m := newRateControl(capped, 5000, 1000)
	now = feed(m, now, 3*time.Second, 10, 10*time.Millisecond)
	now = feed(m, now, 3*time.Second, 10, 40*time.Millisecond)
	if l, cuts := m.state(); cuts == 0 || l >= 5000 {
		t.Fatalf("MaxRate 5000 and slow settles: limit %v, %d cuts; want below 5000", l, cuts)
	}
	for range 100 {
		now = feed(m, now, time.Second, 10, 10*time.Millisecond)
		if float64(capped.Limit()) > 5000 {
			t.Fatalf("the limit rose to %v, above MaxRate 5000", capped.Limit())
		}
	}
	if l, _ := m.state(); l != 5000 {
		t.Fatalf("recovered: limit %v, want MaxRate 5000", l)
	}

	// A baseline that became slower for good is learned: the limit recovers after a while.
	d := newRateControl(rate.NewLimiter(rate.Inf, 1000), 0, 1000)
	now = feed(d, now, 3*time.Second, 10, 10*time.Millisecond)
	now = feed(d, now, 10*time.Minute, 10, 25*time.Millisecond)
	if l, cuts := d.state(); cuts == 0 || l != 0 {
		t.Fatalf("a database twice as slow for good: limit %v after %d cuts; want unlimited again (a new baseline)", l, cuts)
	}
}
