package core

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides when a failed event is tried again and when it is parked.
// Zero fields take their defaults (DefaultRetryInitial, ...). NewRelay and NewCDCRelay refuse a
// policy that Check refuses; nothing is adjusted without a word.
type RetryPolicy struct {
	// Initial is the delay after the first failure. Default DefaultRetryInitial (1s). Must not
	// be negative, nor above Max when Max is set.
	Initial time.Duration
	// Max caps one delay. Default DefaultRetryMax (5m), or Initial when Initial is larger. Must
	// not be negative.
	Max time.Duration
	// Multiplier grows the delay after each failure: 1 or more. Default DefaultRetryMultiplier (2).
	Multiplier float64
	// Jitter spreads each delay uniformly by ±Jitter (0.2 = ±20%): at most 1. Default
	// DefaultRetryJitter (0.2); negative means none.
	Jitter float64
	// Deadline is the retry budget of one event, measured from its first failure: once the sum of
	// its scheduled delays (the policy's own, not the longer ones a sink asked for with
	// RetryAfter) reaches Deadline, the next failure parks it (and with it its partition
	// key). Default DefaultRetryDeadline (24h). Must not be negative. Unpark starts a fresh budget.
	Deadline time.Duration
}

// Check returns an *OptionError (ErrInvalidOptions) naming the first invalid field of p
// (Field "Retry.<name>"): a negative Initial, Max or Deadline, an Initial above a set Max, a
// Multiplier between 0 and 1 or below 0, a Jitter above 1, or a NaN or infinite Multiplier or
// Jitter. Zero fields are valid (their defaults).
func (p RetryPolicy) Check() error {
	bad := func(field, format string, a ...any) error {
		return &OptionError{Field: "Retry." + field, Reason: fmt.Sprintf(format, a...)}
	}
	switch {
	case p.Initial < 0:
		return bad("Initial", "must not be negative (0: the default %s), got %s", DefaultRetryInitial, p.Initial)
	case p.Max < 0:
		return bad("Max", "must not be negative (0: the default %s), got %s", DefaultRetryMax, p.Max)
	case p.Deadline < 0:
		return bad("Deadline", "must not be negative (0: the default %s), got %s", DefaultRetryDeadline, p.Deadline)
	case p.Max > 0 && p.Initial > p.Max:
		return bad("Initial", "must not exceed Retry.Max (%s), got %s", p.Max, p.Initial)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0):
		return bad("Multiplier", "must be a number, got %v", p.Multiplier)
	case p.Multiplier != 0 && p.Multiplier < 1:
		return bad("Multiplier", "must be at least 1 (0: the default %v), got %v", DefaultRetryMultiplier, p.Multiplier)
	case math.IsNaN(p.Jitter) || math.IsInf(p.Jitter, 0):
		return bad("Jitter", "must be a number, got %v", p.Jitter)
	case p.Jitter > 1:
		return bad("Jitter", "must be at most 1 (0: the default %v; negative: none), got %v", DefaultRetryJitter, p.Jitter)
	}
	return nil
}

// withDefaults fills the zero fields. For a policy Check refuses (only Delay and Exhausted can
// be called on one), an invalid field takes its default too, so that those methods stay total.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Initial <= 0 {
		p.Initial = DefaultRetryInitial
	}
	if p.Max <= 0 {
		p.Max = max(DefaultRetryMax, p.Initial)
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if p.Multiplier < 1 || math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) {
		p.Multiplier = DefaultRetryMultiplier
	}
	switch {
	case p.Jitter == 0 || p.Jitter > 1 || math.IsNaN(p.Jitter) || math.IsInf(p.Jitter, 0):
		p.Jitter = DefaultRetryJitter
	case p.Jitter < 0:
		p.Jitter = 0
	}
	if p.Deadline <= 0 {
		p.Deadline = DefaultRetryDeadline
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

// delayAfter is Delay(attempt), raised to hint, the delay a failure asked for (RetryAfter), but
// never beyond Max.
func (p RetryPolicy) delayAfter(attempt int, hint time.Duration) time.Duration {
	d := p.Delay(attempt)
	if h := min(hint, p.withDefaults().Max); h > d {
		d = h
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
