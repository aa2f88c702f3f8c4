package core

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// feed runs a relay model for d from now: batches of 1,000 records at the rate the controller
// allows (at most 10,000 records a second), each taking dbPerBatch(rate) of database time
// (fetch and settle). It returns the clock after.
func feed(c *rateControl, now time.Time, d time.Duration, dbPerBatch func(rate float64) time.Duration) time.Time {
	for end := now.Add(d); now.Before(end); {
		r := 10000.0
		if l, _ := c.state(); l > 0 && l < r {
			r = l
		}
		c.db(now, dbPerBatch(r)/2) // the fetch
		c.sent(now, 1000)
		c.db(now, dbPerBatch(r)/2) // the settle
		now = now.Add(time.Duration(float64(time.Second) * 1000 / r))
	}
	return now
}

// fixed is a database whose time per batch does not depend on the relay's rate.
func fixed(d time.Duration) func(float64) time.Duration {
	return func(float64) time.Duration { return d }
}

// loaded is a database that the relay itself slows: 20 ms per batch up to 4,000 records a
// second, growing with the square of the rate above.
func loaded(r float64) time.Duration {
	return time.Duration(math.Max(1, (r/4000)*(r/4000)) * float64(20*time.Millisecond))
}

// occupancy is the database time per second of the model at rate r.
func occupancy(r float64, perBatch func(float64) time.Duration) float64 {
	return perBatch(r).Seconds() * r / 1000
}

// The adaptive drain's law: it leaves the rate alone while the relay takes little of the
// database's time; above the budget it sets the rate that would take the budget (achieved ×
// budget / measured, never below one batch per second), and it grows the limit again when the
// relay takes less than 0.75 of the budget, never above MaxRate.
func TestAdaptiveRateLaw(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	lim := rate.NewLimiter(rate.Inf, 1000)
	c := newRateControl(lim, 0, 1000)

	// 10 ms per batch at 10,000/s: 0.1 s per second, under the budget.
	now := feed(c, t0, 5*time.Second, fixed(10*time.Millisecond))
	if l, cuts := c.state(); l != 0 || cuts != 0 || lim.Limit() != rate.Inf {
		t.Fatalf("a relay taking 0.1 s of database time per second: limit %v (limiter %v), %d cuts; want unlimited, none", l, lim.Limit(), cuts)
	}

	// The relay slows the database (125 ms per batch at 10,000/s: 1.25 s per second): after
	// one window the limit is 10,000 × 0.4 / 1.25 = 3,200; the law then settles where the
	// relay takes about the budget (5,040/s takes 0.4 s), cutting and growing in turn.
	now = feed(c, now, 1100*time.Millisecond, loaded)
	l, cuts := c.state()
	if cuts != 1 || math.Abs(l-3200) > 100 || float64(lim.Limit()) != l {
		t.Fatalf("a relay taking 1.25 s per second: limit %v (limiter %v), %d cuts; want one cut to about 3200", l, lim.Limit(), cuts)
	}
	var occs []float64
	for range 30 {
		now = feed(c, now, time.Second, loaded)
		l, _ := c.state()
		occs = append(occs, occupancy(l, loaded))
	}
	sum := 0.0
	for _, o := range occs[10:] {
		sum += o
		if o > 2*adaptiveBudget {
			t.Fatalf("a limit of twice the budget's occupancy (%v) after 10 s: %v", o, occs)
		}
	}
	if mean := sum / float64(len(occs)-10); mean < 0.5*adaptiveBudget || mean > 1.3*adaptiveBudget {
		t.Fatalf("the relay's mean database time per second over 20 s: %.2f, want near the budget %.1f: %v", mean, adaptiveBudget, occs)
	}

	// The database is fast again: the limit grows back until it is no limit.
	now = feed(c, now, 20*time.Second, fixed(10*time.Millisecond))
	if l, _ := c.state(); l != 0 || lim.Limit() != rate.Inf {
		t.Fatalf("a fast database for 20 s: limit %v (limiter %v), want unlimited again", l, lim.Limit())
	}

	// A slow broker: the relay sends little, its database time is small, nothing is cut.
	_, before := c.state()
	for range 100 {
		c.db(now, 5*time.Millisecond)
		c.sent(now, 1000)
		c.db(now, 5*time.Millisecond)
		now = now.Add(500 * time.Millisecond) // a 500 ms send
	}
	if l, cuts := c.state(); l != 0 || cuts != before {
		t.Fatalf("a slow broker: limit %v, %d cuts; want none", l, cuts-before)
	}

	// With a MaxRate it never goes above it, and recovers to exactly it.
	capped := rate.NewLimiter(5000, 1000)
	m := newRateControl(capped, 5000, 1000)
	now = feed(m, now, 3*time.Second, func(r float64) time.Duration { return loaded(r * 2) })
	if l, cuts := m.state(); cuts == 0 || l >= 5000 {
		t.Fatalf("MaxRate 5000 and a loaded database: limit %v, %d cuts; want below 5000", l, cuts)
	}
	for range 60 {
		now = feed(m, now, time.Second, fixed(10*time.Millisecond))
		if float64(capped.Limit()) > 5000 {
			t.Fatalf("the limit rose to %v, above MaxRate 5000", capped.Limit())
		}
	}
	if l, _ := m.state(); l != 5000 {
		t.Fatalf("recovered: limit %v, want MaxRate 5000", l)
	}

	// The floor: one batch a second, however much database time each batch takes.
	f := newRateControl(rate.NewLimiter(rate.Inf, 1000), 0, 1000)
	feed(f, now, time.Minute, fixed(2*time.Second))
	if l, _ := f.state(); l != 1000 {
		t.Fatalf("two seconds of database time per batch: limit %v, want the floor 1000", l)
	}
}
