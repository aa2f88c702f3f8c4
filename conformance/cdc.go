package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// cdcOptions are the suite's fast CDC relay settings.
func cdcOptions(owner string) *core.CDCOptions {
	return &core.CDCOptions{
		Owner:             owner,
		LeaseTTL:          time.Second,
		BatchSize:         50,
		Retry:             core.RetryPolicy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1, Deadline: time.Hour},
		RetentionInterval: 50 * time.Millisecond,
		Logger:            discard,
	}
}

// cdcRun is a CDC relay (Run or Backfill) started by the suite.
type cdcRun = runner[*core.CDCRelay]

// waitCDC waits for Run or Backfill to return by itself and returns its error.
func (e *env[TTx]) waitCDC(c *cdcRun, what string) error {
	e.t.Helper()
	return returned(e, c, what)
}

func (e *env[TTx]) cdcStore() driver.CDCStore {
	e.t.Helper()
	if !e.h.Capabilities.Has(CheckpointStore) {
		e.fatalf("Harness.CDC is set but Harness.Capabilities does not declare conformance.CheckpointStore")
	}
	return capable[driver.CDCStore](e, CheckpointStore)
}

// newCDC builds a CDC relay on src (store defaults to the adapter).
func (e *env[TTx]) newCDC(store driver.CDCStore, src driver.ChangeSource, sink core.Sink, o *core.CDCOptions) *core.CDCRelay {
	e.t.Helper()
	if store == nil {
		store = e.cdcStore()
	}
	if o == nil {
		o = cdcOptions(e.name("cdc"))
	}
	if e.h.Logger != nil && o.Logger == discard {
		o.Logger = e.h.Logger
	}
	r, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "queue"}, o)
	e.must(err, "NewCDCRelay")
	return r
}

func (e *env[TTx]) runCDC(r *core.CDCRelay, backfill bool) *cdcRun {
	ctx, cancel := context.WithCancel(e.ctx)
	return e.runCDCIn(ctx, cancel, r, backfill)
}

// runCDCIn runs r in ctx, which cancel ends.
func (e *env[TTx]) runCDCIn(ctx context.Context, cancel context.CancelFunc, r *core.CDCRelay, backfill bool) *cdcRun {
	c := &cdcRun{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() {
		if backfill {
			c.done <- r.Backfill(ctx)
		} else {
			c.done <- r.Run(ctx)
		}
	}()
	e.t.Cleanup(func() { _ = c.stop() })
	return c
}

// waitStarted waits until a CDC relay saved its first checkpoint: its backfill is done and it
// streams. It fails at once, with the relay's error, when the relay returned first (it used to
// wait for the watchdog: the "hang" of cdc/commit-order and cdc/parked-key was a relay that had
// returned before its first checkpoint).
func (e *env[TTx]) waitStarted(c *cdcRun) {
	e.t.Helper()
	e.waitRunning(c, "the CDC relay's first checkpoint", func() bool { return c.r.Stats().Checkpoints >= 1 })
}

// waitRunning waits for cond while c runs: it fails at once, with the relay's error and
// stats, when the relay returned first.
func (e *env[TTx]) waitRunning(c *cdcRun, what string, cond func() bool) {
	e.t.Helper()
	e.waitFor(what, func() bool {
		if done, err := c.exited(); done {
			e.fatalf("the CDC relay returned (%v) while waiting for %s; stats %+v", err, what, c.r.Stats())
		}
		return cond()
	})
}

func (e *env[TTx]) source(name string) driver.ChangeSource {
	e.t.Helper()
	src := e.h.CDC.Source(e.t, e.a, name)
	if src == nil {
		e.fatalf("CDCHarness.Source returned nil")
	}
	return src
}

// producer writes events on keys until stopped; it returns the IDs per key in write order.
type producer struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	want map[string][]string
	n    atomic.Int64
}

func (e *env[TTx]) startProducer(keys int, every time.Duration) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan struct{}), want: map[string][]string{}}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-e.ctx.Done():
				return
			case <-time.After(every):
			}
			key := fmt.Sprintf("p%d", i%keys)
			var evs []core.Event
			err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
				var err error
				// two events per transaction: a transaction's events keep their order
				evs, err = e.ob.Write(ctx, tx, event(key, 2*i), event(key, 2*i+1))
				return err
			})
			if err != nil {
				if e.ctx.Err() == nil {
					e.t.Errorf("producer: %v", err)
				}
				return
			}
			p.mu.Lock()
			p.want[key] = append(p.want[key], evs[0].ID, evs[1].ID)
			p.mu.Unlock()
			p.n.Add(2)
		}
	}()
	return p
}

func (p *producer) finish() (map[string][]string, []string) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	var all []string
	for _, l := range p.want {
		all = append(all, l...)
	}
	return p.want, all
}

// checkDelivered fails unless every id was acknowledged and per-key order holds. With a CDC
// relay that is to deliver them, it fails at once, with the relay's error, when that relay
// returns first (instead of waiting for the watchdog).
func (e *env[TTx]) checkDelivered(sink *Sink, want map[string][]string, all []string, by ...*cdcRun) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("all %d events to be delivered", len(all)), func() bool {
		for _, c := range by {
			if done, err := c.exited(); done {
				e.fatalf("the CDC relay returned (%v) with %d of %d events delivered", err, sink.Seen(), len(all))
			}
		}
		return sink.AllAcked(all)
	})
	for _, err := range sink.CheckOrder(want) {
		e.t.Error(err)
	}
	if e.t.Failed() {
		e.fatalf("order violated")
	}
}

// duplicates returns how many acknowledgements beyond the first the ids got.
func duplicates(sink *Sink, all []string) int {
	n := 0
	for _, id := range all {
		n += max(sink.Acks(id)-1, 0)
	}
	return n
}

// crash simulates the death of a CDC relay's process: once it happened, the relay's sink and
// store calls fail (nothing more is sent, marked, checkpointed or released) and its context ends.
type crash struct {
	cancel context.CancelFunc
	store  *CrashStore // the relay's store, when set
	once   sync.Once
	done   chan struct{}
}

func newCrash(cancel context.CancelFunc) *crash {
	return &crash{cancel: cancel, done: make(chan struct{})}
}

func (c *crash) now() {
	c.once.Do(func() {
		if c.store != nil {
			c.store.Crash()
		}
		close(c.done)
		c.cancel()
	})
}

func (c *crash) happened() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// cdcCases: the change-data-capture relay on the adapter's change log.
func cdcCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "commit-order", run: func(e *env[TTx]) {
			sink := NewSink()
			src := e.source("main")
			c := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.waitStarted(c)
			want := map[string][]string{}
			var all []string
			for i := range 20 {
				key := fmt.Sprintf("k%d", i%3)
				evs := e.write(event(key, 3*i), event("shared", 3*i+1), event(key, 3*i+2))
				want[key] = append(want[key], evs[0].ID, evs[2].ID)
				want["shared"] = append(want["shared"], evs[1].ID)
				all = append(all, ids(evs)...)
			}
			// A rolled-back transaction never reaches the log.
			errRollback := errors.New("roll back")
			err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
				if _, err := e.ob.Write(ctx, tx, event("rolled-back", 0)); err != nil {
					return err
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				e.fatalf("InTx = %v, want the rollback", err)
			}
			last := e.write(event("last", 0))
			all = append(all, last[0].ID)
			want["last"] = ids(last)
			e.checkDelivered(sink, want, all, c)
			// The log is in commit order: with one writer at a time, the deliveries are exactly
			// the writes, in order, each once.
			ds := sink.Deliveries()
			if len(ds) != len(all) {
				e.fatalf("%d deliveries for %d events", len(ds), len(all))
			}
			for i, d := range ds {
				if d.ID != all[i] {
					e.fatalf("delivery %d is %s, want %s (commit order)", i, d.ID, all[i])
				}
			}
			e.waitFor("every event marked published", func() bool { return e.stats().Pending == 0 })
			// The checkpoint follows the marks.
			e.waitFor("the checkpoint of the last transaction", func() bool { return c.r.Stats().Checkpoint != "" && c.r.Stats().Published == uint64(len(all)) })
			id, err := src.Identity(e.ctx)
			e.must(err, "Identity")
			var cp driver.Checkpoint
			e.waitFor("the saved checkpoint", func() bool {
				var ok bool
				cp, ok, err = e.cdcStore().LoadCheckpoint(e.ctx)
				e.must(err, "LoadCheckpoint")
				return ok && cp.Position == c.r.Stats().Checkpoint
			})
			if cp.Source != id || cp.Generation != c.r.Stats().Generation {
				e.fatalf("checkpoint %+v, want source %s and generation %d", cp, id, c.r.Stats().Generation)
			}
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
		}},
		{name: "crash-points", run: func(e *env[TTx]) {
			// Three crashes: before the sink acknowledged, after it acknowledged (before the
			// marks and the checkpoint), and right after a checkpoint was written. Each restart
			// resumes from the checkpoint: nothing is lost, duplicates stay within the batches
			// in flight.
			sink := NewSink()
			src := e.source("main")
			want := map[string][]string{}
			var all []string
			writeSome := func(round, n int) {
				for i := range n {
					key := fmt.Sprintf("k%d", i%4)
					evs := e.write(event(key, round*1000+2*i), event(key, round*1000+2*i+1))
					want[key] = append(want[key], ids(evs)...)
					all = append(all, ids(evs)...)
				}
			}
			// A first run checkpoints, so that every crashing run below resumes from the log.
			first := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.waitFor("the start checkpoint", func() bool { return first.r.Stats().Checkpoints >= 1 })
			writeSome(100, 1)
			e.waitFor("the first events", func() bool { return sink.AllAcked(all) })
			e.waitFor("a checkpoint after them", func() bool { return first.r.Stats().Checkpoints >= 2 })
			if err := first.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
			for round, point := range []string{"before-ack", "after-ack", "after-checkpoint"} {
				writeSome(round, 10)
				ctx, cancel := context.WithCancel(e.ctx)
				cr := newCrash(cancel)
				store := NewCrashStore(e.cdcStore())
				cr.store = store
				if point == "after-checkpoint" {
					store.AfterCheckpoint = cr.now
				}
				sends := 0
				s := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
					sends++
					switch {
					case point == "before-ack":
						cr.now()
					case point == "after-checkpoint" && sends > 1:
						// The second batch waits for the first batch's checkpoint (and crash).
						select {
						case <-cr.done:
						case <-ctx.Done():
						}
					}
					if cr.happened() {
						return core.Outcomes(len(msgs), ErrCrashed)
					}
					res := sink.Send(ctx, msgs)
					if point == "after-ack" {
						cr.now() // acknowledged, never marked nor checkpointed
					}
					return res
				})
				// Small batches, so that a crash falls between two transactions of the log.
				o := cdcOptions(e.name("cdc"))
				o.BatchSize = 3
				c := e.runCDCIn(ctx, cancel, e.newCDC(store, src, s, o), false)
				if err := e.waitCDC(c, "the relay to crash at "+point); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, ErrCrashed) {
					e.fatalf("%s: Run returned %v", point, err)
				}
				writeSome(round+10, 5) // written while the relay is down
			}
			c := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.checkDelivered(sink, want, all)
			// A batch is whole transactions up to BatchSize records: at most 3+1 here.
			if d := duplicates(sink, all); d > 3*4 {
				e.fatalf("%d duplicates after three crashes; at most three batches (12 records) may be resent", d)
			}
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
		}},
		{name: "lost-position-backfill", run: func(e *env[TTx]) {
			sink := NewSink()
			src := e.source("main")
			c := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.waitStarted(c)
			first := e.write(event("a", 0), event("b", 0))
			e.waitFor("the first events", func() bool { return sink.AllAcked(ids(first)) })
			e.waitFor("them marked published", func() bool { return e.stats().Pending == 0 })
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
			cp, ok, err := e.cdcStore().LoadCheckpoint(e.ctx)
			e.must(err, "LoadCheckpoint")
			if !ok {
				e.fatalf("no checkpoint after a run")
			}
			// Written while the relay is down, then the log is lost.
			down := e.write(event("a", 1), event("b", 1), event("c", 0))
			e.h.CDC.LosePosition(e.t, e.a, src)
			// Cleanup keeps every row the gap may hold: none of them is published.
			_, err = core.CleanupOutbox(e.ctx, e.a, &core.CleanupOptions{Retention: time.Nanosecond})
			e.must(err, "CleanupOutbox")
			if st := e.stats(); st.Pending != 3 {
				e.fatalf("after cleanup %d rows are pending, want the 3 written while the relay was down", st.Pending)
			}
			c = e.runCDC(e.newCDC(nil, src, sink, nil), false)
			err = e.waitCDC(c, "Run to report the lost position")
			var lost *core.PositionLostError
			if !errors.Is(err, core.ErrPositionLost) || !errors.As(err, &lost) {
				e.fatalf("Run after the log was lost returned %v, want a *PositionLostError", err)
			}
			if lost.Checkpoint != cp.Position {
				e.fatalf("PositionLostError names checkpoint %q, want %q", lost.Checkpoint, cp.Position)
			}
			for _, ev := range down {
				if sink.Acks(ev.ID) != 0 {
					e.fatalf("event %s was published although the position was lost", ev.ID)
				}
			}
			b := e.runCDC(e.newCDC(nil, src, sink, nil), true)
			if err := e.waitCDC(b, "Backfill"); err != nil {
				e.fatalf("Backfill: %v", err)
			}
			for _, ev := range down {
				if sink.Acks(ev.ID) != 1 {
					e.fatalf("after Backfill event %s was acknowledged %d times, want once (original ID)", ev.ID, sink.Acks(ev.ID))
				}
			}
			c = e.runCDC(e.newCDC(nil, src, sink, nil), false)
			after := e.write(event("a", 2))
			e.waitFor("the stream to go on after the backfill", func() bool { return sink.AllAcked(ids(after)) })
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
		}},
		{name: "cutover", run: func(e *env[TTx]) {
			// Polling -> CDC -> polling under a steady producer.
			sink := NewSink()
			src := e.source("main")
			prod := e.startProducer(5, 2*time.Millisecond)
			p1 := e.startRelay(e.a, sink, nil)
			p2 := e.startRelay(e.a, sink, nil)
			e.waitFor("polling to publish", func() bool { return sink.Seen() > 40 })
			started := prod.n.Load()
			c := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.waitStarted(c)
			// Events committed from the CDC relay's start to its first checkpoint: an upper
			// bound of its start-up window (the rows between its start position and its
			// backfill scan), which grows with the machine's load.
			window := int(prod.n.Load() - started)
			for _, p := range []*running{p1, p2} {
				if err := returned(e, p, "the polling workers to stop at the cutover"); !errors.Is(err, core.ErrFenced) {
					e.fatalf("a polling worker returned %v at the cutover, want ErrFenced", err)
				}
			}
			n := prod.n.Load()
			e.waitFor("CDC to publish", func() bool { return c.r.Stats().Published > 40 && prod.n.Load() > n+40 })
			p3 := e.startRelay(e.a, sink, nil)
			if err := e.waitCDC(c, "the CDC relay to be fenced"); !errors.Is(err, core.ErrFenced) {
				e.fatalf("the CDC relay returned %v at the cutover back, want ErrFenced", err)
			}
			n = prod.n.Load()
			e.waitFor("polling to publish again", func() bool { return prod.n.Load() > n+40 })
			want, all := prod.finish()
			e.checkDelivered(sink, want, all)
			dups := duplicates(sink, all)
			e.t.Logf("cutover: %d events, %d duplicates", len(all), dups)
			// The documented window: the rows committed between the CDC relay's start position
			// and its backfill scan. Handovers themselves resend nothing (lanes are exclusive)
			// but a batch in flight at each fencing (the CDC relay's 50).
			if bound := max(len(all)/10, window+2*50); dups > bound {
				e.fatalf("%d duplicates of %d events across two cutovers (bound %d: %d events committed in the start-up window)", dups, len(all), bound, window)
			}
			e.stopRelay(p3)
		}},
		{name: "shadow", run: func(e *env[TTx]) {
			sink := NewSink()
			p := e.startRelay(e.a, sink, nil)
			sh, err := core.NewCDCShadow(e.source("shadow"), e.a, &core.ShadowOptions{Grace: 200 * time.Millisecond, ClockMargin: time.Millisecond, Logger: discard})
			e.must(err, "NewCDCShadow")
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() { done <- sh.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					e.t.Errorf("shadow Run: %v", err)
				}
			}()
			e.waitFor("the shadow to start", func() bool { _, err := sh.Report(e.ctx); return err == nil })
			time.Sleep(5 * time.Millisecond) // past ClockMargin
			var all []string
			for i := range 10 {
				all = append(all, ids(e.write(event("s", 2*i), event("t", 2*i+1)))...)
			}
			e.waitFor("polling to publish", func() bool { return sink.AllAcked(all) })
			time.Sleep(250 * time.Millisecond) // past Grace
			rep, err := sh.Report(e.ctx)
			e.must(err, "Report")
			if rep.Differences() || rep.Agreed != len(all) || rep.Seen != len(all) {
				e.fatalf("shadow report %+v; want %d seen and agreed, no differences", rep, len(all))
			}
			if sink.Seen() != len(all) {
				e.fatalf("the sink got %d messages for %d events: the shadow must not send", sink.Seen(), len(all))
			}
			e.stopRelay(p)
		}},
		{name: "parked-key", run: func(e *env[TTx]) {
			// A permanently failing event is parked; the later events of its key are held back,
			// also by the next run of the relay, until Unpark and a Backfill deliver them in order.
			sink := NewSink()
			src := e.source("main")
			c := e.runCDC(e.newCDC(nil, src, sink, nil), false)
			e.waitStarted(c)
			sink.FailKey("p", core.Permanent(errors.New("conformance: rejected")))
			p1 := e.write(event("p", 1))
			e.waitRunning(c, "the event to be parked", func() bool { return e.stats().Parked == 1 })
			sink.FailKey("p", nil)
			p2 := e.write(event("p", 2))
			q1 := e.write(event("q", 1)) // committed after p2: once it is delivered, p2 was read
			e.waitRunning(c, "the next key's event", func() bool { return sink.AllAcked(ids(q1)) })
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
			c = e.runCDC(e.newCDC(nil, src, sink, nil), false)
			p3 := e.write(event("p", 3))
			q2 := e.write(event("q", 2))
			e.waitRunning(c, "the next key's event after the restart", func() bool { return sink.AllAcked(ids(q2)) })
			for _, ev := range append(p2, p3...) {
				if n := sink.Acks(ev.ID); n != 0 {
					e.fatalf("event %s of the parked key was delivered %d times before the key was unparked", ev.ID, n)
				}
			}
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
			n, err := e.a.Unpark(e.ctx, "p")
			e.must(err, "Unpark")
			if n < 1 {
				e.fatalf("Unpark changed %d records", n)
			}
			b := e.runCDC(e.newCDC(nil, src, sink, nil), true)
			if err := e.waitCDC(b, "Backfill"); err != nil {
				e.fatalf("Backfill: %v", err)
			}
			want := map[string][]string{"p": ids(append(append(p1, p2...), p3...)), "q": ids(append(q1, q2...))}
			e.checkDelivered(sink, want, append(want["p"], want["q"]...))
		}},
		{name: "retention", run: func(e *env[TTx]) {
			// A failing sink holds the checkpoint back: the retained log grows over a 1-byte cap
			// and the relay reports it; once the sink recovers it catches up.
			sink := NewSink()
			o := cdcOptions(e.name("cdc"))
			o.MaxRetainedBytes = 1
			src := e.source("main")
			c := e.runCDC(e.newCDC(nil, src, sink, o), false)
			first := e.write(event("r", 0))
			e.waitFor("the first event", func() bool { return sink.AllAcked(ids(first)) })
			sink.FailAll(errors.New("conformance: broker down"))
			var all []string
			for i := range 20 {
				all = append(all, ids(e.write(event("r", i+1)))...)
			}
			e.waitFor("retention over the cap to be reported", func() bool {
				var re *core.RetentionError
				return errors.As(c.r.Health(), &re) && errors.Is(c.r.Health(), core.ErrRetentionExceeded) && c.r.Stats().Retention.RetainedBytes > 1
			})
			sink.FailAll(nil)
			e.waitFor("the relay to catch up", func() bool { return sink.AllAcked(all) })
			if err := c.stop(); err != nil {
				e.fatalf("Run: %v", err)
			}
			_, releases := src.(driver.LogReleaser)
			switch declared := e.h.Capabilities.Has(LogReleaser); {
			case releases && !declared:
				e.fatalf("the change source %T implements driver.LogReleaser but Harness.Capabilities does not declare it: add conformance.LogReleaser", src)
			case declared && !releases:
				e.fatalf("Harness.Capabilities declares driver.LogReleaser but the change source %T does not implement it", src)
			case !declared:
				e.notOffered("driver.LogReleaser (Harness.Capabilities): ReleaseOverCap")
				return
			}
			// ReleaseOverCap: the relay stops with the *RetentionError and releases the log
			// (the slot); the position is then lost, and Backfill delivers what it held.
			sink.FailAll(errors.New("conformance: broker down"))
			held := ids(e.write(event("r", 100), event("r", 101)))
			o = cdcOptions(e.name("cdc"))
			o.MaxRetainedBytes, o.ReleaseOverCap = 1, true
			c = e.runCDC(e.newCDC(nil, src, sink, o), false)
			var re *core.RetentionError
			if err := e.waitCDC(c, "the relay to stop over its cap"); !errors.As(err, &re) || !errors.Is(err, core.ErrRetentionExceeded) {
				e.fatalf("Run over the cap with ReleaseOverCap returned %v, want a *RetentionError", err)
			}
			sink.FailAll(nil)
			c = e.runCDC(e.newCDC(nil, src, sink, nil), false)
			if err := e.waitCDC(c, "Run after the log was released"); !errors.Is(err, core.ErrPositionLost) {
				e.fatalf("Run after the log was released returned %v, want ErrPositionLost", err)
			}
			b := e.runCDC(e.newCDC(nil, src, sink, nil), true)
			if err := e.waitCDC(b, "Backfill"); err != nil {
				e.fatalf("Backfill: %v", err)
			}
			if !sink.AllAcked(held) {
				e.fatalf("Backfill did not deliver the events written while the broker was down")
			}
		}},
	}
}
