package core

import (
	"context"
	"sync"
)

// Broadcast is an in-process Notifier and Waker: Notify wakes every Wakeups channel at once.
// Adapters embed it so that a local write wakes the local relay. The zero value is ready.
type Broadcast struct {
	mu   sync.Mutex
	subs map[chan struct{}]struct{}
}

// Notify implements Notifier. It never blocks and never fails.
func (b *Broadcast) Notify(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
	return nil
}

// Wakeups implements Waker. The channel is buffered by one: notifications that arrive while a
// wake-up is pending are merged.
func (b *Broadcast) Wakeups(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.subs == nil {
		b.subs = map[chan struct{}]struct{}{}
	}
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	context.AfterFunc(ctx, func() {
		b.mu.Lock()
		delete(b.subs, ch)
		b.mu.Unlock()
	})
	return ch, nil
}
