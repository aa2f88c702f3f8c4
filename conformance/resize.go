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

// resizeCases are the "lanes" area's cases of adapters with driver.LaneResizer (others pass
// them).
func resizeCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "resize-under-load", lanes: 64, run: testResizeUnderLoad[TTx]},
		{name: "resize-stale-writer", lanes: 8, run: testResizeStaleWriter[TTx]},
	}
}

// heldSink holds every Send while held, so that a backlog is still unpublished and batches are
// in flight (their settles come after the resize) when the lane count changes.
type heldSink struct {
	*Sink
	mu   sync.Mutex
	gate chan struct{} // nil: not held
}

func (s *heldSink) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

func (s *heldSink) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *heldSink) Send(ctx context.Context, msgs []core.Message) []error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	return s.Sink.Send(ctx, msgs)
}

// testResizeUnderLoad: events of many keys across the lanes, some published and some not, while
// a relay runs and a writer (whose Outbox read the first count) keeps writing; the lane count
// goes 64 -> 256 -> 16. Every committed event is delivered at least once, the first deliveries
// of each key follow write order, the running relay takes the new lanes (all 256 while it is
// the only one), every unpublished row was moved to its key's lane, and each resize wrote its
// audit row with the rows it moved. A bad count is refused with an *core.OptionError and the
// same count changes nothing.
func testResizeUnderLoad[TTx any](e *env[TTx]) {
	if !e.offers(LaneResizer) {
		return
	}
	rs := capable[driver.LaneResizer](e, LaneResizer)
	for _, bad := range []int{0, -1, core.MaxLanes + 1} {
		_, err := rs.ResizeLanes(e.ctx, bad, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
		var oe *core.OptionError
		if !errors.As(err, &oe) {
			e.fatalf("ResizeLanes(%d): %v, want an *core.OptionError", bad, err)
		}
	}
	if n, err := rs.ResizeLanes(e.ctx, 64, driver.AuditEntry{Actor: "t", Command: "lanes resize"}); err != nil || n != 0 {
		e.fatalf("ResizeLanes to the same count: %d, %v; want 0, nil", n, err)
	}
	if n, err := e.a.LaneCount(e.ctx); err != nil || n != 64 {
		e.fatalf("LaneCount after refused resizes: %d, %v; want 64", n, err)
	}

	sink := NewSink()
	var (
		mu   sync.Mutex
		want = map[string][]string{}
		all  []string
	)
	record := func(evs []core.Event) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			want[ev.PartitionKey] = append(want[ev.PartitionKey], ev.ID)
			all = append(all, ev.ID)
		}
	}
	const keys = 40
	for i := range 8 {
		var evs []core.Event
		for k := range keys {
			evs = append(evs, event(fmt.Sprintf("rk-%d", k), i))
		}
		record(e.write(evs...))
	}
	o := relayOptions(e.name("relay"))
	o.BatchSize = 10
	held := &heldSink{Sink: sink}
	defer held.release()
	rr := e.startRelay(e.a, held, o)
	acked := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return sink.AllAcked(all[:min(n, len(all))])
		}
	}
	e.waitFor("the first 40 events to be delivered", acked(40))

	// A writer with the Outbox read at 64 lanes keeps writing through both resizes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var werr atomic.Value
	// gate pauses the writer while a resize's result is listed, never during the resize: an
	// in-memory writer outruns the paging of a List that also returns its new rows.
	var gate sync.RWMutex
	wg.Go(func() {
		for i := 8; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			evs := []core.Event{event(fmt.Sprintf("rk-%d", i%keys), i), event(fmt.Sprintf("rk-%d", (i+7)%keys), i)}
			var stored []core.Event
			gate.RLock()
			err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
				var err error
				stored, err = e.ob.Write(ctx, tx, evs...)
				return err
			})
			gate.RUnlock()
			if err != nil {
				if e.ctx.Err() == nil {
					werr.Store(fmt.Errorf("writer: %w", err))
				}
				return
			}
			record(stored)
			time.Sleep(time.Millisecond) // steady, not flooding: what is written must also be delivered
		}
	})

	resize := func(to int) int {
		e.t.Helper()
		held.hold() // batches in flight now settle after the resize
		defer held.release()
		// A backlog of every key: what the writer writes from now on stays unpublished until
		// the resize is done, so some rows must move (a fast relay may have drained the rest).
		mu.Lock()
		n0 := len(all)
		mu.Unlock()
		e.waitFor("the writer to write a backlog of every key", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(all) >= n0+2*keys || werr.Load() != nil
		})
		moved, err := rs.ResizeLanes(e.ctx, to, driver.AuditEntry{Actor: "t", Command: "lanes resize", Arguments: fmt.Sprintf(`{"lanes":%d}`, to)})
		e.must(err, fmt.Sprintf("ResizeLanes(%d)", to))
		if n, err := e.a.LaneCount(e.ctx); err != nil || n != to {
			e.fatalf("LaneCount after ResizeLanes(%d): %d, %v", to, n, err)
		}
		// Committed before the resize: moved; after it: written with the new count.
		gate.Lock()
		defer gate.Unlock()
		for _, r := range e.list(driver.StatePending) {
			if l := driver.LaneOf(r.PartitionKey, to); r.Lane != l {
				e.fatalf("after ResizeLanes(%d), unpublished record %s (key %s, seq %d) is in lane %d, want %d", to, r.ID, r.PartitionKey, r.Seq, r.Lane, l)
			}
		}
		return moved
	}
	moved1 := resize(256)
	if moved1 == 0 {
		e.fatalf("ResizeLanes(256) moved no row although a backlog was unpublished")
	}
	e.lanes = 256
	e.waitFor("the running relay to hold all 256 lanes", func() bool { return rr.r.Stats().Lanes == 256 })
	mu.Lock()
	half := len(all)
	mu.Unlock()
	e.waitFor("the events written before the first resize to be delivered", acked(half*3/4))
	moved2 := resize(16)
	e.lanes = 16
	e.waitFor("the running relay to hold all 16 lanes", func() bool { return rr.r.Stats().Lanes == 16 })
	mu.Lock()
	n := len(all)
	mu.Unlock()
	e.waitFor("more events to be written after the second resize", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(all) >= n+20 || werr.Load() != nil
	})
	close(stop)
	wg.Wait()
	if err, _ := werr.Load().(error); err != nil {
		e.fatalf("%v", err)
	}
	if e.ob.Lanes() != 16 {
		e.fatalf("the writer's Outbox computes lanes with %d lanes after the resizes, want 16", e.ob.Lanes())
	}
	e.waitFor(fmt.Sprintf("all %d committed events to be delivered", len(all)), acked(len(all)))
	e.checkOrder(sink, want)
	e.waitSettled()
	for _, r := range e.list(driver.StateAll) {
		if r.Lane < 0 || r.Lane >= 256 {
			e.fatalf("record %s has lane %d", r.ID, r.Lane)
		}
	}
	if op, ok := e.operator(nil); ok {
		log, err := op.AuditLog(e.ctx, driver.AuditListParams{})
		e.must(err, "AuditLog")
		var got []string
		for _, a := range log {
			if a.Command == "lanes resize" {
				got = append(got, fmt.Sprintf("%s %d", a.Arguments, a.Rows))
			}
		}
		wantLog := []string{fmt.Sprintf(`{"lanes":256} %d`, moved1), fmt.Sprintf(`{"lanes":16} %d`, moved2)}
		if fmt.Sprint(got) != fmt.Sprint(wantLog) {
			e.fatalf("audit rows of the resizes: %v, want %v (refused and same-count resizes write none)", got, wantLog)
		}
	}
}

// testResizeStaleWriter: an Outbox created before a resize never puts a row into a lane of the
// old count: its next Write (of one record or of several) stores the key's lane under the new
// count; a transaction that
// inserted with the old count and commits while a resize waits for it has its row moved; every
// unpublished row ends in its key's lane under the new count.
func testResizeStaleWriter[TTx any](e *env[TTx]) {
	if !e.offers(LaneResizer) {
		return
	}
	rs := capable[driver.LaneResizer](e, LaneResizer)
	key := keyForLane(8, 3, 0)
	for driver.LaneOf(key, 32) == 3 {
		key += "x"
	}
	e.write(event(key, 0))
	if _, err := rs.ResizeLanes(e.ctx, 32, driver.AuditEntry{Actor: "t", Command: "lanes resize"}); err != nil {
		e.fatalf("ResizeLanes(32): %v", err)
	}
	e.write(event(key, 1)) // e.ob read 8 lanes
	if e.ob.Lanes() != 32 {
		e.fatalf("Outbox.Lanes after a Write following a resize: %d, want 32", e.ob.Lanes())
	}
	lanesOf := func(to int) {
		e.t.Helper()
		for _, r := range e.list(driver.StatePending) {
			if want := driver.LaneOf(r.PartitionKey, to); r.Lane != want {
				e.fatalf("unpublished record %s (key %s) is in lane %d, want %d (LaneOf with %d lanes)", r.ID, r.PartitionKey, r.Lane, want, to)
			}
		}
	}
	lanesOf(32)

	// A writer transaction in flight across a resize: it inserts with 32 lanes, the resize to
	// 5 starts meanwhile and must wait for it (or else find its row committed), so the row is
	// moved either way.
	done := make(chan error, 1)
	err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if _, err := e.ob.Write(ctx, tx, event(key, 2)); err != nil {
			return err
		}
		go func() {
			_, err := rs.ResizeLanes(e.ctx, 5, driver.AuditEntry{Actor: "t", Command: "lanes resize"})
			done <- err
		}()
		time.Sleep(50 * time.Millisecond) // widens the window; the outcome does not depend on it
		return nil
	})
	e.must(err, "the writer transaction")
	select {
	case err := <-done:
		e.must(err, "ResizeLanes(5)")
	case <-e.ctx.Done():
		e.fatalf("ResizeLanes(5) did not return")
	}
	lanesOf(5)
	e.write(event(key, 3))
	lanesOf(5)
	// The same for a Write of several records (adapters may insert one record and several
	// with different statements): e.ob read 5 lanes.
	if _, err := rs.ResizeLanes(e.ctx, 7, driver.AuditEntry{Actor: "t", Command: "lanes resize"}); err != nil {
		e.fatalf("ResizeLanes(7): %v", err)
	}
	e.write(event(key, 4), event(key+"y", 0))
	if e.ob.Lanes() != 7 {
		e.fatalf("Outbox.Lanes after a Write of two records following a resize: %d, want 7", e.ob.Lanes())
	}
	lanesOf(7)
	if got := len(e.list(driver.StatePending)); got != 6 {
		e.fatalf("%d unpublished records, want 6", got)
	}
}
