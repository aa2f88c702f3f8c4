package core

import "context"

// Runner is what Start runs in the background: a *Relay or a *CDCRelay.
type Runner interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

var (
	_ Runner = (*Relay)(nil)
	_ Runner = (*CDCRelay)(nil)
)

// Running is a relay that Start runs in its own goroutine.
type Running struct {
	r    Runner
	done chan struct{}
	err  error // Run's error, set before done is closed
}

// Start runs r.Run(ctx) in a new goroutine and returns at once; Stop stops it gracefully.
// It replaces the usual goroutine, channel and Shutdown call:
//
//	running := core.Start(ctx, relay)
//	defer running.Stop(context.WithoutCancel(ctx)) // or with a deadline
//
// Cancelling ctx is a hard stop, as cancelling Run's context (the batch in flight is sent again
// by the next relay); Stop is the graceful one.
func Start(ctx context.Context, r Runner) *Running {
	s := &Running{r: r, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.err = r.Run(ctx)
	}()
	return s
}

// Stop stops the relay gracefully with its Shutdown (the batch in flight finishes its send and
// is settled, so nothing acknowledged is sent again; the lanes are released) and waits until
// Run returned. It returns Run's error (for example ErrFenced, or the store's error when Run
// could not start), else Shutdown's: ctx's error when ctx ended first, after which Run was
// stopped hard. Give ctx a deadline longer than one send and settle. Stop may be called more
// than once; Run's error is returned each time.
func (s *Running) Stop(ctx context.Context) error {
	serr := s.r.Shutdown(ctx)
	<-s.done
	if s.err != nil {
		return s.err
	}
	return serr
}

// Done is closed when Run has returned: on Stop, on ctx's end, or on an error of Run's own
// (then Err says which).
func (s *Running) Done() <-chan struct{} { return s.done }

// Err returns Run's error once Done is closed, and nil before.
func (s *Running) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}
