package testkit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Recorder is a core.Sink that acknowledges every message and records (ID, partition key) in
// the order it acknowledged them; CheckDeliveries checks what it got.
type Recorder struct {
	mu  sync.Mutex
	got []Delivery
}

// Send implements core.Sink.
func (r *Recorder) Send(_ context.Context, msgs []core.Message) []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.got = append(r.got, Delivery{ID: m.ID, Key: m.PartitionKey})
	}
	return make([]error, len(msgs))
}

// Snapshot returns what was acknowledged so far, in order.
func (r *Recorder) Snapshot() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.got...)
}

// StartRelay runs r until the returned stop is called (stop waits for Run to return); an error
// Run returns before that fails t.
func StartRelay(t testing.TB, ctx context.Context, r *core.Relay) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(rctx); err != nil && rctx.Err() == nil {
			t.Errorf("relay %s: %v", r.Owner(), err)
		}
	}()
	return func() { cancel(); <-done }
}

// AwaitAll waits until r has acknowledged at least n distinct IDs and drained reports true, at
// most within; it reports whether both held. (Check what was acknowledged with
// CheckDeliveries.)
func (r *Recorder) AwaitAll(n int, drained func() bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		seen := map[string]bool{}
		for _, d := range r.Snapshot() {
			seen[d.ID] = true
		}
		if len(seen) >= n && drained() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Written records the IDs that writes committed, per partition key in commit order. It runs one
// write at a time (a write holds its turn through its commit), so that the commit order of a
// key's events is their write order, what CheckDeliveries compares first deliveries with.
type Written struct {
	mu   sync.Mutex
	want map[string][]string
}

// Write commits one write of key (a Writer) and records its IDs.
func (w *Written) Write(ctx context.Context, write func(context.Context, string) ([]string, error), key string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids, err := write(ctx, key)
	if err == nil {
		if w.want == nil {
			w.want = map[string][]string{}
		}
		w.want[key] = append(w.want[key], ids...)
	}
	return err
}

// Go starts, in done, a writer named name that writes the keys k0 to k39 in turn, a
// millisecond apart, until stop is set; a failed write fails t and ends it.
func (w *Written) Go(t testing.TB, ctx context.Context, name string, write func(context.Context, string) ([]string, error), stop *atomic.Bool, done *sync.WaitGroup) {
	done.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if err := w.Write(ctx, write, fmt.Sprintf("k%d", i%40)); err != nil {
				t.Errorf("%s writer: %v", name, err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// ByKey returns what was recorded: per key, the IDs in commit order.
func (w *Written) ByKey() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]string, len(w.want))
	for k, ids := range w.want {
		out[k] = slices.Clone(ids)
	}
	return out
}

// Total is how many IDs were recorded.
func (w *Written) Total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, ids := range w.want {
		n += len(ids)
	}
	return n
}
