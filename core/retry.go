package core

import (
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides when a failed event is tried again and when it is parked.
// Zero fields take their defaults.
type RetryPolicy struct {
	// Initial is the delay after the first failure. Default 1s.
	Initial time.Duration
	// Max caps one delay. Default 5m.
	Max time.Duration
	// Multiplier grows the delay after each failure. Default 2.
	Multiplier float64
	// Jitter spreads each delay uniformly by ±Jitter (0.2 = ±20%). Default 0.2; negative means none.
	Jitter float64
	// Deadline is the retry budget of one event, measured from its first failure: once the sum of
	// its scheduled delays reaches Deadline, the next failure parks it (and with it its partition
	// key). Default 24h. Unpark starts a fresh budget.
	Deadline time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Initial <= 0 {
		p.Initial = time.Second
	}
	if p.Max <= 0 {
		p.Max = 5 * time.Minute
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	if p.Jitter == 0 {
		p.Jitter = 0.2
	} else if p.Jitter < 0 {
		p.Jitter = 0
	}
	if p.Jitter > 1 {
		p.Jitter = 1
	}
	if p.Deadline <= 0 {
		p.Deadline = 24 * time.Hour
	}
	return p
}

// base returns the un-jittered delay after the attempt-th failure (attempt >= 1).
func (p RetryPolicy) base(attempt int) time.Duration {
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(max(attempt, 1)-1))
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.Max
	}
	return saturate(d)
}

// saturate converts d nanoseconds to a Duration, saturating at the largest Duration instead of
// overflowing to a negative one (float64(math.MaxInt64) rounds up to 2^63, which no int64 holds).
func saturate(d float64) time.Duration {
	if d >= float64(math.MaxInt64) || math.IsNaN(d) {
		return math.MaxInt64
	}
	if d < 0 {
		return 0
	}
	return time.Duration(d)
}

// Delay returns the jittered delay after the attempt-th failure (defaults applied). It is never
// negative: huge Initial, Max or Deadline values saturate at the largest time.Duration.
func (p RetryPolicy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.base(attempt)
	if p.Jitter > 0 {
		f := 1 + p.Jitter*(2*rand.Float64()-1)
		d = saturate(float64(d) * f)
	}
	return d
}

// Exhausted reports whether an event that has now failed attempts times has used its budget:
// the scheduled delays of its earlier failures already add up to Deadline.
func (p RetryPolicy) Exhausted(attempts int) bool {
	p = p.withDefaults()
	var sum time.Duration
	for i := 1; i < attempts; i++ {
		b := p.base(i)
		if sum > math.MaxInt64-b {
			return true // the sum passed the largest Duration, so it passed Deadline
		}
		sum += b
		if sum >= p.Deadline {
			return true
		}
	}
	return false
}
