package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// chaosLeaseTTL is the workers' lease with --chaos: short, so that a replacement takes a
// crashed worker's lanes over quickly. Without chaos the workers use the library's default
// (core.DefaultLeaseTTL), long enough that a loaded machine loses no lease (no claim_lost).
const chaosLeaseTTL = 2 * time.Second

// leaseTTL is the workers' lease.
func (c demoConfig) leaseTTL() time.Duration {
	if c.chaos {
		return chaosLeaseTTL
	}
	return core.DefaultLeaseTTL
}

// renewInterval is the workers' RenewInterval: 0 (the library's, LeaseTTL/3) without chaos.
func (c demoConfig) renewInterval() time.Duration {
	if c.chaos {
		return chaosLeaseTTL / 5
	}
	return 0
}

type worker struct {
	relay  *core.Relay
	store  *conformance.CrashStore
	cancel context.CancelFunc
	done   chan struct{}
}

// supervisor keeps cfg.workers relays running; with chaos it kills one at random every few
// hundred milliseconds (half the time a crash that leaves its leases to expire, half a clean
// stop that releases them) and starts a replacement with a new owner name.
type supervisor struct {
	store  driver.RelayStore
	sink   core.Sink
	router core.Router
	logger *slog.Logger
	cfg    demoConfig
	rnd    *rand.Rand

	mu       sync.Mutex
	workers  []*worker
	retired  []*core.Relay
	started  int
	kills    atomic.Int64
	chaosOff chan struct{}
	loop     sync.WaitGroup
}

func (s *supervisor) spawn(ctx context.Context) (*worker, error) {
	s.started++
	store := conformance.NewCrashStore(s.store)
	r, err := core.NewRelay(store, s.sink, s.router, &core.RelayOptions{
		Owner:         fmt.Sprintf("worker-%d", s.started),
		LeaseTTL:      s.cfg.leaseTTL(),
		RenewInterval: s.cfg.renewInterval(),
		PollInterval:  20 * time.Millisecond,
		BatchSize:     s.cfg.batch,
		Retry:         core.RetryPolicy{Initial: 5 * time.Millisecond, Max: 200 * time.Millisecond, Deadline: time.Hour},
		Logger:        s.logger,
	})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{relay: r, store: store, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		if err := r.Run(wctx); err != nil {
			s.logger.Error("demo_relay_failed", "error", err)
		}
	}()
	return w, nil
}

func (s *supervisor) start(ctx context.Context) {
	s.chaosOff = make(chan struct{})
	s.mu.Lock()
	for i := 0; i < s.cfg.workers; i++ {
		w, err := s.spawn(ctx)
		if err != nil {
			panic(err) // options are constants; a failure here is a programming error
		}
		s.workers = append(s.workers, w)
	}
	s.mu.Unlock()
	if !s.cfg.chaos {
		return
	}
	s.loop.Go(func() {
		for {
			t := time.NewTimer(time.Duration(150+s.rnd.IntN(450)) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-s.chaosOff:
				t.Stop()
				return
			case <-t.C:
			}
			s.mu.Lock()
			i := s.rnd.IntN(len(s.workers))
			old := s.workers[i]
			if s.rnd.IntN(2) == 0 {
				old.store.Crash() // crash: nothing more reaches the database
			}
			old.cancel()
			<-old.done
			s.kills.Add(1)
			s.retired = append(s.retired, old.relay)
			w, err := s.spawn(ctx)
			if err != nil {
				panic(err)
			}
			s.workers[i] = w
			s.mu.Unlock()
		}
	})
}

func (s *supervisor) stopChaos() {
	if s.cfg.chaos {
		close(s.chaosOff)
		s.loop.Wait()
	}
}

func (s *supervisor) wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workers {
		w.cancel()
		<-w.done
	}
}

func (s *supervisor) claimLost() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, w := range s.workers {
		n += w.relay.Stats().ClaimLost
	}
	for _, r := range s.retired {
		n += r.Stats().ClaimLost
	}
	return n
}
