package postgres

import (
	"context"
	"fmt"
	"time"
)

// Notify wakes relays listening on the store's channel. Call it after the producer's
// transaction committed. It returns at once: a background sender issues the NOTIFY from its own
// small transaction (synchronous_commit off, one round trip), never inside a producer's
// transaction, which would serialise producer commits. Calls that arrive while a NOTIFY is in
// flight, or within notifySpacing (2 ms) of its start, are merged into one more NOTIFY after
// it, so producers never wait for notifications and the server sees at most one at a time, and
// at most 500 a second, per Store, whatever the commit rate. A failed
// NOTIFY is logged; a lost notification only delays delivery until the relay's next poll. It
// returns an error only when ctx is already done.
func (s *Store[TTx]) Notify(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: notify: %w", classify(err))
	}
	s.notifyPending.Store(true)
	if s.notifyRunning.CompareAndSwap(false, true) {
		go s.notifyLoop()
	}
	return nil
}

// Flush implements driver.Flusher: it waits until no notification is pending or being sent, or
// until ctx ends (then it returns ctx's error, wrapped). Call it after the last Notify and before
// closing the pool: a NOTIFY still queued when the pool closes is lost.
func (s *Store[TTx]) Flush(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for s.notifyPending.Load() || s.notifyRunning.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres: flush: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// notifySpacing is the least time between the starts of two NOTIFYs of one Store: calls that
// arrive meanwhile are merged into the next. Back to back, a NOTIFY transaction per producer
// commit took a fifth to a third of the producers' rate on 2 cores (BENCHMARKS.md, "Producer
// overhead"); spaced, a wake-up waits at most this much longer.
const notifySpacing = 2 * time.Millisecond

// notifyLoop sends NOTIFY while notifications are pending, at most one per notifySpacing, then
// exits.
func (s *Store[TTx]) notifyLoop() {
	for {
		for s.notifyPending.Load() {
			if wait := notifySpacing - time.Duration(time.Now().UnixNano()-s.notifyLast.Load()); wait > 0 {
				time.Sleep(wait)
			}
			s.notifyPending.Store(false)
			s.notifyLast.Store(time.Now().UnixNano())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := s.db.exec(ctx, s.q.notify); err != nil {
				s.log.Warn("postgres_notify_failed", "channel", s.n.rawChannel, "error", err)
			} else {
				s.notifySent.Add(1)
			}
			cancel()
		}
		s.notifyRunning.Store(false)
		// A Notify between the last Load and the Store above found a sender running and left
		// its notification pending: take over unless another sender already did.
		if !s.notifyPending.Load() || !s.notifyRunning.CompareAndSwap(false, true) {
			return
		}
	}
}

// Wakeups returns a channel that receives after each notification on the store's channel
// (merged while one is pending). It holds one dedicated connection, outside the pool, that
// LISTENs; when that connection fails it reconnects with backoff and sends one wake-up (a
// notification may have been missed). It returns an error only when the first connection
// fails, wrapping ErrPooledConnection when it goes through a pooler (unless
// Options.PoolerKeepsSessions): a relay then logs relay_wakeups_unavailable and polls. The
// goroutine ends, and the connection closes, when ctx ends.
func (s *Store[TTx]) Wakeups(ctx context.Context) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	ready := make(chan error, 1)
	go s.listenLoop(ctx, ch, ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("postgres: wakeups: %w", classify(err))
	}
	return ch, nil
}

func (s *Store[TTx]) listenLoop(ctx context.Context, ch chan struct{}, ready chan<- error) {
	signal := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	first := true
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listen(ctx, func(l listener) error {
			// Through a transaction pooler the LISTEN would hold on a server connection that
			// others then use, and the notifications would never reach this one.
			if _, err := s.sessionPID(ctx, l.conn()); err != nil {
				return err
			}
			if err := l.exec(ctx, s.q.listen); err != nil {
				return err
			}
			if first {
				first = false
				ready <- nil
			} else {
				signal()
			}
			backoff = 100 * time.Millisecond
			for {
				if err := l.wait(ctx); err != nil {
					return err
				}
				signal()
			}
		})
		if first {
			ready <- err
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("postgres_listen_failed", "channel", s.n.rawChannel, "error", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 5*time.Second)
	}
	if first {
		ready <- ctx.Err()
	}
}
