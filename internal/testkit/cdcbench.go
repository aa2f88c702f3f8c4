package testkit

// The measurements the adapters' CDC benchmarks share: the drain rate of a backlog read from the
// change log (and of the polling relay it is compared with), and commit-to-publish latency at a
// steady producer rate.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// countingSink acknowledges everything and counts records.
type countingSink struct {
	n    atomic.Int64
	want int64
	done chan struct{}
	once sync.Once
}

func (s *countingSink) Send(_ context.Context, msgs []core.Message) []error {
	if s.n.Add(int64(len(msgs))) >= s.want {
		s.once.Do(func() { close(s.done) })
	}
	return make([]error, len(msgs))
}

func options(batch int) *core.CDCOptions {
	return &core.CDCOptions{BatchSize: batch, Logger: slog.New(slog.DiscardHandler), RetentionInterval: time.Hour}
}

// DrainMode is how drained rows are settled.
type DrainMode struct {
	Name   string
	Delete bool // delete published rows instead of marking them
}

// DrainModes are the settle modes the drain benchmarks compare.
var DrainModes = []DrainMode{{"mark", false}, {"delete", true}}

// CheckpointHead runs a CDC relay until it has checkpointed an empty outbox's log head, so that
// what is written next is read from the log (not backfilled).
func CheckpointHead(tb testing.TB, store driver.CDCStore, src driver.ChangeSource) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r, err := core.NewCDCRelay(store, src, &countingSink{want: 1 << 62, done: make(chan struct{})}, core.StaticRouter{Default: "q"}, options(500))
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for r.Stats().Checkpoints == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("checkpoint run: %v", err)
	}
	if r.Stats().Checkpoints == 0 {
		tb.Fatal("no checkpoint within a minute")
	}
}

// Drain resumes a CDC relay from its checkpoint and returns how long it took to publish (and
// mark, or delete) want records that are already in the log, and the rate.
func Drain(tb testing.TB, store driver.CDCStore, src driver.ChangeSource, want, batch int, del bool) (time.Duration, float64) {
	tb.Helper()
	sink := &countingSink{want: int64(want), done: make(chan struct{})}
	o := options(batch)
	o.DeleteOnPublish = del
	r, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "q"}, o)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	select {
	case <-sink.done:
	case err := <-done:
		cancel()
		tb.Fatalf("cdc relay stopped: %v", err)
	case <-time.After(30 * time.Minute):
		tb.Fatalf("drain incomplete after 30 minutes: %d of %d", sink.n.Load(), want)
	}
	// Published means marked too: wait for the marks of the last batch.
	for r.Stats().Published < uint64(want) {
		select {
		case err := <-done:
			tb.Fatalf("cdc relay stopped: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("cdc relay: %v", err)
	}
	return elapsed, float64(want) / elapsed.Seconds()
}

// PollDrain runs one polling relay (BatchSize batch, PollInterval 10 ms) until it has published
// (and marked, or deleted) want records already in the outbox, and returns how long that took
// and the rate: the baseline Drain is compared with (CompareDrains).
func PollDrain(tb testing.TB, store driver.RelayStore, want, batch int, del bool) (time.Duration, float64) {
	tb.Helper()
	r, err := core.NewRelay(store, &countingSink{want: 1 << 62, done: make(chan struct{})}, core.StaticRouter{Default: "q"}, &core.RelayOptions{
		Owner: "poll-drain", BatchSize: batch, PollInterval: 10 * time.Millisecond, DeleteOnPublish: del,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Run(ctx) }()
	deadline := time.After(30 * time.Minute)
	for r.Stats().Published < uint64(want) {
		select {
		case err := <-done:
			cancel()
			tb.Fatalf("polling relay stopped: %v", err)
		case <-deadline:
			cancel()
			tb.Fatalf("drain incomplete after 30 minutes: %d of %d", r.Stats().Published, want)
		case <-time.After(time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("polling relay: %v", err)
	}
	return elapsed, float64(want) / elapsed.Seconds()
}

// Latency runs a CDC relay while write commits one event every 1/rate seconds for dur, and
// returns two sorted latency series: from when the commit returned (zero when the relay
// published before the database acknowledged the commit to the producer, which the change log
// allows), and from when the producer began its transaction (an upper bound of
// commit-to-publish). write commits one event of key (100 keys in turn) and returns its ID
// (testkit.Writer).
func Latency(tb testing.TB, store driver.CDCStore, src driver.ChangeSource, rate int, dur time.Duration,
	write func(ctx context.Context, key string) ([]string, error)) (fromCommit, fromBegin []time.Duration) {
	tb.Helper()
	type times struct{ begin, commit, published time.Time }
	var mu sync.Mutex
	seen := map[string]*times{}
	entry := func(id string) *times {
		t := seen[id]
		if t == nil {
			t = &times{}
			seen[id] = t
		}
		return t
	}
	var published atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		now := time.Now()
		mu.Lock()
		for _, m := range msgs {
			if t := entry(m.ID); t.published.IsZero() {
				t.published = now
				published.Add(1)
			}
		}
		mu.Unlock()
		return make([]error, len(msgs))
	})
	r, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "q"}, options(500))
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for r.Stats().Checkpoints == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	n := int(dur.Seconds() * float64(rate))
	interval := time.Second / time.Duration(rate)
	// Several producers, as an application has: each commits on its own schedule.
	const producers = 8
	var wg sync.WaitGroup
	start := time.Now()
	for p := range producers {
		wg.Go(func() {
			for i := p; i < n; i += producers {
				if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
					time.Sleep(d)
				}
				begin := time.Now()
				ids, err := write(ctx, strconv.Itoa(i%100))
				commit := time.Now()
				if err != nil || len(ids) != 1 {
					tb.Errorf("write: %d events, %v", len(ids), err)
					return
				}
				id := ids[0]
				mu.Lock()
				t := entry(id)
				t.begin, t.commit = begin, commit
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	for published.Load() < int64(n) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		tb.Fatalf("cdc relay: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, t := range seen {
		if t.published.IsZero() || t.begin.IsZero() {
			tb.Fatalf("event %s: written %v, published %v", id, !t.begin.IsZero(), !t.published.IsZero())
		}
		fromCommit = append(fromCommit, max(t.published.Sub(t.commit), 0))
		fromBegin = append(fromBegin, t.published.Sub(t.begin))
	}
	if len(fromCommit) != n {
		tb.Fatalf("%d of %d events published", len(fromCommit), n)
	}
	slices.Sort(fromCommit)
	slices.Sort(fromBegin)
	return fromCommit, fromBegin
}

// CompareDrains runs, for each of DrainModes, rounds interleaved rounds of round (which drains a
// polling relay's backlog and a CDC relay's, and returns their rates), and reports the medians
// and their ratio.
func CompareDrains(b *testing.B, rounds int, round func(b *testing.B, mode DrainMode) (polling, cdc float64)) {
	for _, mode := range DrainModes {
		b.Run(mode.Name, func(b *testing.B) {
			var polling, cdc []float64
			for i := range rounds * b.N {
				p, c := round(b, mode)
				polling, cdc = append(polling, p), append(cdc, c)
				b.Logf("%s round %d: polling %.0f events/s, cdc %.0f events/s (%.2fx)", mode.Name, i+1, p, c, c/p)
			}
			b.ReportMetric(median(polling), "polling-events/s")
			b.ReportMetric(median(cdc), "cdc-events/s")
			b.ReportMetric(median(cdc)/median(polling), "cdc/polling")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Quantile returns the q-quantile of sorted durations, in milliseconds.
func Quantile(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	return float64(d[min(int(q*float64(len(d))), len(d)-1)].Microseconds()) / 1000
}

// ReportLatency logs and reports p50/p99/max of sorted latencies with a metric prefix.
func ReportLatency(b *testing.B, prefix string, d []time.Duration) {
	b.ReportMetric(Quantile(d, 0.50), prefix+"p50-ms")
	b.ReportMetric(Quantile(d, 0.99), prefix+"p99-ms")
	b.ReportMetric(Quantile(d, 1), prefix+"max-ms")
	b.Logf("%s%d events: p50 %.2f ms, p99 %.2f ms, max %.2f ms", prefix, len(d), Quantile(d, 0.5), Quantile(d, 0.99), Quantile(d, 1))
}

// FormatRate formats a rate.
func FormatRate(rate float64) string { return fmt.Sprintf("%.0f events/s", rate) }
