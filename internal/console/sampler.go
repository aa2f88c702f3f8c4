package console

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/opstatus"
)

// chartWindow is how far back the overview's charts go.
const chartWindow = time.Hour

// sample is one look of the sampler: the backlog (pending) and the publish rate at a time.
type sample struct {
	at       time.Time
	pending  int64
	parked   int64
	rate     float64
	rateKnow bool
}

// ring keeps the samples of the last chartWindow (at most its capacity), oldest first.
type ring struct {
	mu  sync.Mutex
	buf []sample
	cap int
}

func newRing(interval time.Duration) *ring {
	n := int(chartWindow/interval) + 1
	n = min(max(n, 2), 3600)
	return &ring{cap: n}
}

func (r *ring) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, s)
	if len(r.buf) > r.cap {
		r.buf = append(r.buf[:0:0], r.buf[len(r.buf)-r.cap:]...)
	}
}

// since returns the samples at or after t, oldest first.
func (r *ring) since(t time.Time) []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sample
	for _, s := range r.buf {
		if !s.at.Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// sampleOnce reads the backlog and the publish rate (the indexed Stats and PublishRate reads of
// the status) into the ring.
func (c *Console) sampleOnce(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(c.o.SampleInterval, 5*time.Second))
	defer cancel()
	st, err := c.db.Store.Stats(ctx)
	var rate float64
	var known bool
	if err == nil {
		rate, known, err = c.db.Store.PublishRate(ctx, opstatus.RateWindow, opstatus.RateRecords)
	}
	if err != nil {
		if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
			c.o.Logger.Warn("console_sample_failed", "error", err)
		}
		return
	}
	c.ring.add(sample{at: time.Now(), pending: st.Pending, parked: st.Parked, rate: rate, rateKnow: known})
}

// sampler samples every SampleInterval until ctx ends.
func (c *Console) sampler(ctx context.Context) {
	defer close(c.done)
	c.sampleOnce(ctx)
	t := time.NewTicker(c.o.SampleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.sampleOnce(ctx)
		}
	}
}

// chart is an inline SVG line chart drawn on the server (no script needed).
type chart struct {
	Title   string
	Points  string // the polyline's points
	Max     string // the top of the scale
	Last    string
	Samples int
	Width   int
	Height  int
	Summary string // the text alternative
}

// charts draws the backlog and the publish rate of the samples of the last hour at now.
func charts(samples []sample, now time.Time) []chart {
	backlog := make([]float64, len(samples))
	rate := make([]float64, len(samples))
	at := make([]time.Time, len(samples))
	for i, s := range samples {
		backlog[i], rate[i], at[i] = float64(s.pending), s.rate, s.at
	}
	return []chart{
		drawChart("Backlog (pending events)", at, backlog, now, "%.0f"),
		drawChart("Publish rate (events/s, last minute)", at, rate, now, "%.2f"),
	}
}

func drawChart(title string, at []time.Time, v []float64, now time.Time, format string) chart {
	const w, h = 600, 120
	c := chart{Title: title, Width: w, Height: h, Samples: len(v)}
	top := 0.0
	for _, x := range v {
		top = max(top, x)
	}
	scale := top
	if scale == 0 {
		scale = 1
	}
	var pts []string
	start := now.Add(-chartWindow)
	for i, x := range v {
		px := float64(w) * at[i].Sub(start).Seconds() / chartWindow.Seconds()
		py := float64(h) - float64(h-4)*x/scale - 2
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", min(max(px, 0), w), py))
	}
	c.Points = strings.Join(pts, " ")
	c.Max = fmt.Sprintf(format, top)
	if len(v) > 0 {
		c.Last = fmt.Sprintf(format, v[len(v)-1])
		c.Summary = fmt.Sprintf("%s: %d samples over the last hour, highest %s, latest %s", title, len(v), c.Max, c.Last)
	} else {
		c.Summary = title + ": no samples yet"
	}
	return c
}
