package core

import (
	"context"
	"sync"
)

// runGate is the run-state both relays share: one session at a time, a graceful drain asked by
// Shutdown, and a hard stop once Shutdown's deadline passes.
type runGate struct {
	draining  chan struct{} // closed by shutdown: take no more work
	drainOnce sync.Once
	mu        sync.Mutex
	running   bool               // a session is between start and return
	hardStop  context.CancelFunc // ends the running session now
	done      chan struct{}      // closed when the running session returns
}

func newRunGate() runGate { return runGate{draining: make(chan struct{})} }

// start registers a session that hardStop ends. It returns false when one is running already;
// otherwise the caller must call the returned end when the session returns.
func (g *runGate) start(hardStop context.CancelFunc) (end func(), ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		return nil, false
	}
	done := make(chan struct{})
	g.running, g.hardStop, g.done = true, hardStop, done
	return func() {
		g.mu.Lock()
		g.running = false
		close(done)
		g.mu.Unlock()
	}, true
}

// isRunning reports whether a session is running.
func (g *runGate) isRunning() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

// shutdown asks for a drain and waits for the running session to return; when ctx ends first it
// stops the session hard, waits for it, and returns ctx's error. Without a running session it
// returns nil at once.
func (g *runGate) shutdown(ctx context.Context) error {
	g.drainOnce.Do(func() { close(g.draining) })
	g.mu.Lock()
	running, hardStop, done := g.running, g.hardStop, g.done
	g.mu.Unlock()
	if !running {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		hardStop()
		<-done
		return ctx.Err()
	}
}

// isDraining reports whether shutdown was asked.
func (g *runGate) isDraining() bool {
	select {
	case <-g.draining:
		return true
	default:
		return false
	}
}
