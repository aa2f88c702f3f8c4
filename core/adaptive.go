package core

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The adaptive drain's law (RelayOptions.AdaptiveRate), in one place.
const (
	// adaptiveBudget is the database time the relay may take per second of wall time, summed
	// over its loops (Store.Fetch and Store.Settle, waits included): 0.4 is 40% of one
	// connection kept busy.
	adaptiveBudget = 0.4
	// adaptiveRecover: below this fraction of the budget the limit grows by adaptiveGrow (plus
	// one batch per second, so that a limit near the floor recovers too).
	adaptiveRecover = 0.75
	adaptiveGrow    = 1.2
	// adaptiveWindow is how long the database time and the achieved rate are measured over
	// before the law acts.
	adaptiveWindow = time.Second
)

// rateControl is the adaptive drain: a law on the records per second a polling relay sends,
// driven by how much of the database's time the relay takes: the wall time its Store.Fetch
// and Store.Settle calls took per second, summed over its loops. That time grows with the
// relay's own rate and with the time each statement waits for the database (its locks, its
// CPU, its disk), which producers writing meanwhile share; a slow broker lengthens
// Sink.Send, which does not count, and slows the relay, which lowers it: a slow broker is never
// taken for a busy database.
//
// Every adaptiveWindow: above adaptiveBudget the limit becomes the rate achieved in the window
// times budget / measured (never below floor, one batch per second); below adaptiveRecover ×
// budget a limit grows by adaptiveGrow plus one batch per second, up to MaxRate, or until it is
// 4 times the achieved rate without a MaxRate (then unlimited again). In between it holds.
type rateControl struct {
	mu    sync.Mutex
	lim   *rate.Limiter
	max   float64 // MaxRate, or +Inf
	floor float64 // the lowest limit: one batch per second
	batch int

	limit    float64 // +Inf: not limiting
	winStart time.Time
	winSent  int
	winDB    time.Duration
	cuts     uint64
}

func newRateControl(lim *rate.Limiter, maxRate, batch int) *rateControl {
	c := &rateControl{lim: lim, max: math.Inf(1), floor: float64(batch), batch: batch, limit: math.Inf(1)}
	if maxRate > 0 {
		c.max = float64(maxRate)
		c.limit = c.max
	}
	return c
}

// sent counts n records sent at now.
func (c *rateControl) sent(now time.Time, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.winSent += n
	c.step(now)
}

// db counts d of database time (a fetch or a settle) ending at now.
func (c *rateControl) db(now time.Time, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.winDB += d
	c.step(now)
}

// step applies the law when a window has passed (caller holds mu).
func (c *rateControl) step(now time.Time) {
	if c.winStart.IsZero() {
		c.winStart = now
		return
	}
	el := now.Sub(c.winStart)
	if el < adaptiveWindow {
		return
	}
	occ, achieved := c.winDB.Seconds()/el.Seconds(), float64(c.winSent)/el.Seconds()
	c.winStart, c.winSent, c.winDB = now, 0, 0
	switch {
	case occ > adaptiveBudget && achieved > 0:
		c.limit = math.Max(c.floor, math.Min(c.limit, achieved*adaptiveBudget/occ))
		c.cuts++
	case occ < adaptiveRecover*adaptiveBudget && !math.IsInf(c.limit, 1):
		c.limit = c.limit*adaptiveGrow + float64(c.batch)
		switch {
		case c.limit >= c.max:
			c.limit = c.max
		case math.IsInf(c.max, 1) && c.limit > 4*math.Max(achieved, c.floor):
			c.limit = math.Inf(1) // far above what the relay achieves: no longer a limit
		}
	default:
		return
	}
	if math.IsInf(c.limit, 1) {
		c.lim.SetLimitAt(now, rate.Inf)
	} else {
		c.lim.SetLimitAt(now, rate.Limit(c.limit))
	}
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
