package core

import (
	"math"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// model runs a relay beside producers against the law: batches of 1,000 records at the rate
// the controller allows (at most 10,000 records a second), each taking dbPerBatch(rate) of
// database time (fetch and settle), while producers write at their rate and the relay reads
// their count once a second (driver.IngressCounter).
type model struct {
	c        *rateControl
	now      time.Time
	written  float64 // the producers' records so far
	lastRead time.Time
	failing  bool // the store's readings fail
}

func newModel(c *rateControl) *model {
	return &model{c: c, now: time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC), written: 1}
}

// run advances the model by d with producers writing producers records a second.
func (m *model) run(d time.Duration, producers float64, dbPerBatch func(rate float64) time.Duration) {
	for end := m.now.Add(d); m.now.Before(end); {
		if m.now.Sub(m.lastRead) >= adaptiveWindow {
			m.c.ingress(m.now, uint64(m.written), !m.failing)
			m.lastRead = m.now
		}
		r := 10000.0
		if l, _ := m.c.state(); l > 0 && l < r {
			r = l
		}
		m.c.db(m.now, dbPerBatch(r)/2) // the fetch
		m.c.sent(m.now, 1000)
		m.c.db(m.now, dbPerBatch(r)/2) // the settle
		dt := time.Duration(float64(time.Second) * 1000 / r)
		m.now = m.now.Add(dt)
		m.written += producers * dt.Seconds()
	}
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

func unlimited(t *testing.T, c *rateControl, lim *rate.Limiter, what string) {
	t.Helper()
	if l, _ := c.state(); l != 0 || lim.Limit() != rate.Inf {
		t.Fatalf("%s: limit %v (limiter %v); want unlimited", what, l, lim.Limit())
	}
}

// The adaptive drain's law while producers write: it leaves the rate alone while the relay
// takes little of the database's time; above the budget it sets the rate that would take the
// budget (achieved × budget / measured, never below 3 × the producers' rate nor one batch per
// second), and it grows the limit again when the relay takes less than 0.75 of the budget.
func TestAdaptiveRateLaw(t *testing.T) {
	lim := rate.NewLimiter(rate.Inf, 1000)
	c := newRateControl(lim, 0, 1000)
	m := newModel(c)

	// 10 ms per batch at 10,000/s: 0.1 s per second, under the budget.
	m.run(5*time.Second, 500, fixed(10*time.Millisecond))
	unlimited(t, c, lim, "a relay taking 0.1 s of database time per second")
	if _, cuts := c.state(); cuts != 0 {
		t.Fatalf("%d cuts under the budget", cuts)
	}

	// The relay slows the database (125 ms per batch at 10,000/s: 1.25 s per second): after
	// one window the limit is 10,000 × 0.4 / 1.25 = 3,200; the law then settles where the
	// relay takes about the budget (5,040/s takes 0.4 s), cutting and growing in turn.
	m.run(1100*time.Millisecond, 500, loaded)
	l, cuts := c.state()
	if cuts != 1 || math.Abs(l-3200) > 100 || float64(lim.Limit()) != l {
		t.Fatalf("a relay taking 1.25 s per second: limit %v (limiter %v), %d cuts; want one cut to about 3200", l, lim.Limit(), cuts)
	}
	var occs []float64
	for range 30 {
		m.run(time.Second, 500, loaded)
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
	m.run(20*time.Second, 500, fixed(10*time.Millisecond))
	unlimited(t, c, lim, "a fast database for 20 s")

	// A slow broker: the relay sends little, its database time is small, nothing is cut.
	_, before := c.state()
	for range 100 {
		m.c.ingress(m.now, uint64(m.written), true)
		c.db(m.now, 5*time.Millisecond)
		c.sent(m.now, 1000)
		c.db(m.now, 5*time.Millisecond)
		m.now = m.now.Add(500 * time.Millisecond) // a 500 ms send
		m.written += 250
	}
	if l, cuts := c.state(); l != 0 || cuts != before {
		t.Fatalf("a slow broker: limit %v, %d cuts; want none", l, cuts-before)
	}
}

// Nobody writes, or the store cannot say: the law limits nothing, however much of the
// database the relay takes, and lifts a limit as soon as the producers stop.
func TestAdaptiveRateAlone(t *testing.T) {
	lim := rate.NewLimiter(rate.Inf, 1000)
	c := newRateControl(lim, 0, 1000)
	m := newModel(c)
	m.run(10*time.Second, 0, loaded)
	unlimited(t, c, lim, "a drain alone taking 1.25 s of database time per second")
	if _, cuts := c.state(); cuts != 0 {
		t.Fatalf("a drain alone: %d cuts; want none", cuts)
	}

	m.run(3*time.Second, 500, loaded)
	if l, _ := c.state(); l == 0 {
		t.Fatal("producers writing beside a loaded database: no limit")
	}
	m.run(2500*time.Millisecond, 0, loaded) // a reading of the stop, then a window
	unlimited(t, c, lim, "the producers stopped")

	m.failing = true
	m.run(3*time.Second, 500, loaded)
	unlimited(t, c, lim, "readings that fail")

	// A count that fell, or was 0 (an outbox emptied by deletes), gives no rate.
	f := newRateControl(rate.NewLimiter(rate.Inf, 1000), 0, 1000)
	t0 := m.now
	for i, r := range []struct {
		count uint64
		known bool
	}{{0, false}, {5_000_000, false}, {5_000_500, true}, {10, false}, {20, true}} {
		f.ingress(t0.Add(time.Duration(i)*time.Second), r.count, true)
		if f.inKnown != r.known || r.known && f.inRate != float64(r.count-[]uint64{0, 0, 5_000_000, 0, 10}[i]) {
			t.Fatalf("reading %d (%d): known %v, rate %v; want known %v", i, r.count, f.inKnown, f.inRate, r.known)
		}
	}
}

// The floors: the limit never falls below 3 times the producers' rate (the backlog drains
// while they write), nor one batch per second; MaxRate caps both.
func TestAdaptiveRateFloors(t *testing.T) {
	lim := rate.NewLimiter(rate.Inf, 1000)
	c := newRateControl(lim, 0, 1000)
	m := newModel(c)
	// The budget's rate in loaded is 5,040/s; 3 × 2,000 is above it.
	for range 20 {
		m.run(time.Second, 2000, loaded)
		if l, _ := c.state(); l != 0 && l < 3*2000*0.98 {
			t.Fatalf("producers at 2,000/s: limit %v, below 3 times their rate", l)
		}
	}
	if _, cuts := c.state(); cuts == 0 {
		t.Fatal("producers at 2,000/s and a relay over the budget: no cut")
	}
	// They write faster: the limit rises to the new floor in the next window.
	m.run(2500*time.Millisecond, 3000, loaded)
	if l, _ := c.state(); l != 0 && l < 3*3000*0.98 {
		t.Fatalf("producers at 3,000/s: limit %v, below 3 times their rate", l)
	}

	f := newRateControl(rate.NewLimiter(rate.Inf, 1000), 0, 1000)
	newModel(f).run(time.Minute, 10, fixed(2*time.Second))
	if l, _ := f.state(); l != 1000 {
		t.Fatalf("two seconds of database time per batch: limit %v, want the floor 1000", l)
	}

	// With a MaxRate it never goes above it, not even for the producers' floor, and
	// recovers to exactly it.
	capped := rate.NewLimiter(5000, 1000)
	mc := newRateControl(capped, 5000, 1000)
	mm := newModel(mc)
	mm.run(3*time.Second, 100, func(r float64) time.Duration { return loaded(r * 2) })
	if l, cuts := mc.state(); cuts == 0 || l >= 5000 {
		t.Fatalf("MaxRate 5000 and a loaded database: limit %v, %d cuts; want below 5000", l, cuts)
	}
	for range 30 {
		mm.run(time.Second, 100, fixed(10*time.Millisecond))
		if float64(capped.Limit()) > 5000 {
			t.Fatalf("the limit rose to %v, above MaxRate 5000", capped.Limit())
		}
	}
	if l, _ := mc.state(); l != 5000 {
		t.Fatalf("recovered: limit %v, want MaxRate 5000", l)
	}
	for range 5 {
		mm.run(time.Second, 4000, loaded)
		if float64(capped.Limit()) > 5000 {
			t.Fatalf("producers at 4,000/s: the limit rose to %v, above MaxRate 5000", capped.Limit())
		}
	}
}
