package testkit

import (
	"context"
	"sync"
	"testing"

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
