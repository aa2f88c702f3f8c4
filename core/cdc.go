package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// CDCOptions configures a CDCRelay. Zero fields take their documented defaults.
type CDCOptions struct {
	// Owner names the relay in its lane leases and as the publisher's holder. Default
	// "<hostname>-<pid>-<random hex>".
	Owner string
	// LeaseTTL is how long the relay's hold on the lanes lasts without renewal. Default
	// DefaultLeaseTTL (30s).
	LeaseTTL time.Duration
	// RenewInterval is how often the leases are renewed and the generation checked. Default
	// LeaseTTL/3; it bounds how long a fenced CDC relay goes on publishing.
	RenewInterval time.Duration
	// BatchSize is the most records sent at once. The relay sends what the log has delivered
	// as soon as it has it; it never waits to fill a batch. Default DefaultBatchSize (1000); at most MaxBatchSize.
	// Marks and checkpoints are written behind the sends: the relay goes on sending until four
	// batches' worth of sent records wait for their marks.
	BatchSize int
	// Retry decides the backoff of failed sends and when an event is parked. A CDC relay
	// retries in place: the log is one ordered stream, so later events wait. Default: as
	// RelayOptions.Retry; NewCDCRelay refuses a policy that RetryPolicy.Check refuses.
	Retry RetryPolicy
	// DeleteOnPublish deletes rows once acknowledged instead of setting PublishedAt.
	DeleteOnPublish bool
	// MaxRetainedBytes caps the change log the database may retain for this relay
	// (Retention.RetainedBytes). Over it the relay logs at error level (alert=true), Health
	// reports a *RetentionError, and, with ReleaseOverCap, it stops. 0 means no cap.
	MaxRetainedBytes int64
	// ReleaseOverCap, when MaxRetainedBytes is exceeded, releases what holds the log for the
	// relay (a PostgreSQL slot; see LogReleaser) and makes Run return the *RetentionError: the
	// database stops retaining log at the price of a Backfill. Default false.
	ReleaseOverCap bool
	// RetentionInterval is how often retention is measured. Default DefaultRetentionInterval
	// (30s).
	RetentionInterval time.Duration
	// CheckpointInterval is the most often a log position that carried no outbox record (other
	// tables' transactions, the relay's own marks, keepalives) is checkpointed; a position
	// after records is checkpointed as soon as they are marked. Each checkpoint is a write to
	// the database, and so to its change log: an idle relay writes at most one per interval.
	// The price is that a restarted relay may re-read up to an interval of log that holds no
	// outbox record. Default DefaultCheckpointInterval (10s).
	CheckpointInterval time.Duration
	// Logger receives the relay's logs. Default slog.Default().
	Logger *slog.Logger
	// TracerProvider, Propagator and MeterProvider: as RelayOptions (a "publish outbox" span
	// per send linked to the producers' spans; the same instruments, attribute
	// outboxkit.relay.kind = cdc, except that only the polling relay records
	// outboxkit.relay.resent). Default nil: the global providers.
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
	MeterProvider  metric.MeterProvider

	now func() time.Time // test hook (internal/testhook.SetClock); nil: the database clock
}

// CDCPhase is what a CDC relay is doing (CDCStats.Phase).
type CDCPhase string

// CDC relay phases.
const (
	// PhaseStopped: no session runs (before Run, after it returned).
	PhaseStopped CDCPhase = "stopped"
	// PhaseAcquiring: the relay took the publisher generation and waits for every lane (the
	// previous publisher's workers to release them, their leases to expire, or their
	// sessions to end; see Liveness).
	PhaseAcquiring CDCPhase = "acquiring"
	// PhaseBackfilling: the relay publishes the unpublished rows (first start, cutover,
	// Backfill).
	PhaseBackfilling CDCPhase = "backfilling"
	// PhaseStreaming: the relay publishes what it reads from the change log.
	PhaseStreaming CDCPhase = "streaming"
	// PhaseReconnecting: the relay's change stream failed (broken, reset or stalled; or the
	// database refused its marks) and it opens a new one, with backoff, to resume from its
	// checkpoint. It keeps its generation and lanes meanwhile; Health wraps ErrLogUnavailable.
	PhaseReconnecting CDCPhase = "reconnecting"
)

// CDCStats is what a CDC relay did since it was created, and what it is doing now.
type CDCStats struct {
	Transactions uint64 // committed transactions read from the log
	Sends        uint64 // Sink.Send calls
	Published    uint64 // records marked published
	Failures     uint64 // failed attempts recorded
	Parked       uint64
	Skipped      uint64 // records left unpublished behind a parked record of their key
	Backfilled   uint64 // records published by backfills
	Checkpoints  uint64 // checkpoints saved
	// Restarts counts the change streams the relay replaced after they failed (broken, reset,
	// stalled, or refused their marks): each one resumed from the checkpoint.
	Restarts   uint64
	Generation int64
	Checkpoint string // the last checkpointed position
	// CheckpointAt is when this relay last saved a checkpoint (this process's clock); zero
	// before its first. Its age is the log a restart would read again.
	CheckpointAt time.Time
	Retention    Retention // the last measurement

	Phase CDCPhase
	// LanesHeld is how many lanes the relay holds now, of Lanes (the outbox's lane count, 0
	// before the first session). A publishing relay holds every lane.
	LanesHeld, Lanes int
	// Live reports whether the running session holds a sign of life (the store's Liveness
	// capability), so that a successor need not wait for its leases to expire after a crash.
	Live bool
	// Position is the last log position read; Checkpoint trails it by what is being sent and
	// marked, and by at most CheckpointInterval while the log carries no outbox record.
	Position string
	// Lag is how old the last acknowledged record was when the sink acknowledged it: its
	// CreatedAt (database clock) to the acknowledgement (this process's clock). 0 before the
	// first. While the relay has no working change stream (PhaseReconnecting) it is at least
	// the time since the relay last heard from the log, and grows until a stream works again.
	Lag time.Duration
	// LogDownSince is when the relay lost its working change stream; zero while it has one.
	LogDownSince time.Time
	// LastResume is when the relay last began to stream (from its checkpoint, or after a
	// backfill), and LanesWait how long that session waited for its lanes (PhaseAcquiring).
	// Zero before the first.
	LastResume time.Time
	LanesWait  time.Duration
}

// CDCRelay delivers committed outbox events by reading the database's change log instead of
// polling the table. It publishes through the same Sink and Router as Relay and keeps the same
// guarantees: at least once, in order per partition key (and in commit order overall), every
// event marked published only after the sink acknowledged it.
//
// It is the outbox's single publisher: Run takes a new publisher generation (fencing every
// relay before it, polling or CDC), waits until it holds every lane (so no polling worker of the
// old generation is still sending), and then streams. Progress is a checkpoint in the outbox's
// database, saved only after the sink acknowledged and the records were marked published;
// after a crash the relay resumes from it and may resend what followed it (duplicates, never a
// loss).
//
// One CDCRelay runs one session at a time: call Run or Backfill, not both at once. To run a
// second relay on the same outbox (a standby), create another CDCRelay: starting it fences the
// first.
type CDCRelay struct {
	store  driver.CDCStore
	source driver.ChangeSource
	sink   Sink
	router Router
	o      CDCOptions
	log    *slog.Logger
	inst   *relayInstruments

	k      leaseKeeper    // its lane calls and publisher generation
	leases []driver.Lease // every lane; their leases are renewed (keepLanes) while running
	laneMu sync.Mutex     // one keepLanes at a time

	mu         sync.Mutex
	checkpoint string
	cpAt       time.Time // when this relay saved checkpoint
	retention  Retention
	health     error
	parkedKeys map[string]bool
	settle     *settler           // of the running session
	backfilled map[int64]struct{} // seqs the session's backfill handled; see skipBackfilled

	stats struct {
		settleCounters
		txs, sends, skipped, backfilled, checkpoints, restarts atomic.Uint64
		lag                                                    atomic.Int64 // ns
		heard                                                  atomic.Int64 // unix ns: the last ChangeStream.Next that returned, or a stream's start
	}
	// The session's state, under mu.
	phase      CDCPhase
	lanes      int
	live       bool
	position   string
	lastResume time.Time
	lanesWait  time.Duration
	logDown    error     // why the last stream failed, while no new one works; nil while streaming
	logDownAt  time.Time // when logDown was first set, for this outage

	gate runGate // the running session: Shutdown drains it (read no more) or ends it, settling included
}

// NewCDCRelay returns a CDC relay reading source and publishing to sink through router. opts may
// be nil.
func NewCDCRelay(store driver.CDCStore, source driver.ChangeSource, sink Sink, router Router, opts *CDCOptions) (*CDCRelay, error) {
	switch {
	case store == nil:
		return nil, &OptionError{Field: "store", Reason: "must not be nil"}
	case source == nil:
		return nil, &OptionError{Field: "source", Reason: "must not be nil"}
	case sink == nil:
		return nil, &OptionError{Field: "sink", Reason: "must not be nil"}
	}
	if err := checkRouter(router); err != nil {
		return nil, err
	}
	var o CDCOptions
	if opts != nil {
		o = *opts
	}
	if err := leaseDefaults(&o.Owner, &o.LeaseTTL, &o.RenewInterval, &o.BatchSize, &o.Retry); err != nil {
		return nil, err
	}
	if o.MaxRetainedBytes < 0 {
		return nil, &OptionError{Field: "MaxRetainedBytes", Reason: "must not be negative"}
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = DefaultRetentionInterval
	}
	if o.RetentionInterval < 0 {
		return nil, &OptionError{Field: "RetentionInterval", Reason: "must be positive"}
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.CheckpointInterval < 0 {
		return nil, &OptionError{Field: "CheckpointInterval", Reason: "must be positive"}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	inst, err := newRelayInstruments(o.MeterProvider, "cdc")
	if err != nil {
		return nil, err
	}
	return &CDCRelay{
		store: store, source: source, sink: sink, router: router, o: o, inst: inst,
		k:          leaseKeeper{store: store, owner: o.Owner, ttl: o.LeaseTTL, clock: o.now, inst: inst},
		log:        o.Logger.With("owner", o.Owner, "relay", "cdc"),
		parkedKeys: map[string]bool{},
		phase:      PhaseStopped,
		gate:       newRunGate(),
	}, nil
}

// Owner returns the name the relay uses in leases.
func (r *CDCRelay) Owner() string { return r.o.Owner }

// Stats returns the relay's counters and state.
func (r *CDCRelay) Stats() CDCStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	lag := time.Duration(r.stats.lag.Load())
	if r.logDown != nil {
		lag = max(lag, time.Since(time.Unix(0, r.stats.heard.Load())))
	}
	return CDCStats{
		Transactions: r.stats.txs.Load(), Sends: r.stats.sends.Load(), Published: r.stats.published.Load(),
		Failures: r.stats.failures.Load(), Parked: r.stats.parked.Load(), Skipped: r.stats.skipped.Load(),
		Backfilled: r.stats.backfilled.Load(), Checkpoints: r.stats.checkpoints.Load(), Restarts: r.stats.restarts.Load(),
		Generation: r.k.gen.Load(), Checkpoint: r.checkpoint, CheckpointAt: r.cpAt, Retention: r.retention,
		Phase: r.phase, LanesHeld: len(r.leases), Lanes: r.lanes, Live: r.live, Position: r.position,
		Lag: lag, LogDownSince: r.logDownAt, LastResume: r.lastResume, LanesWait: r.lanesWait,
	}
}

// Health returns nil while the relay runs and publishes from a working change stream, else why
// not:
//   - an error wrapping ErrNotRunning before Run or Backfill took the publisher generation, and
//     after it returned;
//   - an error wrapping ErrLogUnavailable and the cause while the relay has no working change
//     stream (PhaseReconnecting: the last one broke, was reset or stalled, or the database
//     refused its marks) and reconnects to resume from its checkpoint;
//   - a *RetentionError while the retained log is over MaxRetainedBytes.
func (r *CDCRelay) Health() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.gate.isRunning() || r.k.gen.Load() == 0 || r.phase == PhaseStopped:
		return fmt.Errorf("outbox: cdc relay %s: %w", r.o.Owner, ErrNotRunning)
	case r.logDown != nil:
		return fmt.Errorf("outbox: cdc relay %s: since %s: %w: %w", r.o.Owner,
			r.logDownAt.UTC().Format(time.RFC3339), ErrLogUnavailable, r.logDown)
	}
	return r.health
}

func (r *CDCRelay) now() time.Time { return r.k.now() }

// Run publishes until ctx is cancelled or Shutdown is called (then it returns nil), or until it
// cannot go on:
//   - a newer publisher generation fenced it, or another claimer took a lane (possible at
//     once after the relay's sign of life was lost): an error wrapping ErrFenced or
//     ErrClaimLost;
//   - the log no longer holds its checkpoint: a *PositionLostError (errors.Is ErrPositionLost).
//     Run never skips a gap; run Backfill, then Run again;
//   - with ReleaseOverCap, the retained log went over its cap: a *RetentionError;
//   - the outbox's schema is not the one the relay expects: an error wrapping
//     ErrSchemaMismatch.
//
// Anything else that stops the change stream does not end Run: a broken, reset or silent log
// connection (a source's liveness bound turns silence into an error wrapping ErrStreamStalled),
// a stream that cannot be opened, or a failed mark or checkpoint. The relay closes that stream
// (marking first what the sink acknowledged, when the database lets it), keeps its generation
// and lanes, and opens a new one from its checkpoint after a backoff (100 ms doubling to 5 s
// while new streams fail too): what was sent after the checkpoint may be sent again
// (duplicates, never a loss). Meanwhile Stats().Phase is PhaseReconnecting and Health wraps
// ErrLogUnavailable with the cause.
//
// With no checkpoint yet (the first run, or a cutover from polling), Run starts at the head of
// the log after a backfill of every unpublished row, exactly as Backfill does.
//
// Cancelling ctx is a hard stop: the send in flight is abandoned, and what the sink acknowledged
// after the last checkpoint is sent again by the next session (duplicates, never a loss).
// Shutdown is the graceful stop. A Run or Backfill while another session of this relay runs
// returns an error wrapping ErrRelayRunning.
func (r *CDCRelay) Run(ctx context.Context) error {
	return r.session(ctx, false)
}

// Backfill republishes, with their original event IDs and in Seq order per partition key, every
// outbox row that is not published (everything after the last checkpoint: cleanup never deletes
// an unpublished row), ignoring retry schedules, and moves the checkpoint to the current head
// of the log (creating a fresh replication slot where the log needs one). It is the recovery
// from a lost position and takes the outbox over like Run does (a new generation, every lane).
// It returns when done; then Run resumes from the new checkpoint. Records of a parked key stay
// parked: Unpark them first to include them.
//
// Rows that commit while Backfill runs may be published twice (by the backfill, and by the
// stream of the next Run, which starts at the new checkpoint): duplicates, never a loss. Run's
// own backfill (first start, cutover) skips them in its stream.
//
// Shutdown stops a Backfill after the batch in flight: Backfill then returns an error wrapping
// context.Canceled, and the checkpoint has not moved (run Backfill again). Backfill returns nil
// only when it finished: cancelling ctx (a hard stop, like a Shutdown whose own ctx ends first)
// returns an error wrapping ctx's error (context.Canceled for such a Shutdown), and the
// checkpoint has not moved either.
func (r *CDCRelay) Backfill(ctx context.Context) error {
	return r.session(ctx, true)
}

// Shutdown stops the relay gracefully: the running Run reads no more transactions from the log,
// lets the send in flight finish, marks what the sink acknowledged and checkpoints its position
// (so that the next session sends none of it again), releases its lanes and its sign of life,
// and returns nil. Shutdown waits for that, or until ctx ends: then it stops the session hard
// (the settling in flight included) and returns ctx's error once Run has returned. Give ctx a
// deadline longer than one send and settle.
//
// Shutdown is final: a Run or Backfill called after it returns nil at once. Shutdown of a relay
// that is not running returns nil.
func (r *CDCRelay) Shutdown(ctx context.Context) error {
	if err := r.gate.shutdown(ctx); err != nil {
		return fmt.Errorf("outbox: cdc relay %s: shutdown: %w", r.o.Owner, err)
	}
	return nil
}

// errDrained ends a session that Shutdown stopped after settling what it sent.
var errDrained = errors.New("outbox: cdc relay drained")

// stopCause is the cause of a session (or stream attempt) ended by another goroutine: the
// renewal loop (fenced, lanes or sign of life lost), the retention loop, or the settler.
type stopCause struct{ err error }

// session runs one Run or Backfill: it opens the session (open), takes the outbox over (hold:
// the publisher generation, the sign of life, every lane, the renewal loop), publishes
// (backfill, or streams until a condition Run documents) and closes what it took in one place
// (close), in the reverse order, before the result is reported (result).
func (r *CDCRelay) session(ctx context.Context, backfillOnly bool) error {
	// stopRun ends the session (Shutdown past its deadline); settleBase bounds the settler's
	// store calls, which outlive ctx (a cancelled Run still marks what was acknowledged) but
	// not a hard stop.
	ctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	settleBase, stopSettle := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSettle()
	end, ok := r.gate.start(func() { stopRun(); stopSettle() })
	if !ok {
		return fmt.Errorf("outbox: cdc relay %s: %w", r.o.Owner, ErrRelayRunning)
	}
	defer end()
	if r.gate.isDraining() {
		return nil
	}
	s := &cdcSession{r: r, ctx: ctx, settleBase: settleBase, backfillOnly: backfillOnly, log: r.log}
	err := func() error {
		defer s.close() // also when the sink or the store panics
		if err := s.hold(); err != nil {
			return err
		}
		return s.publish()
	}()
	return s.result(err)
}

// cdcSession is the state of one session: what it took, so that close gives back exactly that.
type cdcSession struct {
	r            *CDCRelay
	ctx          context.Context // the caller's (ended by a hard stop too)
	settleBase   context.Context // the settler's store calls
	backfillOnly bool
	log          *slog.Logger

	id     string                  // the change source's identity
	sctx   context.Context         // ends with ctx, or when a loop stops the session (cancel's cause)
	cancel context.CancelCauseFunc // nil until the session holds the outbox
	life   driver.Life             // the sign of life, nil when none is held (the renewal loop may change it)
	loops  sync.WaitGroup          // the renewal and retention loops
	lanes  bool                    // every lane is held
	// finished: a Backfill that returns nil moved the checkpoint; one stopped before did not.
	finished bool
}

// hold takes the outbox over: the lane count and the source's identity, a new publisher
// generation (which fences every earlier publisher), a sign of life when the store offers one,
// then every lane (waiting for the previous publisher to let them go), and starts the renewal
// loop.
func (s *cdcSession) hold() error {
	r, ctx := s.r, s.ctx
	lanes, err := r.store.LaneCount(ctx)
	if err != nil {
		return r.quiet(ctx, storeError("outbox: cdc relay: lane count", err))
	}
	if lanes < 1 || lanes > MaxLanes {
		return fmt.Errorf("%w: lane count %d out of range", ErrSchemaMismatch, lanes)
	}
	if s.id, err = r.source.Identity(ctx); err != nil {
		return r.quiet(ctx, fmt.Errorf("outbox: cdc relay: source identity: %w", err))
	}
	pub, err := r.k.acquire(ctx, driver.KindCDC)
	if err != nil {
		return r.quiet(ctx, fmt.Errorf("outbox: cdc relay: acquire generation: %w", err))
	}
	s.log = r.log.With("publisher_generation", pub.Generation)
	s.log.Info("cdc_relay_acquired", "source", s.id, "backfill", s.backfillOnly)

	s.sctx, s.cancel = context.WithCancelCause(ctx)
	s.life = r.holdLiveness(s.sctx, s.log)
	r.mu.Lock()
	r.phase, r.lanes, r.live = PhaseAcquiring, lanes, s.life != nil
	r.mu.Unlock()
	waitStart := time.Now()
	if err := r.takeLanes(s.sctx, lanes, s.log); err != nil {
		return r.end(ctx, s.sctx, err)
	}
	s.lanes = true
	r.mu.Lock()
	r.lanesWait = time.Since(waitStart)
	r.mu.Unlock()
	s.loops.Go(func() { r.renewLoop(s.sctx, s.cancel, &s.life, s.log) })
	return nil
}

// publish runs a Backfill, or streams: the session outlives its streams. A stream that breaks,
// stalls or is refused its marks is closed, and the relay resumes from its checkpoint on a new
// one, keeping its generation and lanes, until a condition Run documents ends the session.
func (s *cdcSession) publish() error {
	r, ctx, sctx, log := s.r, s.ctx, s.sctx, s.log
	if s.backfillOnly {
		err := r.end(ctx, sctx, r.attempt(sctx, s.settleBase, s.id, true, nil, log))
		s.finished = err == nil && ctx.Err() == nil
		return err
	}
	startRetention := sync.OnceFunc(func() { s.loops.Go(func() { r.retentionLoop(sctx, s.cancel, log) }) })
	failures := 0 // streams in a row that failed within reconnect.Max of their start
	for {
		began := time.Now()
		err := r.end(ctx, sctx, r.attempt(sctx, s.settleBase, s.id, false, startRetention, log))
		var se settleError
		retaken := false
		if errors.Is(err, ErrClaimLost) && errors.As(err, &se) && sctx.Err() == nil {
			// The database refused a mark for lost lanes: their leases expired (a slow
			// database; keepLanes claims them again) or another claimer took them (the
			// session ends). When the database does not answer, the renewal loop decides.
			var ended *lanesEnded
			if kerr := r.keepLanes(sctx, log); errors.As(kerr, &ended) {
				return ended.err
			}
			retaken = true // the stream is replaced like after any failed mark
		}
		if err == nil || errors.Is(err, errDrained) || sctx.Err() != nil || (!retaken && sessionEnding(err)) {
			var over *RetentionError
			if errors.As(err, &over) && r.o.ReleaseOverCap {
				r.releaseLog(context.WithoutCancel(ctx), log)
			}
			return err
		}
		if time.Since(began) > reconnect.Max {
			failures = 0 // the last stream ran for a while: this is a new failure
		}
		failures++
		delay := reconnect.Delay(failures)
		cause := restartCause(err)
		r.stats.restarts.Add(1)
		r.inst.streamRestarted(ctx, cause)
		r.logLost(err)
		log.Warn("cdc_relay_stream_restart", "cause", cause, "error", err, "retry_in", delay,
			"checkpoint", r.Stats().Checkpoint)
		select {
		case <-sctx.Done():
			return r.end(ctx, sctx, sctx.Err())
		case <-r.gate.draining:
			return errDrained // everything sent was settled when the stream closed
		case <-time.After(delay):
		}
	}
}

// close gives back what hold took, in this order: it stops the renewal and retention loops and
// waits for them (so that no renewal races the release), releases the lanes (a successor
// claims them at once), releases the sign of life, and reports the relay stopped. The stream
// was closed already, with its settler (attempt).
func (s *cdcSession) close() {
	r := s.r
	if s.cancel == nil {
		return // the outbox was never held
	}
	s.cancel(nil)
	s.loops.Wait()
	if s.lanes {
		r.releaseLanes(context.WithoutCancel(s.ctx), s.log)
	}
	if s.life != nil {
		if err := s.life.Release(); err != nil {
			s.log.Warn("cdc_relay_liveness_release_failed", "error", err)
		}
	}
	r.mu.Lock()
	r.phase, r.live, r.logDown, r.logDownAt = PhaseStopped, false, nil, time.Time{}
	r.mu.Unlock()
}

// result is what Run or Backfill returns for the session's error err: a drained Run (Shutdown)
// returns nil, a Backfill that did not finish an error wrapping context.Canceled or ctx's error.
func (s *cdcSession) result(err error) error {
	switch {
	case s.backfillOnly && err == nil && !s.finished:
		// The caller's ctx ended, or Shutdown stopped it hard: not done, whatever quiet made of it.
		cause := s.ctx.Err()
		if cause == nil {
			cause = context.Canceled
		}
		return fmt.Errorf("outbox: cdc relay: backfill stopped before it finished: %w", cause)
	case !errors.Is(err, errDrained):
		return err
	case s.backfillOnly:
		return fmt.Errorf("outbox: cdc relay: backfill stopped by Shutdown before it finished: %w", context.Canceled)
	}
	s.r.log.Info("cdc_relay_drained", "checkpoint", s.r.Stats().Checkpoint)
	return nil
}

// reconnect is the delay before a CDC relay opens a new stream after one failed: 100 ms,
// doubling (±20%) up to 5 s while the new streams fail too.
var reconnect = RetryPolicy{Initial: 100 * time.Millisecond, Max: 5 * time.Second}.withDefaults()

// sessionEnding reports whether a failed stream must end the session (Run documents each)
// rather than be replaced: the relay was fenced or lost a lane, the log lost its position, or
// the schema is not the one the relay expects.
func sessionEnding(err error) bool {
	return errors.Is(err, ErrFenced) || errors.Is(err, ErrClaimLost) || errors.Is(err, ErrPositionLost) ||
		errors.Is(err, ErrRetentionExceeded) || errors.Is(err, ErrSchemaMismatch) || errors.Is(err, ErrInvalidOptions)
}

// The causes of outboxkit.relay.cdc.stream.restarts (and of the cdc_relay_stream_restart log).
const (
	restartStalled  = "stalled"  // the stream received nothing within its liveness bound
	restartBroken   = "broken"   // the log connection failed, or could not be opened
	restartDatabase = "database" // marking or checkpointing what was sent failed
)

func restartCause(err error) string {
	var se settleError
	switch {
	case errors.Is(err, ErrStreamStalled):
		return restartStalled
	case errors.As(err, &se):
		return restartDatabase
	}
	return restartBroken
}

// attempt opens one stream (from the checkpoint, or after a backfill when there is none or
// backfillOnly) and publishes from it until it fails or the session ends. Its settler marks
// what the sink acknowledged before the stream closes, even when stopping, so that a failure
// of the stream resends nothing that was acknowledged before it.
func (r *CDCRelay) attempt(sctx, settleBase context.Context, id string, backfillOnly bool, streaming func(), log *slog.Logger) (err error) {
	actx, fail := context.WithCancelCause(sctx)
	defer fail(nil)
	r.settle = r.newSettler(settleBase, id, log, func(err error) { fail(stopCause{settleError{err}}) })
	var stream driver.ChangeStream
	defer func() {
		var c stopCause
		if err != nil && sctx.Err() == nil && errors.As(context.Cause(actx), &c) {
			err = c.err // the settler's failure, not the cancellation it caused
		}
		if err != nil && sctx.Err() == nil && !errors.Is(err, errDrained) && !sessionEnding(err) {
			r.logLost(err) // at once: closing the stream may take a while (its server is silent)
		}
		r.settle.close() // with the stream still open: the settler confirms positions on it
		if stream != nil {
			_ = stream.Close()
		}
	}()
	// The keys parked in the database, every time: a key this relay decided to park, whose
	// park was not recorded (the settle failed), must be sent again by the new stream.
	if err := r.loadParkedKeys(actx); err != nil {
		return err
	}
	stream, err = r.openStream(actx, id, backfillOnly, log)
	if err != nil || backfillOnly {
		return err
	}
	r.stats.heard.Store(time.Now().UnixNano())
	r.mu.Lock()
	r.phase, r.lastResume, r.logDown, r.logDownAt = PhaseStreaming, time.Now(), nil, time.Time{}
	r.mu.Unlock()
	streaming()
	return r.stream(actx, id, stream, log)
}

// logLost records that the relay has no working change stream (why: err), for Health, Stats
// and Lag, until a new stream opens.
func (r *CDCRelay) logLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logDown == nil {
		r.logDownAt = time.Now()
	}
	r.logDown, r.phase = err, PhaseReconnecting
}

// settleError marks a failure of the settler (a mark or a checkpoint), for restartCause.
type settleError struct{ err error }

func (e settleError) Error() string { return e.err.Error() }
func (e settleError) Unwrap() error { return e.err }

// openStream resumes the log from the saved checkpoint, or backfills and starts it at its head
// when there is none (or backfillOnly).
func (r *CDCRelay) openStream(ctx context.Context, id string, backfillOnly bool, log *slog.Logger) (driver.ChangeStream, error) {
	cp, ok, err := r.store.LoadCheckpoint(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: cdc relay: load checkpoint: %w", err)
	}
	switch {
	case backfillOnly || !ok:
		return r.backfill(ctx, id, log)
	case cp.Source != id:
		return nil, &PositionLostError{Source: cp.Source, Checkpoint: cp.Position, Available: "",
			Reason: "the change source is now " + id}
	}
	stream, err := r.source.Resume(ctx, cp.Position)
	if err != nil {
		return nil, fmt.Errorf("outbox: cdc relay: resume: %w", err)
	}
	r.setCheckpoint(cp.Position)
	r.mu.Lock()
	r.position = cp.Position
	r.mu.Unlock()
	log.Info("cdc_relay_resumed", "position", cp.Position, "lanes_wait", r.Stats().LanesWait)
	return stream, nil
}

// releaseLog drops what holds the log for the source (after the stream was closed).
func (r *CDCRelay) releaseLog(ctx context.Context, log *slog.Logger) {
	rel, ok := r.source.(driver.LogReleaser)
	if !ok {
		log.Error("cdc_relay_release_log_unsupported", "alert", true)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := rel.Release(ctx); err != nil {
		log.Error("cdc_relay_release_log_failed", "alert", true, "error", err)
		return
	}
	log.Error("cdc_relay_log_released", "alert", true, "note", "the position is lost: run Backfill")
}

// quiet turns an error caused by ctx ending into nil.
func (r *CDCRelay) quiet(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// end returns the session's result: the cause that stopped it (fenced, retention), nil when the
// caller's ctx ended, else err.
func (r *CDCRelay) end(ctx, sctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	if errors.Is(err, errDrained) {
		return err // session turns it into nil (Run) or context.Canceled (Backfill)
	}
	var c stopCause
	if cause := context.Cause(sctx); cause != nil && errors.As(cause, &c) {
		return c.err
	}
	return err
}

func (c stopCause) Error() string { return c.err.Error() }

// takeLanes claims every lane, waiting for the previous publisher's workers to release them (or
// for their leases to expire).
func (r *CDCRelay) takeLanes(ctx context.Context, lanes int, log *slog.Logger) error {
	held := map[int]driver.Lease{}
	wait := 10 * time.Millisecond
	warned := time.Now()
	for len(held) < lanes {
		if len(held) > 0 {
			renewed, err := r.k.renew(ctx, mapValues(held))
			if err != nil {
				return fmt.Errorf("outbox: cdc relay: renew lanes: %w", err)
			}
			clear(held)
			for _, l := range renewed {
				held[l.Lane] = l
			}
		}
		got, _, err := r.k.claim(ctx, lanes)
		if err != nil {
			return fmt.Errorf("outbox: cdc relay: claim lanes: %w", err)
		}
		for _, l := range got {
			held[l.Lane] = l
		}
		if len(held) == lanes {
			break
		}
		if time.Since(warned) > r.o.RenewInterval {
			log.Info("cdc_relay_waiting_for_lanes", "held", len(held), "lanes", lanes)
			warned = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.gate.draining:
			r.mu.Lock()
			r.leases = sortedLeases(held)
			r.mu.Unlock()
			r.releaseLanes(context.WithoutCancel(ctx), log)
			return errDrained
		case <-time.After(wait):
		}
		wait = min(wait*2, 250*time.Millisecond)
	}
	r.mu.Lock()
	r.leases = sortedLeases(held)
	r.mu.Unlock()
	log.Info("cdc_relay_lanes_held", "lanes", lanes)
	return nil
}

func mapValues(m map[int]driver.Lease) []driver.Lease {
	out := make([]driver.Lease, 0, len(m))
	for _, l := range m {
		out = append(out, l)
	}
	return out
}

func sortedLeases(m map[int]driver.Lease) []driver.Lease {
	out := make([]driver.Lease, 0, len(m))
	for i := 0; len(out) < len(m); i++ {
		if l, ok := m[i]; ok {
			out = append(out, l)
		}
	}
	return out
}

func (r *CDCRelay) currentLeases() []driver.Lease {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leases
}

// holdLiveness takes the relay's sign of life when the store has the Liveness capability; nil
// when it has not, or when it failed (the relay then relies on its leases alone).
func (r *CDCRelay) holdLiveness(ctx context.Context, log *slog.Logger) driver.Life {
	lv, ok := r.store.(driver.Liveness)
	if !ok {
		return nil
	}
	life, err := lv.HoldLiveness(ctx, r.o.Owner)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("cdc_relay_liveness_unavailable", "error", err,
				"note", "a successor waits for the leases to expire after a crash")
		}
		return nil
	}
	return life
}

// renewLoop renews every lease each RenewInterval. A stale generation, or a lane another
// claimer took, ends the session: another publisher owns the outbox now. A lease that expired
// before its renewal while its lane stayed free is claimed again. A lost sign of life (*life, nil when none is
// held; the session releases what it holds when renewLoop has returned) does not: its
// database session broke, and another claimer may now take the lanes, but every lane taken
// gets a new generation, so the relay's marks and renewals fail (and the session ends) if one
// does. Until then the relay relies on its leases alone, as when it could not take a sign of
// life at start, and takes a new one after its next successful renewal.
func (r *CDCRelay) renewLoop(ctx context.Context, cancel context.CancelCauseFunc, life *driver.Life, log *slog.Logger) {
	t := time.NewTicker(r.o.RenewInterval)
	defer t.Stop()
	lost := false // a sign of life was held and lost: take a new one
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if *life != nil {
			if err := (*life).Check(ctx); err != nil && ctx.Err() == nil {
				log.Warn("cdc_relay_liveness_lost", "error", err,
					"note", "the relay relies on its leases until it holds a new sign of life")
				if err := (*life).Release(); err != nil {
					log.Debug("cdc_relay_liveness_release_failed", "error", err)
				}
				*life, lost = nil, true
				r.mu.Lock()
				r.live = false
				r.mu.Unlock()
			}
		}
		err := r.keepLanes(ctx, log)
		var ended *lanesEnded
		switch {
		case errors.As(err, &ended):
			cancel(stopCause{ended.err})
			return
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("cdc_relay_renew_failed", "error", err)
			}
		case lost:
			hctx, hcancel := context.WithTimeout(ctx, r.o.RenewInterval)
			if *life = r.holdLiveness(hctx, log); *life != nil {
				lost = false
				log.Info("cdc_relay_liveness_restored")
				r.mu.Lock()
				r.live = true
				r.mu.Unlock()
			}
			hcancel()
		}
	}
}

// lanesEnded is keepLanes' error when the session must end: fenced, or a lane another claimer
// took.
type lanesEnded struct{ err error }

func (e *lanesEnded) Error() string { return e.err.Error() }

// keepLanes renews every lease the relay holds. A lease that expired before its renewal (a
// slow or unreachable database) while no one else claimed its lane is claimed again: the
// relay holds the publisher generation, so no other claimer of it exists, and the relay's
// marks were refused while the lease was out. It returns a *lanesEnded when the relay was
// fenced or another claimer took a lane, another error when the database did not answer (the
// leases are as they were), else nil. The renewal loop and a settle refused for lost lanes
// (RetakeLanes) call it, one at a time.
func (r *CDCRelay) keepLanes(ctx context.Context, log *slog.Logger) error {
	r.laneMu.Lock()
	defer r.laneMu.Unlock()
	// A renewal that the database does not answer must not hold the loop past the leases (a
	// renewal after they expired is refused anyway); a slow one within them is fine.
	ctx, cancel := context.WithTimeout(ctx, r.o.LeaseTTL)
	defer cancel()
	fenced := func(err error) error {
		log.Warn("cdc_relay_fenced", "error", err)
		return &lanesEnded{fmt.Errorf("outbox: cdc relay %s: publisher generation %d: %w", r.o.Owner, r.k.gen.Load(), err)}
	}
	held := r.currentLeases()
	renewed, err := r.k.renew(ctx, held)
	switch {
	case errors.Is(err, ErrFenced):
		return fenced(err)
	case err != nil:
		return err
	}
	var back []driver.Lease
	// A claim skips lanes another transaction has locked (the relay's own fetch or settle, a
	// moment): five tries over about a third of LeaseTTL, before the lanes count as taken.
	for try, wait := 0, r.o.LeaseTTL/50; len(renewed)+len(back) < len(held); try, wait = try+1, wait*2 {
		if try == 5 {
			log.Warn("cdc_relay_lanes_lost", "held", len(renewed)+len(back), "lanes", len(held))
			return &lanesEnded{fmt.Errorf("outbox: cdc relay %s: %d of %d lanes lost: %w", r.o.Owner, len(held)-len(renewed)-len(back), len(held), ErrClaimLost)}
		}
		if try > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		got, _, err := r.k.claim(ctx, len(held)-len(renewed)-len(back))
		switch {
		case errors.Is(err, ErrFenced):
			return fenced(err)
		case err != nil:
			return err
		}
		back = append(back, got...)
	}
	if len(back) > 0 {
		log.Warn("cdc_relay_lanes_reclaimed", "lanes", len(back), "note", "their leases expired before a renewal; no one else had claimed them")
	}
	m := map[int]driver.Lease{}
	for _, l := range append(renewed, back...) {
		m[l.Lane] = l
	}
	r.mu.Lock()
	r.leases = sortedLeases(m)
	r.mu.Unlock()
	return nil
}

func (r *CDCRelay) releaseLanes(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	held := r.currentLeases()
	r.mu.Lock()
	r.leases = nil
	r.mu.Unlock()
	if len(held) > 0 {
		if err := r.k.release(ctx, held); err != nil {
			log.Warn("cdc_relay_release_failed", "error", err)
		}
	}
}

// retentionLoop measures the log retained for the checkpoint every RetentionInterval.
func (r *CDCRelay) retentionLoop(ctx context.Context, cancel context.CancelCauseFunc, log *slog.Logger) {
	for {
		r.mu.Lock()
		pos := r.checkpoint
		r.mu.Unlock()
		if pos != "" {
			ret, err := r.source.Retention(ctx, pos)
			if err != nil {
				if ctx.Err() == nil {
					log.Warn("cdc_relay_retention_failed", "error", err)
				}
			} else if stop := r.recordRetention(ret, log); stop != nil {
				cancel(stopCause{stop})
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.o.RetentionInterval):
		}
	}
}

// recordRetention stores a measurement and applies the cap; it returns the error that must stop
// the relay (ReleaseOverCap), else nil.
func (r *CDCRelay) recordRetention(ret Retention, log *slog.Logger) error {
	var over *RetentionError
	if r.o.MaxRetainedBytes > 0 && ret.RetainedBytes > r.o.MaxRetainedBytes {
		over = &RetentionError{Retention: ret, Cap: r.o.MaxRetainedBytes}
	}
	r.mu.Lock()
	r.retention = ret
	if over != nil {
		r.health = over
	} else {
		r.health = nil
	}
	r.mu.Unlock()
	if over == nil {
		log.Debug("cdc_relay_retention", "retained_bytes", ret.RetainedBytes, "headroom_bytes", ret.HeadroomBytes)
		return nil
	}
	log.Error("cdc_relay_retention_over_cap", "alert", true, "retained_bytes", ret.RetainedBytes,
		"cap_bytes", r.o.MaxRetainedBytes, "headroom_bytes", ret.HeadroomBytes)
	if !r.o.ReleaseOverCap {
		return nil
	}
	return over // the session stops, closes its stream, then releases the log
}

func (r *CDCRelay) setCheckpoint(pos string) {
	r.mu.Lock()
	r.checkpoint = pos
	r.mu.Unlock()
}

// farFuture is the Now of backfill fetches: every retry schedule is due.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// backfill opens a stream at the head of the log, publishes every unpublished row committed
// before it, and checkpoints the head. The stream then carries on from there.
func (r *CDCRelay) backfill(ctx context.Context, id string, log *slog.Logger) (driver.ChangeStream, error) {
	r.mu.Lock()
	r.phase = PhaseBackfilling
	r.mu.Unlock()
	stream, pos, err := r.source.Start(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: cdc relay: start the log: %w", err)
	}
	r.mu.Lock()
	r.position = pos
	r.mu.Unlock()
	log.Info("cdc_relay_backfill_started", "position", pos)
	r.backfilled = map[int64]struct{}{}
	total := 0
	for {
		if r.gate.isDraining() {
			_ = stream.Close()
			return nil, errDrained // what was sent is marked; the checkpoint has not moved
		}
		recs, err := r.store.Fetch(ctx, driver.FetchParams{Leases: r.currentLeases(), Limit: r.o.BatchSize, Now: farFuture})
		if err != nil {
			_ = stream.Close()
			return nil, fmt.Errorf("outbox: cdc relay: backfill fetch: %w", err)
		}
		if len(recs) > 0 {
			for _, rec := range recs {
				r.backfilled[rec.Seq] = struct{}{}
			}
			err := r.deliver(ctx, recs, readAt{}, log)
			if err == nil {
				err = r.settle.flush(ctx) // the next fetch must not see these rows again
			}
			if err != nil {
				_ = stream.Close()
				return nil, err
			}
			total += len(recs)
			r.stats.backfilled.Add(uint64(len(recs)))
		}
		// A short fetch saw every unpublished row committed before pos (the fetch began after
		// Start returned), and deliver settled each of them.
		if len(recs) < r.o.BatchSize {
			break
		}
	}
	err = r.settle.submit(ctx, &settleItem{pos: pos, stream: stream})
	if err == nil {
		err = r.settle.flush(ctx)
	}
	if err != nil {
		_ = stream.Close()
		return nil, err
	}
	log.Info("cdc_relay_backfill_done", "records", total, "position", pos)
	return stream, nil
}

// changeOrErr is what the reader goroutine hands over.
type changeOrErr struct {
	tx  driver.ChangeTx
	err error
}

// stream publishes the log's transactions until ctx ends or the stream fails.
func (r *CDCRelay) stream(ctx context.Context, id string, stream driver.ChangeStream, log *slog.Logger) error {
	// The reader decodes ahead of the sender, bounded by the channel.
	ch := make(chan changeOrErr, 4*r.o.BatchSize)
	rctx, stopReader := context.WithCancel(ctx)
	defer stopReader()
	go func() {
		for {
			tx, err := stream.Next(rctx)
			if err == nil {
				r.stats.heard.Store(time.Now().UnixNano())
			}
			select {
			case ch <- changeOrErr{tx, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	var (
		recs  []driver.Record
		carry *changeOrErr // a transaction read but left for the next batch
		// Positions that carried no record are checkpointed at most once per
		// CheckpointInterval (see submitPosition): pending is the latest one not yet
		// submitted, lastPos when a position was last submitted.
		pending string
		lastPos = time.Now() // the session began at a checkpoint
	)
	submitPosition := func(pos string, records bool) error {
		if !records && time.Since(lastPos) < r.o.CheckpointInterval {
			pending = pos
			return nil
		}
		pending, lastPos = "", time.Now()
		return r.settle.submit(ctx, &settleItem{pos: pos, stream: stream})
	}
	// drain ends a graceful stop: everything sent is settled and its position checkpointed
	// (with the stream still open, so that it is confirmed to the source too); what was read
	// ahead and not sent is read again by the next session.
	drain := func() error {
		if pending != "" {
			if err := r.settle.submit(r.settle.base, &settleItem{pos: pending, stream: stream}); err != nil {
				return err
			}
		}
		if err := r.settle.flush(r.settle.base); err != nil {
			return err
		}
		return errDrained
	}
	for {
		if r.gate.isDraining() && ctx.Err() == nil {
			return drain()
		}
		var first changeOrErr
		if carry != nil {
			first, carry = *carry, nil
		} else {
			var idle, due <-chan time.Time
			var timers []*time.Timer
			if len(r.backfilled) > 0 {
				t := time.NewTimer(backfillSkipIdle)
				timers, idle = append(timers, t), t.C
			}
			if pending != "" {
				t := time.NewTimer(r.o.CheckpointInterval - time.Since(lastPos))
				timers, due = append(timers, t), t.C
			}
			caughtUp, flush, drained := false, false, false
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-r.gate.draining:
				drained = true
			case first = <-ch:
			case <-idle:
				caughtUp = true
			case <-due:
				flush = true
			}
			for _, t := range timers {
				t.Stop()
			}
			if drained {
				continue // drain() at the top of the loop
			}
			if caughtUp {
				// Nothing to read for a while: every row the backfill published that the
				// stream also carries has gone by.
				r.backfilled = nil
				continue
			}
			if flush {
				if err := submitPosition(pending, false); err != nil {
					return err
				}
				continue
			}
		}
		if first.err != nil {
			return fmt.Errorf("outbox: cdc relay: read the log: %w", first.err)
		}
		recs = append(recs[:0], first.tx.Records...)
		pos := first.tx.Position
		r.stats.txs.Add(1)
		// Take whatever else is already there, whole transactions that fit in BatchSize (a
		// larger transaction is sent alone, in BatchSize chunks).
		var failed error
	more:
		for len(recs) < r.o.BatchSize {
			select {
			case c := <-ch:
				if c.err != nil {
					failed = c.err
					break more
				}
				if len(recs)+len(c.tx.Records) > r.o.BatchSize {
					carry = &c
					break more
				}
				recs = append(recs, c.tx.Records...)
				pos = c.tx.Position
				r.stats.txs.Add(1)
			default:
				break more
			}
		}
		r.mu.Lock()
		r.position = pos
		r.mu.Unlock()
		records := len(recs) > 0
		if records {
			if err := r.deliver(ctx, r.skipBackfilled(r.skipParked(recs)), readAt{stream, pos}, log); err != nil {
				return err
			}
		}
		if err := submitPosition(pos, records); err != nil {
			return err
		}
		if failed != nil {
			return fmt.Errorf("outbox: cdc relay: read the log: %w", failed)
		}
	}
}

// backfillSkipIdle is how long the stream must have nothing to read before the relay forgets
// which rows its backfill published.
const backfillSkipIdle = 200 * time.Millisecond

// skipBackfilled drops records the backfill of this session already published (rows that
// committed after the log's start position but before the backfill's last fetch): without it
// they would be sent twice.
func (r *CDCRelay) skipBackfilled(recs []driver.Record) []driver.Record {
	if len(r.backfilled) == 0 {
		return recs
	}
	out := recs[:0]
	for _, rec := range recs {
		if _, ok := r.backfilled[rec.Seq]; ok {
			delete(r.backfilled, rec.Seq)
			continue
		}
		out = append(out, rec)
	}
	return out
}

// loadParkedKeys starts the session with the partition keys that have a parked record, so that
// the stream holds their later events back as the polling relay's fetch does. It needs the
// store's Admin capability (every adapter of this module has it); without it only keys parked
// during the session are held back.
func (r *CDCRelay) loadParkedKeys(ctx context.Context) error {
	r.mu.Lock()
	clear(r.parkedKeys)
	r.mu.Unlock()
	a, ok := r.store.(driver.Admin)
	if !ok {
		r.log.Warn("cdc_relay_parked_keys_unknown", "reason", "the store has no Admin capability")
		return nil
	}
	keys, err := a.ParkedKeys(ctx)
	if err != nil {
		return fmt.Errorf("outbox: cdc relay: parked keys: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.parkedKeys[k] = true
	}
	return nil
}

// skipParked drops the records of keys parked during this run: they stay unpublished (so cleanup
// keeps them) until Unpark and a Backfill deliver them in order.
func (r *CDCRelay) skipParked(recs []driver.Record) []driver.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.parkedKeys) == 0 {
		return recs
	}
	out := recs[:0]
	for _, rec := range recs {
		if r.parkedKeys[rec.PartitionKey] {
			r.stats.skipped.Add(1)
			continue
		}
		out = append(out, rec)
	}
	return out
}

// deliver sends recs (in order) until each is published or parked, retrying failures in place
// with backoff; later records of a failed key wait behind it. Records are marked with Settle,
// fenced by the leases of every lane.
func (r *CDCRelay) deliver(ctx context.Context, recs []driver.Record, at readAt, log *slog.Logger) error {
	for start := 0; start < len(recs); start += r.o.BatchSize {
		if err := r.deliverBatch(ctx, recs[start:min(start+r.o.BatchSize, len(recs))], at, log); err != nil {
			return err
		}
	}
	return nil
}

// readAt is where delivered records were read: the stream and the position it had returned
// them by (VisibleWaiter), or nothing for a backfill's records (read from the table).
type readAt struct {
	stream driver.ChangeStream
	pos    string
}

func (r *CDCRelay) deliverBatch(ctx context.Context, pending []driver.Record, at readAt, log *slog.Logger) error {
	attempts := map[int64]int{}
	round := 0
	for len(pending) > 0 {
		sctx, span := publishSpan(ctx, r.o.TracerProvider, r.o.Propagator, "outboxkit", pending)
		began := time.Now()
		outcome, sent := send(sctx, r.sink, r.router, pending, log)
		endPublishSpan(span, outcome)
		if sent {
			r.stats.sends.Add(1)
			r.inst.sent(ctx, time.Since(began), len(pending))
			r.inst.acked(ctx, time.Now(), pending, outcome)
		}
		if err := ctx.Err(); err != nil {
			return err // nothing is marked: the records will be read again
		}

		var p driver.SettleParams // leases, mode and time are set by the settler
		var retry []driver.Record
		var hint time.Duration // the longest delay a failure of this round asked for (RetryAfter)
		failedKey := map[string]bool{}
		for i := range pending {
			rec := &pending[i]
			switch {
			case failedKey[rec.PartitionKey]:
				retry = append(retry, *rec) // behind an earlier failure of its key
			case outcome[i] == nil:
				p.Published = append(p.Published, rec.Seq)
				if !rec.CreatedAt.IsZero() {
					r.stats.lag.Store(int64(time.Since(rec.CreatedAt)))
				}
			default:
				failedKey[rec.PartitionKey] = true
				hint = max(hint, driver.RetryAfterOf(outcome[i]))
				attempts[rec.Seq]++
				n := rec.Attempts + attempts[rec.Seq]
				park := IsPermanent(outcome[i]) || r.o.Retry.Exhausted(n)
				p.Failed = append(p.Failed, driver.Failure{Seq: rec.Seq, Lane: rec.Lane, Error: driver.TruncateError(outcome[i].Error()),
					Delay: r.o.Retry.delayAfter(n, driver.RetryAfterOf(outcome[i])), Park: park})
				if park {
					log.Warn("cdc_relay_event_parked", "event_id", rec.ID, "partition_key", rec.PartitionKey,
						"attempts", n, "error", outcome[i])
					r.mu.Lock()
					r.parkedKeys[rec.PartitionKey] = true
					r.mu.Unlock()
				} else {
					retry = append(retry, *rec)
				}
			}
		}
		// Records held behind a parked record stay unpublished; they are not retried here.
		retry = r.skipParked(retry)
		if err := r.settle.submit(ctx, &settleItem{p: &p, readTo: at.pos, stream: at.stream}); err != nil {
			return err
		}
		pending = retry
		if len(pending) == 0 {
			return nil
		}
		round++
		delay := r.o.Retry.delayAfter(round, hint)
		log.Warn("cdc_relay_send_failed", "retrying", len(pending), "pause", delay)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.gate.draining:
			// The failures are settled; the position is not checkpointed, so the next session
			// reads the records waiting for a retry again.
			return errDrained
		case <-time.After(delay):
		}
	}
	return nil
}
