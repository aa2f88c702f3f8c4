package reliability_test

// The producer and the recording sink the tests share, and the check of what was delivered
// against what was committed.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// committed is one event the producer committed.
type committed struct {
	id, key string
	version int64
}

// producer commits, every interval until stop is called, one transaction of four consecutive
// versions of one of keys partition keys (aggregate "order"/kN, AggregateVersion 1, 2, ...
// per key). One goroutine writes, so write order per key is version order.
type producer struct {
	mu     sync.Mutex
	events []committed
	stop   func()
	done   chan struct{}
}

// A failed write ends it and is reported to fail. Writes run on ctx (the test's), not on
// the stop: a write cancelled halfway could commit and still return an error, leaving an
// event delivered that the producer never recorded.
func produce(ctx context.Context, d db, keys int, interval time.Duration, fail func(format string, args ...any)) *producer {
	return produceKeys(ctx, d, "k", keys, interval, fail)
}

// produceKeys is produce with the partition keys named prefix+N.
func produceKeys(ctx context.Context, d db, prefix string, keys int, interval time.Duration, fail func(format string, args ...any)) *producer {
	quit := make(chan struct{})
	p := &producer{done: make(chan struct{})}
	p.stop = func() { close(quit); <-p.done }
	version := make([]int64, keys)
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-quit:
				return
			case <-tick.C:
			}
			k := i % keys
			key := fmt.Sprintf("%s%d", prefix, k)
			evs := make([]core.Event, 4)
			for j := range evs {
				evs[j] = core.Event{AggregateType: "order", AggregateID: key, AggregateVersion: version[k] + int64(j) + 1,
					Type: "order.changed", PartitionKey: key, Payload: []byte(`{}`)}
			}
			out, err := d.write(ctx, evs)
			if err != nil {
				fail("producer: %v", err)
				return
			}
			version[k] += int64(len(evs))
			p.mu.Lock()
			for _, ev := range out {
				p.events = append(p.events, committed{ev.ID, key, ev.AggregateVersion})
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *producer) committed() []committed {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]committed(nil), p.events...)
}

// delivery is one message a sink acknowledged.
type delivery struct {
	id, key string
	version int64
}

// recorder is a sink that acknowledges every message after a random delay of up to maxDelay,
// or that passes them to next and keeps its outcomes, and records what was acknowledged, in
// acknowledgement order.
type recorder struct {
	maxDelay time.Duration
	next     core.Sink
	mu       sync.Mutex
	got      []delivery
	ids      map[string]bool
}

func newRecorder(maxDelay time.Duration) *recorder {
	return &recorder{maxDelay: maxDelay, ids: map[string]bool{}}
}

// recording records what next acknowledges.
func recording(next core.Sink) *recorder {
	return &recorder{next: next, ids: map[string]bool{}}
}

func (r *recorder) Send(ctx context.Context, msgs []core.Message) []error {
	out := make([]error, len(msgs))
	if r.next != nil {
		out = r.next.Send(ctx, msgs)
	} else if r.maxDelay > 0 {
		select {
		case <-ctx.Done():
			return core.Outcomes(len(msgs), ctx.Err())
		case <-time.After(rand.N(r.maxDelay)):
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, m := range msgs {
		if out[i] == nil {
			r.got = append(r.got, delivery{m.ID, m.PartitionKey, m.AggregateVersion})
			r.ids[m.ID] = true
		}
	}
	return out
}

// has reports whether every event of evs was delivered.
func (r *recorder) has(evs []committed) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ev := range evs {
		if !r.ids[ev.id] {
			return false
		}
	}
	return true
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// report is what check found.
type report struct {
	Committed, Deliveries int
	Lost                  int // committed and never delivered
	Unknown               int // delivered and never committed
	Duplicates            int // deliveries of an event already delivered
	// Regressions counts deliveries of a version lower than one of its key delivered before
	// (a re-delivery of an older event after a newer one, or a first delivery out of order).
	Regressions int
	// OrderBreaks counts first deliveries that skipped an earlier version of their key that
	// was not yet delivered: the promise of order per key (first deliveries in write order).
	OrderBreaks int
}

func (r report) String() string {
	return fmt.Sprintf("committed %d, deliveries %d, lost %d, unknown %d, duplicates %d, regressions %d, first-delivery order breaks %d",
		r.Committed, r.Deliveries, r.Lost, r.Unknown, r.Duplicates, r.Regressions, r.OrderBreaks)
}

// check compares the recorder's deliveries with what was committed.
func (r *recorder) check(evs []committed) report {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := report{Committed: len(evs), Deliveries: len(r.got)}
	known := make(map[string]committed, len(evs))
	for _, ev := range evs {
		known[ev.id] = ev
	}
	seen := map[string]bool{}
	top := map[string]int64{}  // highest version delivered per key
	next := map[string]int64{} // highest version delivered per key with every lower one before it
	for _, d := range r.got {
		if _, ok := known[d.id]; !ok {
			rep.Unknown++
			continue
		}
		if d.version < top[d.key] {
			rep.Regressions++
		}
		top[d.key] = max(top[d.key], d.version)
		if seen[d.id] {
			rep.Duplicates++
			continue
		}
		seen[d.id] = true
		if d.version != next[d.key]+1 {
			rep.OrderBreaks++
		}
		next[d.key] = max(next[d.key], d.version)
	}
	for _, ev := range evs {
		if !seen[ev.id] {
			rep.Lost++
		}
	}
	return rep
}

// waitDelivered waits until every event of evs was delivered, or bound passed; it returns how
// long that took and whether it happened.
func waitDelivered(ctx context.Context, r *recorder, evs []committed, bound time.Duration) (time.Duration, bool) {
	began := time.Now()
	for !r.has(evs) {
		if time.Since(began) > bound || ctx.Err() != nil {
			return time.Since(began), false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(began), true
}

// holdFault keeps a fault on for hold. When it must let deliveries go on (progress) and count
// has not moved by then, it keeps the fault on until count moves, at most bound beyond hold:
// the property is progress under a degraded link, not progress within a fixed window (a cycle
// of a dozen round trips of 150–200 ms each, behind a rebalance, can take a loaded machine
// longer than a 3 s fault). It returns how much count moved and how long the fault lasted.
func holdFault(ctx context.Context, hold, bound time.Duration, progress bool, count func() int) (during int, lasted time.Duration) {
	began, start := time.Now(), count()
	time.Sleep(hold)
	for progress && count() == start && time.Since(began) < hold+bound && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	return count() - start, time.Since(began)
}
