package core

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The adaptive drain's law (RelayOptions.FixedRate turns it off), in one place.
const (
	// adaptiveBudget is the database time the relay may take per second of wall time, summed
	// over its loops (Store.Fetch and Store.Settle, waits included), while producers write:
	// 0.4 is 40% of one connection kept busy.
	adaptiveBudget = 0.4
	// adaptiveRecover: below this fraction of the budget the limit grows by adaptiveGrow (plus
	// one batch per second, so that a limit near the floor recovers too).
	adaptiveRecover = 0.75
	adaptiveGrow    = 1.2
	// adaptiveCatchUp: the limit is never below this many times the producers' rate, so that
	// a backlog always drains while they write (the relay's share of the database then grows
	// past the budget instead of the backlog growing).
	adaptiveCatchUp = 3
	// adaptiveWindow is how long the database time, the achieved rate and the producers' rate
	// (driver.IngressCounter, read once per window) are measured over before the law acts.
	adaptiveWindow = time.Second
)

// rateControl is the adaptive drain: a law on the records per second a polling relay sends,
// driven by two signals.
//
//   - The producers' rate, from driver.IngressCounter. The law limits nothing while nobody
//     writes (or the store cannot say): a drain alone takes the database, as it should.
//   - How much of the database's time the relay takes: the wall time its Store.Fetch and
//     Store.Settle calls took per second, summed over its loops. That time grows with the
//     relay's own rate and with the time each statement waits for the database (its locks,
//     its CPU, its disk), which producers writing meanwhile share; a slow broker lengthens
//     Sink.Send, which does not count, and slows the relay, which lowers it: a slow broker is
//     never taken for a busy database.
//
// Every adaptiveWindow, while producers write: above adaptiveBudget the limit becomes the rate
// achieved in the window times budget / measured, never below the floor (adaptiveCatchUp times
// the producers' rate, and one batch per second); below adaptiveRecover × budget a limit grows
// by adaptiveGrow plus one batch per second, up to MaxRate, or until it is 4 times the achieved
// rate without a MaxRate (then unlimited again). In between it holds, or rises to a floor that
// rose. While nobody writes the limit is MaxRate (or none). MaxRate is never exceeded.
type rateControl struct {
	mu    sync.Mutex
	lim   *rate.Limiter
	max   float64 // MaxRate, or +Inf
	batch float64 // one batch per second: the lowest limit

	limit    float64 // +Inf: not limiting
	winStart time.Time
	winSent  int
	winDB    time.Duration
	cuts     uint64

	// The producers' rate: the last reading of driver.IngressCounter and when it was taken,
	// and the rate between it and the one before (inKnown false: no such rate).
	inCount uint64
	inAt    time.Time
	inRate  float64
	inKnown bool
}

func newRateControl(lim *rate.Limiter, maxRate, batch int) *rateControl {
	c := &rateControl{lim: lim, max: math.Inf(1), batch: float64(batch), limit: math.Inf(1)}
	if maxRate > 0 {
		c.max = float64(maxRate)
		c.limit = c.max
	}
	return c
}

// sent counts n records sent at now. It reports whether the law cut the rate then.
func (c *rateControl) sent(now time.Time, n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.winSent += n
	return c.step(now)
}

// db counts d of database time (a fetch or a settle) ending at now. It reports whether the
// law cut the rate then.
func (c *rateControl) db(now time.Time, d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.winDB += d
	return c.step(now)
}

// ingress records a reading of driver.IngressCounter taken at now; ok false: the reading
// failed. The producers' rate is the growth since the previous reading, known only when both
// readings succeeded, the earlier was above 0 and the later is not below it.
func (c *rateControl) ingress(now time.Time, count uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev, prevAt := c.inCount, c.inAt
	c.inKnown = ok && !prevAt.IsZero() && prev > 0 && count >= prev && now.After(prevAt)
	if c.inKnown {
		c.inRate = float64(count-prev) / now.Sub(prevAt).Seconds()
	}
	c.inCount, c.inAt = count, now
	if !ok {
		c.inAt = time.Time{}
	}
}

// step applies the law when a window has passed (caller holds mu), and reports whether it
// cut the rate.
func (c *rateControl) step(now time.Time) (cut bool) {
	if c.winStart.IsZero() {
		c.winStart = now
		return false
	}
	el := now.Sub(c.winStart)
	if el < adaptiveWindow {
		return false
	}
	occ, achieved := c.winDB.Seconds()/el.Seconds(), float64(c.winSent)/el.Seconds()
	c.winStart, c.winSent, c.winDB = now, 0, 0
	writing := c.inKnown && c.inRate >= 1
	floor := c.batch
	if writing {
		floor = math.Max(floor, adaptiveCatchUp*c.inRate)
	}
	switch {
	case !writing:
		if c.limit == c.max {
			return false
		}
		c.limit = c.max // nobody to leave the database to
	case occ > adaptiveBudget && achieved > 0:
		c.limit = math.Min(c.max, math.Max(floor, math.Min(c.limit, achieved*adaptiveBudget/occ)))
		c.cuts++
		cut = true
	case c.limit < floor:
		c.limit = math.Min(c.max, floor) // the producers write faster: keep draining ahead of them
	case occ < adaptiveRecover*adaptiveBudget && !math.IsInf(c.limit, 1):
		c.limit = c.limit*adaptiveGrow + c.batch
		switch {
		case c.limit >= c.max:
			c.limit = c.max
		case math.IsInf(c.max, 1) && c.limit > 4*math.Max(achieved, floor):
			c.limit = math.Inf(1) // far above what the relay achieves: no longer a limit
		}
	default:
		return false
	}
	if math.IsInf(c.limit, 1) {
		c.lim.SetLimitAt(now, rate.Inf)
	} else {
		c.lim.SetLimitAt(now, rate.Limit(c.limit))
	}
	return cut
}

// state returns the current limit (0: unlimited) and how many times the law cut it.
func (c *rateControl) state() (limit float64, cuts uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if math.IsInf(c.limit, 1) {
		return 0, c.cuts
	}
	return c.limit, c.cuts
}
