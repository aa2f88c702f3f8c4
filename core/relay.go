package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"
)

// RelayOptions configures a Relay. Zero fields take their documented defaults.
type RelayOptions struct {
	// Owner names this worker in lane leases. Default: "<hostname>-<pid>-<random hex>".
	// Two running relays must never share an owner.
	Owner string
	// LeaseTTL is how long a lane lease and the worker's heartbeat last without renewal.
	// Default DefaultLeaseTTL (30s).
	LeaseTTL time.Duration
	// RenewInterval is how often leases are renewed and lanes rebalanced. Default LeaseTTL/3.
	// Must be shorter than LeaseTTL.
	RenewInterval time.Duration
	// PollInterval is how long the relay sleeps when it found nothing to deliver (a wake-up ends
	// the sleep early). Default DefaultPollInterval (100ms).
	PollInterval time.Duration
	// BatchSize is the most records fetched and sent at once. Default DefaultBatchSize (1000); at
	// most MaxBatchSize.
	BatchSize int
	// InFlight is how many batches the relay keeps in flight at once. The held lanes are split
	// between InFlight loops (lane mod InFlight), each fetching, sending and settling its own
	// batches, so that one loop's fetch and settle overlap another's send (a broker's latency is
	// paid InFlight times over in parallel) while a lane still has one batch in flight at a time:
	// order per key and the prefix rule hold as with one loop. The Sink is then called from up
	// to InFlight goroutines at once. Default 4; 1 is one batch at a time; at most MaxInFlight.
	InFlight int
	// MaxRate is the most records per second the relay fetches and sends, summed over its
	// InFlight loops (a fleet of N relays sends up to N × MaxRate). A loop that fetched a batch
	// of n records waits before sending it until the relay's budget covers them: over any
	// period t the relay sends at most BatchSize + MaxRate × t records. A catch-up then drains
	// a backlog at that pace and leaves the database's time to the producers writing meanwhile
	// (BENCHMARKS.md "Capacity model"). A Shutdown during the wait does not send the batch.
	// Default 0: no cap (the adaptive drain, FixedRate, still limits a catch-up while producers
	// write).
	MaxRate int
	// FixedRate turns the adaptive drain off: the relay then sends as fast as the store and
	// the sink allow, up to MaxRate. By default, while producers write to the outbox, a
	// catch-up leaves them the database: the relay holds the database time it takes (its
	// Store.Fetch and Store.Settle calls, waits included, summed over its loops) to 0.4 s per
	// second. Every second in which it took more, its rate becomes what it achieved times
	// 0.4 / the time taken, but never below 3 times the producers' rate (so the backlog
	// drains while they write) nor one batch per second; below 0.3 a limit grows again by a
	// fifth plus a batch, up to MaxRate (the ceiling when set) or unlimited. While nobody
	// writes, nothing is limited: a drain alone takes the database. The producers' rate is
	// read once a second from the store (driver.IngressCounter, which every adapter of this
	// module implements); a store without it is never limited. The database time grows with
	// the relay's rate and with how long the database makes each statement wait, which the
	// producers share; a slow broker lengthens sends, which do not count, and is never taken
	// for a busy database. RelayStats.RateLimit and RateCuts show what it did. Failure modes: a
	// database made slow by something else (a vacuum, a backup, a neighbour) also slows the
	// drain while producers write, and a drain at 3 times their rate may still take more than
	// 0.4 s per second (the producers then share the database with it). Default false.
	FixedRate bool
	// Retry decides backoff and parking of failed events. NewRelay refuses a policy that
	// RetryPolicy.Check refuses.
	Retry RetryPolicy
	// BreakerThreshold is how many sends in a row must fail entirely (retryable errors) before
	// the relay stops fetching for a while. Default DefaultBreakerThreshold (5).
	BreakerThreshold int
	// BreakerMaxDelay caps the pause of an open breaker: it starts at PollInterval and doubles
	// after every pause that did not end with a send that succeeded (a cycle that fetched
	// nothing counts: the failed events were waiting out their retry delay). Committed events
	// do not wake an open breaker. The relay logs relay_breaker_open (WARN) once when the
	// breaker opens and relay_breaker_closed (INFO) once when a send succeeds again; Health
	// reports ErrBreakerOpen in between. Default DefaultBreakerMaxDelay (30s).
	BreakerMaxDelay time.Duration
	// DeleteOnPublish deletes rows once acknowledged instead of setting PublishedAt.
	// Default false.
	DeleteOnPublish bool
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider records a span per batch sent ("publish outbox", kind producer), linked
	// to the producers' spans whose trace context Outbox.Write stored in the events' headers.
	// Default nil: the global provider (otel.GetTracerProvider), a no-op until set.
	TracerProvider trace.TracerProvider
	// Propagator reads that trace context. Default nil: the global propagator.
	Propagator propagation.TextMapPropagator
	// MeterProvider receives the relay's instruments: outboxkit.relay.send.duration (seconds
	// per Sink.Send), outboxkit.relay.fetch.duration (seconds per Store.Fetch that returned
	// records), outboxkit.relay.settle.duration (seconds per Store.Settle),
	// outboxkit.relay.batch.size (records per send),
	// outboxkit.relay.publish.latency (seconds from each acknowledged record's CreatedAt,
	// database clock, to the acknowledgement, the relay's clock; negative skew counts as 0) and
	// outboxkit.relay.settled ({event}, attribute outboxkit.outcome = published | failed |
	// parked), outboxkit.relay.send.errors ({event}, records a send did not deliver, attribute
	// error.type = timeout | rejected | not_acknowledged | _OTHER), outboxkit.relay.lane.moves
	// (lanes claimed), outboxkit.relay.lease.expiries (lanes claimed from an expired lease) and
	// outboxkit.relay.resent (acknowledged records whose mark a lost lease refused: sent again
	// by the lane's new owner). The counters start at 0 for every attribute value. Their only
	// other attribute is outboxkit.relay.kind (polling): never an event id or partition key.
	// Default nil: the global provider (otel.GetMeterProvider), a no-op until set.
	MeterProvider metric.MeterProvider

	now func() time.Time // test hook (internal/testhook.SetClock); nil: the database clock
}

// MaxInFlight bounds RelayOptions.InFlight (MaxLanes: a loop without a lane idles).
const MaxInFlight = MaxLanes

// DefaultInFlight is the default of RelayOptions.InFlight.
const DefaultInFlight = 4

// RelayStats counts what a relay did since it was created.
type RelayStats struct {
	Sends     uint64 // Sink.Send calls
	Published uint64 // records marked published
	Failures  uint64 // failed attempts recorded
	Parked    uint64 // records parked
	ClaimLost uint64 // settles refused because a lease was lost
	Lanes     int    // lanes held now
	// Generation is the publisher generation the relay runs under (0 before Run acquired it).
	Generation int64
	// Resent counts records the sink acknowledged whose mark a lost lease refused: the lane's
	// new owner sends them again (duplicates, never losses).
	Resent uint64
	// LaneMoves counts lanes claimed (each claim moves a lane to a new lease) and
	// LeaseExpiries those of them taken over from an expired lease (Lease.TakenOver).
	LaneMoves, LeaseExpiries uint64
	// Fetches counts Store.Fetch calls that returned records; FetchTime, SendTime and
	// SettleTime are the wall time spent in those fetches, in Sink.Send (routing included) and
	// in Store.Settle, summed over every loop (with InFlight loops they overlap, so their sum
	// can exceed the time the relay ran). Divide by Fetches (or Sends) for the time per batch.
	Fetches                         uint64
	FetchTime, SendTime, SettleTime time.Duration
	// PaceTime is the time the loops waited for RelayOptions.MaxRate's budget (or the
	// adaptive drain's), summed over every loop: a PaceTime that grows with the run says the
	// limit holds the relay back.
	PaceTime time.Duration
	// RateLimit is the records per second that the adaptive drain (RelayOptions.FixedRate)
	// allows now: MaxRate while it has not cut below it, 0 without a MaxRate and no limit in
	// force (and always 0 with FixedRate). RateCuts is how many times it cut the rate.
	RateLimit float64
	RateCuts  uint64
}

// Relay delivers committed outbox events to a sink, at least once, in order per partition key.
// Run several relays (processes or goroutines) against one outbox: lanes are leased so that
// each lane has one publisher at a time, and every mark is fenced by the lease generation.
type Relay struct {
	store  driver.RelayStore
	sink   Sink
	router Router
	o      RelayOptions
	log    *slog.Logger

	mu     sync.Mutex
	leases map[int]driver.Lease
	lanes  int
	kicks  []chan struct{} // one per loop: lanes were claimed, or a wake-up arrived
	// busy holds the lanes of the batches in flight; a lane given up while busy waits in
	// releasing until its batch is settled, so that a rebalance never resends it.
	busy      map[int]bool
	releasing []driver.Lease

	k         leaseKeeper   // its lane calls and publisher generation
	fenced    chan struct{} // closed when a newer publisher generation fenced this relay
	fenceOnce sync.Once

	gate      runGate // Run's session: Shutdown drains it (fetch no more) or cancels its context
	healthErr atomic.Pointer[error]
	openLoops atomic.Int32 // loops whose breaker is open; the relay's breaker is open when > 0

	inst  *relayInstruments
	pace  *rate.Limiter // MaxRate's and the adaptive drain's budget; nil with neither
	ctl   *rateControl  // the adaptive drain's law; nil with FixedRate
	stats struct {
		settleCounters
		sends, claimLost atomic.Uint64
		moves            laneCounters
		fetches          atomic.Uint64
		fetchNs, sendNs  atomic.Int64
		settleNs, paceNs atomic.Int64
	}
}

// NewRelay returns a relay that reads store and sends to sink through router. opts may be nil.
func NewRelay(store driver.RelayStore, sink Sink, router Router, opts *RelayOptions) (*Relay, error) {
	if store == nil {
		return nil, &OptionError{Field: "store", Reason: "must not be nil"}
	}
	if sink == nil {
		return nil, &OptionError{Field: "sink", Reason: "must not be nil"}
	}
	if err := checkRouter(router); err != nil {
		return nil, err
	}
	var o RelayOptions
	if opts != nil {
		o = *opts
	}
	if err := leaseDefaults(&o.Owner, &o.LeaseTTL, &o.RenewInterval, &o.BatchSize, &o.Retry); err != nil {
		return nil, err
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PollInterval < 0 {
		return nil, &OptionError{Field: "PollInterval", Reason: "must be positive"}
	}
	if o.InFlight == 0 {
		o.InFlight = DefaultInFlight
	}
	if err := driver.CheckCount("InFlight", o.InFlight, MaxInFlight); err != nil {
		return nil, err
	}
	if o.MaxRate < 0 {
		return nil, &OptionError{Field: "MaxRate", Reason: "must not be negative (0: no limit)"}
	}
	if o.BreakerThreshold < 0 {
		return nil, &OptionError{Field: "BreakerThreshold", Reason: fmt.Sprintf("must not be negative (0: the default %d)", DefaultBreakerThreshold)}
	}
	if o.BreakerThreshold == 0 {
		o.BreakerThreshold = DefaultBreakerThreshold
	}
	if o.BreakerMaxDelay < 0 {
		return nil, &OptionError{Field: "BreakerMaxDelay", Reason: fmt.Sprintf("must not be negative (0: the default %s)", DefaultBreakerMaxDelay)}
	}
	if o.BreakerMaxDelay == 0 {
		o.BreakerMaxDelay = DefaultBreakerMaxDelay
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	inst, err := newRelayInstruments(o.MeterProvider, "polling")
	if err != nil {
		return nil, err
	}
	kicks := make([]chan struct{}, o.InFlight)
	for i := range kicks {
		kicks[i] = make(chan struct{}, 1)
	}
	var pace *rate.Limiter
	if o.MaxRate > 0 {
		pace = rate.NewLimiter(rate.Limit(o.MaxRate), o.BatchSize)
	}
	var ctl *rateControl
	if !o.FixedRate {
		if pace == nil {
			pace = rate.NewLimiter(rate.Inf, o.BatchSize)
		}
		ctl = newRateControl(pace, o.MaxRate, o.BatchSize)
	}
	return &Relay{
		store: store, sink: sink, router: router, o: o, inst: inst, pace: pace, ctl: ctl,
		k:      leaseKeeper{store: store, owner: o.Owner, ttl: o.LeaseTTL, clock: o.now, inst: inst},
		log:    o.Logger.With("owner", o.Owner),
		leases: map[int]driver.Lease{},
		kicks:  kicks,
		busy:   map[int]bool{},
		fenced: make(chan struct{}),
		gate:   newRunGate(),
	}, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Owner returns the name this relay uses in lane leases.
func (r *Relay) Owner() string { return r.o.Owner }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	r.mu.Lock()
	n := len(r.leases)
	r.mu.Unlock()
	var (
		limit float64
		cuts  uint64
	)
	if r.ctl != nil {
		limit, cuts = r.ctl.state()
	}
	return RelayStats{
		Sends: r.stats.sends.Load(), Published: r.stats.published.Load(),
		Failures: r.stats.failures.Load(), Parked: r.stats.parked.Load(),
		ClaimLost: r.stats.claimLost.Load(), Lanes: n, Generation: r.k.gen.Load(),
		Resent: r.stats.moves.resent.Load(), LaneMoves: r.stats.moves.claimed.Load(), LeaseExpiries: r.stats.moves.expired.Load(),
		Fetches: r.stats.fetches.Load(), FetchTime: time.Duration(r.stats.fetchNs.Load()),
		SendTime: time.Duration(r.stats.sendNs.Load()), SettleTime: time.Duration(r.stats.settleNs.Load()),
		PaceTime:  time.Duration(r.stats.paceNs.Load()),
		RateLimit: limit, RateCuts: cuts,
	}
}

func (r *Relay) now() time.Time { return r.k.now() }

// Run delivers events until ctx is cancelled, then releases its leases and returns nil.
// Store and sink errors are logged and retried; Run returns an error only when it cannot start
// (e.g. the schema's lane count is invalid) or when it was fenced.
//
// At start the relay joins the outbox's polling publisher generation, or takes a new one when
// the current publisher is a CDC relay (which is thereby fenced: it stops at its next renewal and
// hands its lanes over). When a newer generation fences this relay in turn (a CDC relay started),
// it finishes the batch in flight, releases its lanes and returns an error wrapping ErrFenced.
//
// Cancelling ctx is a hard stop: a batch in flight is abandoned (its settle fails with the
// cancelled context) and its records are sent again later, by this relay or another. Shutdown
// is the graceful stop.
func (r *Relay) Run(ctx context.Context) error {
	ctx, hardStop := context.WithCancel(ctx)
	defer hardStop()
	end, ok := r.gate.start(hardStop)
	if !ok {
		return fmt.Errorf("outbox: relay %s: %w", r.o.Owner, ErrRelayRunning)
	}
	defer end()
	if r.gate.isDraining() {
		return nil
	}

	lanes, err := r.store.LaneCount(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return storeError("outbox: relay: lane count", err)
	}
	if lanes < 1 || lanes > MaxLanes {
		return fmt.Errorf("%w: lane count %d out of range", ErrSchemaMismatch, lanes)
	}
	r.lanes = lanes
	pub, err := r.k.acquire(ctx, driver.KindPolling)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outbox: relay: acquire generation: %w", err)
	}
	r.log = r.log.With("publisher_generation", pub.Generation)
	r.log.Info("relay_started", "lanes", lanes, "publisher_since", pub.Since)

	var wake <-chan struct{}
	if w, ok := r.store.(driver.Waker); ok {
		// The listener must end with Run, which can return before ctx ends (fenced).
		wctx, stopWake := context.WithCancel(ctx)
		defer stopWake()
		if wake, err = w.Wakeups(wctx); err != nil {
			r.log.Warn("relay_wakeups_unavailable", "error", err)
			wake = nil
		}
	}

	r.maintain(ctx)
	// The loop stops between rounds, not by cancelling one: a claim or release cancelled
	// halfway can commit unseen, and its lanes would stay leased to this gone relay until the
	// leases expired (LeaseTTL). Only a hard stop (ctx) cancels a round.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { r.maintainLoop(ctx, quit) })
	if wake != nil {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-quit:
					return
				case _, ok := <-wake:
					if !ok {
						return
					}
					r.kickAll()
				}
			}
		})
	}
	if ic, ok := r.store.(driver.IngressCounter); ok && r.ctl != nil {
		wg.Go(func() { r.readIngress(ctx, quit, ic) })
	}
	defer func() {
		close(quit)
		wg.Wait()
		r.leave(context.WithoutCancel(ctx))
	}()

	errs := make(chan error, r.o.InFlight)
	var loops sync.WaitGroup
	for k := range r.o.InFlight {
		loops.Go(func() { errs <- r.loop(ctx, k) })
	}
	loops.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	if r.gate.isDraining() && ctx.Err() == nil {
		r.log.Info("relay_drained")
	}
	return nil
}

// ingressWarnAfter is how many readings of the producers' count in a row must fail before the
// relay logs it at WARN (a busy pool may delay one; each failure is logged at DEBUG).
const ingressWarnAfter = 10

// readIngress gives the adaptive drain the producers' rate: it reads ic once per window until
// ctx ends or quit closes. A failed reading counts as none (nothing is limited until readings
// succeed again).
func (r *Relay) readIngress(ctx context.Context, quit <-chan struct{}, ic driver.IngressCounter) {
	t := time.NewTicker(adaptiveWindow)
	defer t.Stop()
	failed := 0 // readings in a row that failed
	for {
		rctx, cancel := context.WithTimeout(ctx, adaptiveWindow)
		n, err := ic.Ingress(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		r.ctl.ingress(time.Now(), n, err == nil)
		switch {
		case err == nil:
			failed = 0
		case failed+1 == ingressWarnAfter:
			r.log.Warn("relay_ingress_unavailable", "error", err, "failed_readings", ingressWarnAfter,
				"effect", "the adaptive drain limits nothing until the producers' count can be read")
			failed++
		default:
			r.log.Debug("relay_ingress_failed", "error", err)
			failed++
		}
		select {
		case <-ctx.Done():
			return
		case <-quit:
			return
		case <-t.C:
		}
	}
}

// loop is one of the relay's InFlight delivery loops: it delivers the held lanes l with
// l mod InFlight = k until ctx ends, the relay drains, or it is fenced (an error).
func (r *Relay) loop(ctx context.Context, k int) error {
	fails := 0              // sends in a row that failed entirely
	var pause time.Duration // the open breaker's pause; 0 while it is closed
	var openedAt time.Time
	defer func() {
		if pause > 0 {
			r.breakerClosed(openedAt, false)
		}
	}()
	for ctx.Err() == nil && !r.gate.isDraining() {
		if r.isFenced() {
			return fmt.Errorf("outbox: relay %s: publisher generation %d: %w", r.o.Owner, r.k.gen.Load(), ErrFenced)
		}
		began := time.Now()
		n, allFailed, err := r.cycle(ctx, k)
		if err == nil && n > 0 {
			if allFailed {
				fails++
			} else {
				fails = 0
			}
		}
		if err != nil && ctx.Err() == nil {
			r.log.Warn("relay_cycle_failed", "error", err)
		}
		if err == nil && n >= r.o.BatchSize && fails == 0 {
			continue // a full batch: more is probably waiting
		}
		// Poll every PollInterval, the cycle included, not PollInterval after each cycle.
		delay := max(r.o.PollInterval-time.Since(began), 0)
		// The breaker: it opens after BreakerThreshold sends in a row failed entirely and
		// closes at the first send that did not. While it is open, every pause that ends
		// without such a send doubles the next one (up to BreakerMaxDelay), whether the cycle
		// after it sent and failed or fetched nothing (the failed events wait out their retry
		// delay): either way nothing showed that the sink recovered.
		kick := r.kicks[k]
		switch open := fails >= r.o.BreakerThreshold; {
		case open && pause == 0:
			pause, openedAt = r.o.PollInterval, time.Now()
			if r.openLoops.Add(1) == 1 {
				r.log.Warn("relay_breaker_open", "consecutive_failures", fails, "pause", pause)
			}
		case open:
			pause = min(2*pause, r.o.BreakerMaxDelay)
			r.log.Debug("relay_breaker_pause", "consecutive_failures", fails, "pause", pause)
		case pause > 0:
			pause = 0
			r.breakerClosed(openedAt, true)
		}
		if pause > 0 {
			delay = pause
			kick = nil // committed events do not cut the pause short
		} else if err != nil {
			delay = max(delay, time.Second)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-kick:
		case <-r.fenced:
		case <-r.gate.draining:
		}
		t.Stop()
	}
	return nil
}

// paced takes n records (at most BatchSize, the budget's capacity) from MaxRate's budget,
// waiting until it covers them; at once without a MaxRate. It reports false when ctx ended, the
// relay began draining or was fenced meanwhile: the batch is then not sent.
func (r *Relay) paced(ctx context.Context, n int) bool {
	if r.pace == nil {
		return true
	}
	d := r.pace.ReserveN(time.Now(), n).Delay()
	if d <= 0 {
		return true
	}
	began := time.Now()
	defer func() {
		waited := time.Since(began)
		r.stats.paceNs.Add(int64(waited))
		r.inst.paced(ctx, waited)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-r.fenced:
	case <-r.gate.draining:
	}
	return false
}

// kickAll wakes every loop (lanes were claimed, or events were committed).
func (r *Relay) kickAll() {
	for _, c := range r.kicks {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// Shutdown stops the relay gracefully: Run fetches no more, lets the batch in flight finish its
// send, settles it (marking what the sink acknowledged, so that nothing acknowledged is sent
// again), releases its lanes and returns nil. Shutdown waits for that, or until ctx ends: then
// it cancels Run's context (a hard stop, as cancelling Run's own context) and returns ctx's
// error once Run has returned. Give ctx a deadline longer than one send and settle.
//
// Shutdown is final: a Run called after it returns at once. Shutdown of a relay that is not
// running returns nil.
func (r *Relay) Shutdown(ctx context.Context) error {
	if err := r.gate.shutdown(ctx); err != nil {
		return fmt.Errorf("outbox: relay %s: shutdown: %w", r.o.Owner, err)
	}
	return nil
}

// Health reports whether the relay is publishing normally; nil means healthy. It returns an
// error wrapping:
//   - ErrNotRunning before Run has acquired its publisher generation, and after Run returned;
//   - ErrFenced once a newer publisher generation fenced the relay;
//   - ErrBreakerOpen while the breaker pauses fetching after BreakerThreshold failed sends;
//   - the store's error while the last heartbeat failed (the database is unreachable).
//
// It is cheap (no I/O): readiness probes may call it often.
func (r *Relay) Health() error {
	switch {
	case !r.gate.isRunning() || r.k.gen.Load() == 0:
		return fmt.Errorf("outbox: relay %s: %w", r.o.Owner, ErrNotRunning)
	case r.isFenced():
		return fmt.Errorf("outbox: relay %s: generation %d: %w", r.o.Owner, r.k.gen.Load(), ErrFenced)
	case r.openLoops.Load() > 0:
		return fmt.Errorf("outbox: relay %s: %w", r.o.Owner, ErrBreakerOpen)
	}
	if p := r.healthErr.Load(); p != nil {
		return fmt.Errorf("outbox: relay %s: heartbeat: %w", r.o.Owner, *p)
	}
	return nil
}

func (r *Relay) isFenced() bool {
	select {
	case <-r.fenced:
		return true
	default:
		return false
	}
}

// storeFailed logs a failed lane call; ErrFenced fences the relay instead.
func (r *Relay) storeFailed(ctx context.Context, event string, err error) {
	if errors.Is(err, ErrFenced) {
		r.fenceOnce.Do(func() {
			r.log.Warn("relay_fenced", "error", err)
			close(r.fenced)
		})
		return
	}
	if ctx.Err() == nil {
		r.log.Warn(event, "error", err)
	}
}

// breakerClosed counts a loop's breaker closed; the relay's breaker closes with the last open
// loop's, and logs it once when a send succeeded (recovered), not when Run ends.
func (r *Relay) breakerClosed(openedAt time.Time, recovered bool) {
	if r.openLoops.Add(-1) == 0 && recovered {
		r.log.Info("relay_breaker_closed", "open_for", time.Since(openedAt).Round(time.Millisecond))
	}
}

// maintainLoop renews and rebalances every RenewInterval until quit is closed or ctx ends.
// While this relay holds more or fewer lanes than its fair share, and during its first
// RenewInterval (when relays started together discover each other), it does so every
// max(PollInterval, 250ms) instead, so that a lane another relay released, or one this relay
// must give up, changes hands within a fraction of a second. A lane given up while a batch of
// it is in flight is released only once that batch is settled, so a rebalance resends
// nothing. A lane lost otherwise (its lease expired or was taken over) makes the settle fail
// (ErrClaimLost): the new owner resends it, a duplicate and never a loss.
func (r *Relay) maintainLoop(ctx context.Context, quit <-chan struct{}) {
	fast := min(r.o.RenewInterval, max(r.o.PollInterval, 250*time.Millisecond))
	started := time.Now()
	t := time.NewTimer(fast)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-quit:
			return
		case <-t.C:
		}
		balanced := r.maintain(ctx)
		next := r.o.RenewInterval
		if !balanced || time.Since(started) < r.o.RenewInterval {
			next = fast
		}
		t.Reset(next)
	}
}

// maintain heartbeats, renews held leases, and claims or releases lanes towards the fair share
// ceil(lanes / live workers). It reports whether the relay now holds exactly its share (or the
// store could not tell).
func (r *Relay) maintain(ctx context.Context) bool {
	live, err := r.k.heartbeat(ctx, r.o.LeaseTTL)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("relay_heartbeat_failed", "error", err)
			r.healthErr.Store(&err)
		}
		live = 0
	} else {
		r.healthErr.Store(nil)
	}
	held := r.snapshot()
	if len(held) > 0 {
		renewed, err := r.k.renew(ctx, held)
		if err != nil {
			r.storeFailed(ctx, "relay_renew_failed", err)
			return true
		}
		r.mu.Lock()
		got := map[int]bool{}
		for _, l := range renewed {
			got[l.Lane] = true
			if cur, ok := r.leases[l.Lane]; ok && cur.Generation == l.Generation {
				r.leases[l.Lane] = l
			}
		}
		for _, l := range held {
			if !got[l.Lane] {
				if cur, ok := r.leases[l.Lane]; ok && cur.Generation == l.Generation {
					delete(r.leases, l.Lane)
				}
				r.log.Warn("relay_lane_lost", "lane", l.Lane, "lease_generation", l.Generation)
			}
		}
		r.mu.Unlock()
	}
	if live < 1 {
		return true
	}
	// The lane count may change while the relay runs (LaneResizer.ResizeLanes, which also ends
	// every lease): the share follows it from the next round. A read that fails keeps the last.
	if n, err := r.store.LaneCount(ctx); err == nil && n >= 1 && n <= MaxLanes && n != r.lanes {
		r.log.Info("relay_lane_count_changed", "lanes", n, "previous", r.lanes)
		r.lanes = n
	}
	share := (r.lanes + live - 1) / live
	held = r.snapshot()
	switch {
	case len(held) < share:
		claimed, takenOver, err := r.k.claim(ctx, share-len(held))
		if err != nil {
			r.storeFailed(ctx, "relay_claim_failed", err)
			return false
		}
		if len(claimed) > 0 {
			r.stats.moves.claimed.Add(uint64(len(claimed)))
			r.stats.moves.expired.Add(uint64(takenOver))
			r.mu.Lock()
			for _, l := range claimed {
				r.leases[l.Lane] = l
			}
			r.mu.Unlock()
			r.log.Debug("relay_lanes_claimed", "count", len(claimed), "live_workers", live)
			r.kickAll()
		}
		return len(held)+len(claimed) >= share
	case len(held) > share:
		slices.SortFunc(held, func(a, b driver.Lease) int { return b.Lane - a.Lane })
		extra := held[:len(held)-share]
		var now []driver.Lease
		r.mu.Lock()
		for _, l := range extra {
			delete(r.leases, l.Lane)
			if r.busy[l.Lane] {
				r.releasing = append(r.releasing, l) // released by cycle once settled
			} else {
				now = append(now, l)
			}
		}
		r.mu.Unlock()
		if len(now) > 0 {
			if err := r.k.release(ctx, now); err != nil {
				if ctx.Err() == nil {
					r.log.Warn("relay_release_failed", "error", err)
				}
				r.keep(now)
			}
		}
		r.log.Debug("relay_lanes_released", "count", len(extra), "live_workers", live)
	}
	return true
}

func (r *Relay) leave(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held := r.snapshot()
	r.mu.Lock()
	clear(r.leases)
	r.mu.Unlock()
	if len(held) > 0 {
		if err := r.k.release(ctx, held); err != nil {
			r.log.Warn("relay_release_failed", "error", err)
		}
	}
	if _, err := r.k.heartbeat(ctx, 0); err != nil {
		r.log.Warn("relay_deregister_failed", "error", err)
	}
}

// HoldsLane reports whether the relay holds the lease of lane now. Lane leases are exclusive
// across every relay of the outbox, so "holds lane 0" elects one process of a fleet for a
// singleton duty such as a cleanup schedule (a lease lost in between only means two runs may
// overlap briefly).
func (r *Relay) HoldsLane(lane int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.leases[lane]
	return ok
}

// settled ends a cycle over leases: it releases the lanes given up while the cycle's batch was
// in flight.
func (r *Relay) settled(ctx context.Context, leases []driver.Lease) {
	r.mu.Lock()
	for _, l := range leases {
		delete(r.busy, l.Lane)
	}
	var rel []driver.Lease
	waiting := r.releasing[:0]
	for _, l := range r.releasing {
		if r.busy[l.Lane] {
			waiting = append(waiting, l)
		} else {
			rel = append(rel, l)
		}
	}
	r.releasing = waiting
	r.mu.Unlock()
	if len(rel) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.k.release(ctx, rel); err != nil {
		r.log.Warn("relay_release_failed", "error", err)
		r.keep(rel)
	}
}

// keep takes back leases whose release failed: the relay renews them and gives them up again
// at its next round (or when it leaves), instead of leaving them leased to a relay that no
// longer knows it holds them until they expire (LeaseTTL).
func (r *Relay) keep(leases []driver.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range leases {
		if _, ok := r.leases[l.Lane]; !ok {
			r.leases[l.Lane] = l
		}
	}
}

func (r *Relay) snapshot() []driver.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshotLocked()
}

func (r *Relay) snapshotLocked() []driver.Lease {
	out := make([]driver.Lease, 0, len(r.leases))
	for _, l := range r.leases {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b driver.Lease) int { return a.Lane - b.Lane })
	return out
}

func (r *Relay) dropLanes(lanes []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range lanes {
		delete(r.leases, l)
	}
}

// dbTime gives the adaptive drain d of database time (a fetch or a settle) that just ended.
func (r *Relay) dbTime(ctx context.Context, d time.Duration) {
	if r.ctl != nil && r.ctl.db(time.Now(), d) {
		r.rateCut(ctx)
	}
}

// rateCut records a cut of the adaptive drain.
func (r *Relay) rateCut(ctx context.Context) {
	r.inst.rateCut(ctx)
	if r.log.Enabled(ctx, slog.LevelDebug) {
		limit, _ := r.ctl.state()
		r.log.Debug("relay_rate_cut", "limit_per_second", limit)
	}
}

// cycle fetches one batch from the held lanes of loop k, sends it and settles the outcomes.
// It returns how many records it fetched, and whether every send attempt of the batch failed
// with a retryable error (a reason to open the loop's breaker).
func (r *Relay) cycle(ctx context.Context, k int) (int, bool, error) {
	r.mu.Lock()
	var leases []driver.Lease
	for _, l := range r.snapshotLocked() {
		if l.Lane%r.o.InFlight == k {
			leases = append(leases, l)
			r.busy[l.Lane] = true
		}
	}
	r.mu.Unlock()
	defer r.settled(ctx, leases)
	if len(leases) == 0 {
		return 0, false, nil
	}
	fetchBegan := time.Now()
	recs, err := r.store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: r.o.BatchSize, Now: r.now()})
	r.dbTime(ctx, time.Since(fetchBegan))
	if err != nil {
		return 0, false, fmt.Errorf("fetch: %w", err)
	}
	if len(recs) == 0 {
		return 0, false, nil
	}
	fetchTime := time.Since(fetchBegan)
	r.stats.fetches.Add(1)
	r.stats.fetchNs.Add(int64(fetchTime))
	r.inst.fetched(ctx, fetchTime)
	if !r.paced(ctx, len(recs)) {
		return 0, false, nil // ended, draining or fenced before sending: nothing to settle
	}

	// Route and send; an unroutable record fails permanently and holds back the rest of its key.
	sctx, span := publishSpan(ctx, r.o.TracerProvider, r.o.Propagator, "outboxkit", recs)
	began := time.Now()
	outcome, sent := send(sctx, r.sink, r.router, recs, r.log)
	r.stats.sendNs.Add(int64(time.Since(began)))
	if r.ctl != nil && r.ctl.sent(time.Now(), len(recs)) {
		r.rateCut(ctx)
	}
	if sent {
		r.inst.sent(ctx, time.Since(began), len(recs))
		r.inst.acked(ctx, time.Now(), recs, outcome)
	}
	endPublishSpan(span, outcome)
	if sent {
		r.stats.sends.Add(1)
	}

	// Decide per record: published, failed (the first failure of its key) or left alone.
	failedKey := map[string]bool{}
	decisions := make([]decision, 0, len(recs))
	allFailed := true
	for i := range recs {
		rec := &recs[i]
		if failedKey[rec.PartitionKey] {
			continue // held back behind an earlier failure of its key; not its fault
		}
		if outcome[i] == nil {
			decisions = append(decisions, decision{seq: rec.Seq, lane: rec.Lane})
			allFailed = false
			continue
		}
		failedKey[rec.PartitionKey] = true
		attempts := rec.Attempts + 1
		permanent := IsPermanent(outcome[i])
		if permanent {
			allFailed = false // the broker answered; not a reason to open the breaker
		}
		f := &driver.Failure{
			Seq: rec.Seq, Lane: rec.Lane, Error: driver.TruncateError(outcome[i].Error()),
			Delay: r.o.Retry.delayAfter(attempts, driver.RetryAfterOf(outcome[i])), Park: permanent || r.o.Retry.Exhausted(attempts),
		}
		if f.Park {
			r.log.Warn("relay_event_parked", "event_id", rec.ID, "partition_key", rec.PartitionKey,
				"attempts", attempts, "error", outcome[i])
		}
		decisions = append(decisions, decision{seq: rec.Seq, lane: rec.Lane, failure: f})
	}
	settleBegan := time.Now()
	err = r.settle(ctx, leases, decisions)
	settleTime := time.Since(settleBegan)
	r.stats.settleNs.Add(int64(settleTime))
	r.dbTime(ctx, settleTime)
	if err != nil {
		return len(recs), allFailed, err
	}
	return len(recs), allFailed, nil
}

// decision is the settlement of one record: published when failure is nil.
type decision struct {
	seq     int64
	lane    int
	failure *driver.Failure
}

// settle records decisions with Store.Settle, fenced by the leases of the lanes involved. When
// some lanes were lost it drops them (their records stay unpublished for the new owner, who
// resends them) and settles the rest again. Losing lanes is a normal hand-over, not an error.
func (r *Relay) settle(ctx context.Context, leases []driver.Lease, decisions []decision) error {
	gone := map[int]bool{}
	for {
		p := driver.SettleParams{Delete: r.o.DeleteOnPublish, Now: r.now()}
		used := map[int]bool{}
		for _, d := range decisions {
			if gone[d.lane] {
				continue
			}
			used[d.lane] = true
			if d.failure == nil {
				p.Published = append(p.Published, d.seq)
			} else {
				p.Failed = append(p.Failed, *d.failure)
			}
		}
		for _, l := range leases {
			if used[l.Lane] {
				p.Leases = append(p.Leases, l)
			}
		}
		if len(p.Leases) == 0 {
			return nil
		}
		began := time.Now()
		err := r.store.Settle(ctx, p)
		r.inst.settledIn(ctx, time.Since(began))
		var lost *driver.LanesLostError
		if errors.As(err, &lost) {
			r.stats.claimLost.Add(1)
			r.dropLanes(lost.Lanes)
			progress := false
			for _, l := range lost.Lanes {
				progress = progress || (used[l] && !gone[l])
				gone[l] = true
			}
			resent := 0
			for _, d := range decisions {
				if d.failure == nil && gone[d.lane] && used[d.lane] {
					resent++
				}
			}
			r.stats.moves.resent.Add(uint64(resent))
			r.inst.lost(ctx, resent)
			r.log.Warn("relay_claim_lost", "lanes", lost.Lanes, "resent", resent)
			if !progress { // the store named no lane of this settle: do not loop forever
				return fmt.Errorf("settle: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		r.stats.count(p)
		r.inst.settled(ctx, p)
		return nil
	}
}
