package conformance

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// defaultTimeout is the watchdog of one subtest when Harness.Timeout is zero.
const defaultTimeout = 2 * time.Minute

// tcase is one case of an area: its subtest name, lane count and body.
type tcase[TTx any] struct {
	name  string
	lanes int  // 0 means 8
	bare  bool // no adapter: e.a and e.ob are nil (a case that builds its own)
	run   func(e *env[TTx])
}

// env is the fixture of one subtest: a fresh adapter, an Outbox on it, and a context that the
// watchdog cancels.
type env[TTx any] struct {
	t     *testing.T
	ctx   context.Context
	h     Harness[TTx]
	a     Adapter[TTx]
	ob    *core.Outbox[TTx]
	lanes int
	seq   atomic.Int64 // unique names within the subtest
}

// runArea runs the cases of one area as parallel subtests "area/case", each under a watchdog.
func runArea[TTx any](t *testing.T, h Harness[TTx], area string, cases []tcase[TTx]) {
	runAreaSerial(t, h, area, cases, false)
}

// runAreaSerial is runArea whose cases run one after another when serial is true (the area
// itself still runs in parallel with the others).
func runAreaSerial[TTx any](t *testing.T, h Harness[TTx], area string, cases []tcase[TTx], serial bool) {
	t.Run(area, func(t *testing.T) {
		t.Parallel()
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				if !serial {
					t.Parallel()
				}
				ctx := watchdog(t, h.Timeout, h.Diagnose)
				lanes := c.lanes
				if lanes == 0 {
					lanes = 8
				}
				if c.bare {
					c.run(&env[TTx]{t: t, ctx: ctx, h: h, lanes: lanes})
					return
				}
				c.run(newEnv(t, ctx, h, lanes))
			})
		}
	})
}

func newEnv[TTx any](t *testing.T, ctx context.Context, h Harness[TTx], lanes int) *env[TTx] {
	a := h.New(t, lanes)
	if a == nil {
		t.Fatal("conformance: Harness.New returned nil")
	}
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[TTx](a), nil)
	if err != nil {
		t.Fatalf("conformance: NewOutbox: %v", err)
	}
	return &env[TTx]{t: t, ctx: ctx, h: h, a: a, ob: ob, lanes: lanes}
}

// watchdog returns a context that ends when the subtest has run for d (default 2 minutes). Then
// the subtest fails with diagnose's report (when not nil) and a dump of every goroutine; the body sees its context end and returns.
// If it is still running 15s later, the process panics so that a hang never stalls the run.
func watchdog(t *testing.T, d time.Duration, diagnose func(context.Context) string) context.Context {
	if d <= 0 {
		d = defaultTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu   sync.Mutex
		done bool
		hard *time.Timer
	)
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		if diagnose != nil {
			dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
			t.Errorf("conformance: %s did not finish within %v (watchdog); the harness's diagnosis:\n%s", name, d, diagnose(dctx))
			dcancel()
		}
		t.Errorf("conformance: %s did not finish within %v (watchdog); goroutines:\n%s", name, d, stacks())
		cancel()
		hard = time.AfterFunc(15*time.Second, func() {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				panic(fmt.Sprintf("conformance: %s still hangs 15s after its watchdog fired", name))
			}
		})
	})
	t.Cleanup(func() {
		mu.Lock()
		done = true
		if hard != nil {
			hard.Stop()
		}
		mu.Unlock()
		timer.Stop()
		cancel()
	})
	return ctx
}

func stacks() string {
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	const max = 256 << 10
	if n > max {
		return string(buf[:max]) + "\n... (truncated)"
	}
	return string(buf[:n])
}

// fatalf fails the subtest; when the watchdog fired it says so.
func (e *env[TTx]) fatalf(format string, args ...any) {
	e.t.Helper()
	if e.ctx.Err() != nil {
		e.t.Fatalf("(after the watchdog fired) "+format, args...)
	}
	e.t.Fatalf(format, args...)
}

// offers reports whether the harness declares every capability of c (Harness.Capabilities).
// When it does not, it logs that the case is not offered: the case then passes with nothing to
// check, and go test -v says so (Run's "capabilities" subtest has already failed an adapter
// that implements a capability it does not declare).
func (e *env[TTx]) offers(c Capability) bool {
	e.t.Helper()
	if e.h.Capabilities.Has(c) {
		return true
	}
	e.notOffered(c.String() + " (Harness.Capabilities)")
	return false
}

// notOffered logs that a case does not apply to the adapter under test, as RunSink does.
func (e *env[TTx]) notOffered(what string) {
	e.t.Helper()
	e.t.Logf("conformance: not offered: %s; nothing to check", what)
}

// capable returns e.a as a C, which the harness declared (Harness.Capabilities) as c; an
// adapter that does not implement it fails.
func capable[C any, TTx any](e *env[TTx], c Capability) C {
	e.t.Helper()
	v, ok := any(e.a).(C)
	if !ok {
		e.fatalf("Harness.Capabilities declares %s but %T does not implement it", c, e.a)
	}
	return v
}

// prunedOK reports whether n records pruned, where want were older than the horizon, is
// right: exactly want, or at most want when the adapter declares driver.PartitionedInbox and
// its inbox is partitioned (records go a whole partition at a time).
func (e *env[TTx]) prunedOK(n, want int) bool {
	if pi, ok := any(e.a).(driver.PartitionedInbox); ok && e.h.Capabilities.Has(PartitionedInbox) && pi.InboxPartitioned() {
		return n >= 0 && n <= want
	}
	return n == want
}

func (e *env[TTx]) must(err error, what string) {
	e.t.Helper()
	if err != nil {
		e.fatalf("%s: %v", what, err)
	}
}

// waitFor polls cond until it returns true; only the watchdog bounds the wait.
func (e *env[TTx]) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			e.fatalf("gave up waiting for %s", what)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// name returns a name unique within the subtest.
func (e *env[TTx]) name(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, e.seq.Add(1))
}

// event returns a valid event of partition key key.
func event(key string, i int) core.Event {
	return core.Event{
		AggregateType: "order",
		AggregateID:   fmt.Sprintf("%s-%d", key, i),
		Type:          "order.changed",
		PartitionKey:  key,
		Payload:       fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, i),
	}
}

// write appends events in one committed transaction and returns them as stored.
func (e *env[TTx]) write(evs ...core.Event) []core.Event {
	e.t.Helper()
	var out []core.Event
	err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		var err error
		out, err = e.ob.Write(ctx, tx, evs...)
		return err
	})
	e.must(err, "write events")
	return out
}

// list returns every record in state, in Seq order.
func (e *env[TTx]) list(state driver.RecordState) []driver.Record {
	e.t.Helper()
	var out []driver.Record
	var after int64
	for {
		page, err := e.a.List(e.ctx, driver.ListParams{AfterSeq: after, Limit: 500, State: state})
		e.must(err, "Admin.List")
		out = append(out, page...)
		if len(page) < 500 {
			return out
		}
		after = page[len(page)-1].Seq
	}
}

// byID returns the records of list(StateAll) by event ID.
func (e *env[TTx]) byID() map[string]driver.Record {
	e.t.Helper()
	m := map[string]driver.Record{}
	for _, r := range e.list(driver.StateAll) {
		m[r.ID] = r
	}
	return m
}

func (e *env[TTx]) stats() driver.Stats {
	e.t.Helper()
	st, err := e.a.Stats(e.ctx)
	e.must(err, "Admin.Stats")
	return st
}

func (e *env[TTx]) effectCount(key string) int {
	e.t.Helper()
	n, err := e.h.EffectCount(e.ctx, e.a, key)
	e.must(err, "Harness.EffectCount")
	return n
}

// keyForLane returns the n-th partition key (n >= 0) whose lane is lane.
func keyForLane(lanes, lane, n int) string {
	for i := 0; ; i++ {
		k := fmt.Sprintf("key-%d", i)
		if driver.LaneOf(k, lanes) == lane {
			if n == 0 {
				return k
			}
			n--
		}
	}
}

var discard = slog.New(slog.DiscardHandler)

// relayOptions are the suite's fast relay settings.
func relayOptions(owner string) *core.RelayOptions {
	return &core.RelayOptions{
		Owner:           owner,
		LeaseTTL:        time.Second,
		PollInterval:    5 * time.Millisecond,
		BatchSize:       50,
		BreakerMaxDelay: 20 * time.Millisecond,
		Retry:           core.RetryPolicy{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond, Jitter: -1, Deadline: time.Hour},
		Logger:          discard,
	}
}

// runner is a relay (polling or CDC) that the suite started in a goroutine.
type runner[R interface{ Owner() string }] struct {
	r      R
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// running is a polling relay started by the suite.
type running = runner[*core.Relay]

// stop cancels the relay and waits for it to return; it returns its error.
func (rr *runner[R]) stop() error {
	rr.once.Do(func() {
		rr.cancel()
		select {
		case rr.err = <-rr.done:
		case <-time.After(30 * time.Second):
			rr.err = fmt.Errorf("relay %s did not return 30s after its context was cancelled", rr.r.Owner())
		}
	})
	return rr.err
}

// exited reports, without waiting, whether the relay's Run (or Backfill) has returned, and
// its error.
func (rr *runner[R]) exited() (bool, error) {
	select {
	case err := <-rr.done:
		rr.once.Do(func() { rr.cancel(); rr.err = err })
		return true, err
	default:
		return false, nil
	}
}

// returned waits, bounded by the watchdog, for the relay to return by itself, and returns
// its error.
func returned[TTx any, R interface{ Owner() string }](e *env[TTx], rr *runner[R], what string) error {
	e.t.Helper()
	select {
	case err := <-rr.done:
		rr.once.Do(func() { rr.cancel(); rr.err = err })
		return err
	case <-e.ctx.Done():
		e.fatalf("gave up waiting for %s", what)
		return nil
	}
}

func (e *env[TTx]) startRelay(store driver.RelayStore, sink core.Sink, o *core.RelayOptions) *running {
	e.t.Helper()
	if o == nil {
		o = relayOptions(e.name("relay"))
	}
	if e.h.Logger != nil && o.Logger == discard {
		o.Logger = e.h.Logger
	}
	r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "queue"}, o)
	e.must(err, "NewRelay")
	return e.run(r)
}

func (e *env[TTx]) run(r *core.Relay) *running {
	ctx, cancel := context.WithCancel(e.ctx)
	rr := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rr.done <- r.Run(ctx) }()
	e.t.Cleanup(func() { _ = rr.stop() })
	return rr
}

func (e *env[TTx]) stopRelay(rr *running) {
	e.t.Helper()
	if err := rr.stop(); err != nil {
		e.fatalf("relay Run: %v", err)
	}
}

// ids returns the IDs of evs.
func ids(evs []core.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func sortedLanes(ls []driver.Lease) []int {
	out := make([]int, len(ls))
	for i, l := range ls {
		out[i] = l.Lane
	}
	slices.Sort(out)
	return out
}

// t0 is the base of injected clocks: far from the real clock, microsecond aligned.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
