package core

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The adaptive drain's law (RelayOptions.AdaptiveRate), in one place.
const (
	// adaptiveBackoff: the settle time of a full batch above this multiple of the fastest
	// one seen lately means the database is busy: the rate is cut.
	adaptiveBackoff = 2.0
	// adaptiveRecover: below this multiple the rate grows again.
	adaptiveRecover = 1.5
	// adaptiveCut is the multiplicative decrease, adaptiveGrow the increase per full batch
	// settled quickly (plus one batch per second, so a rate near the floor recovers too).
	adaptiveCut  = 0.7
	adaptiveGrow = 1.05
	// adaptiveDrift is how long the baseline takes to double without a faster settle, so that
	// a database that became slower for good (a larger table, another machine) sets a new
	// baseline instead of holding the rate down forever, while a catch-up of a few minutes
	// keeps the baseline it started with.
	adaptiveDrift = 5 * time.Minute
	// adaptiveAlpha weighs each full batch's settle time in the smoothed one.
	adaptiveAlpha = 0.3
	// adaptiveWindow is how long the achieved rate is measured over.
	adaptiveWindow = time.Second
)

// rateControl is the adaptive drain: an additive-increase, multiplicative-decrease law on the
// records per second a polling relay sends, driven by how long Store.Settle takes for a full
// batch (BatchSize records). A settle is the relay's own write transaction and commit on the
// outbox's database, the path every producer's commit takes too (a lock, the WAL, the
// flush), and it involves no broker: when producers and relay contend for the database, its
// time rises; a slow broker lengthens Sink.Send, never Settle, so it is never taken for a
// busy database. Only full batches count: a relay that fetches less than BatchSize has no
// backlog to hold back, and small settles are faster for their size alone.
//
// The law: the baseline is the fastest full-batch settle seen lately (it doubles every
// adaptiveDrift without a faster one); the signal is their smoothed time. Above adaptiveBackoff ×
// baseline the limit becomes adaptiveCut × the rate achieved over the last adaptiveWindow
// (never below floor, one batch per second), at most once per adaptiveWindow so that a cut
// shows in the settle times before the next; below adaptiveRecover × baseline it grows by
// adaptiveGrow (plus one batch per second) up to MaxRate, or until it is 4 times the achieved
// rate without a MaxRate (then unlimited again). In between it holds.
type rateControl struct {
	mu    sync.Mutex
	lim   *rate.Limiter
	max   float64 // MaxRate, or +Inf
	floor float64 // the lowest limit: one batch per second
	batch int

	base, smooth float64 // seconds per full-batch settle
	baseAt       time.Time
	limit        float64 // +Inf: not limiting
	winStart     time.Time
	winSent      int
	achieved     float64 // records per second over the last full window
	lastCut      time.Time
	cuts         uint64
}

func newRateControl(lim *rate.Limiter, maxRate, batch int) *rateControl {
	c := &rateControl{lim: lim, max: math.Inf(1), floor: float64(batch), batch: batch, limit: math.Inf(1)}
	if maxRate > 0 {
		c.max = float64(maxRate)
		c.limit = c.max
	}
	return c
}

// sent counts n records sent at now, for the achieved rate.
func (c *rateControl) sent(now time.Time, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.winStart.IsZero() {
		c.winStart = now
	}
	c.winSent += n
	if el := now.Sub(c.winStart); el >= adaptiveWindow {
		c.achieved = float64(c.winSent) / el.Seconds()
		c.winStart, c.winSent = now, 0
	}
}

// settled applies the law to one settle of n records that took d, at now.
func (c *rateControl) settled(now time.Time, n int, d time.Duration) {
	if n < c.batch || d <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := d.Seconds()
	if c.base == 0 {
		c.base, c.smooth, c.baseAt = s, s, now
		return
	}
	if el := now.Sub(c.baseAt); el > 0 {
		c.base *= math.Exp2(el.Seconds() / adaptiveDrift.Seconds())
	}
	c.base, c.baseAt = math.Min(c.base, s), now
	c.smooth += adaptiveAlpha * (s - c.smooth)
	switch {
	case c.smooth > adaptiveBackoff*c.base:
		if !c.lastCut.IsZero() && now.Sub(c.lastCut) < adaptiveWindow {
			return // one cut per window: the last one has yet to show in the settle times
		}
		from := c.limit
		if c.achieved > 0 && c.achieved < from {
			from = c.achieved
		}
		if math.IsInf(from, 1) {
			return // nothing measured yet to cut from
		}
		c.limit = math.Max(c.floor, from*adaptiveCut)
		c.cuts++
		c.lastCut = now
	case c.smooth < adaptiveRecover*c.base && !math.IsInf(c.limit, 1):
		c.limit = c.limit*adaptiveGrow + float64(c.batch)
		switch {
		case c.limit >= c.max:
			c.limit = c.max
		case math.IsInf(c.max, 1) && c.achieved > 0 && c.limit > 4*c.achieved:
			c.limit = math.Inf(1) // far above what the relay achieves: no longer a limit
		}
	default:
		return
	}
	c.apply(now)
}

// apply sets the limiter to the current limit (caller holds mu).
func (c *rateControl) apply(now time.Time) {
	if math.IsInf(c.limit, 1) {
		c.lim.SetLimitAt(now, rate.Inf)
		return
	}
	c.lim.SetLimitAt(now, rate.Limit(c.limit))
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
