package conformance

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/outboxtest"
)

// The "chain" area: an inbox handler that writes outbox events in its own transaction (the
// inbox transaction "may insert local outbox records for further publication"), and the public
// helpers of packages outboxtest and reconcile on the adapter.
func chainCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "handler-emits", run: testChainHandlerEmits[TTx]},
		{name: "handler-emits-rollback", run: testChainHandlerEmitsRollback[TTx]},
		{name: "outboxtest", run: testChainOutboxtest[TTx]},
		{name: "reconcile", run: testChainReconcile[TTx]},
	}
}

// emitting returns a handler that applies the effect named key and writes two events caused by
// the message (IDs derived from the message's, so a redelivery after a rollback writes the same
// IDs), then returns after(tx) (nil: commit).
func (f *inboxFixture[TTx]) emitting(key string, after func(ctx context.Context, tx TTx) error) core.Handler[TTx] {
	e := f.e
	return func(ctx context.Context, tx TTx, m core.InboxMessage) error {
		f.calls.Add(1)
		if err := e.h.Effect(ctx, tx, key); err != nil {
			return err
		}
		evs := make([]core.Event, 2)
		for i := range evs {
			evs[i] = core.Event{ID: fmt.Sprintf("%s-out-%d", m.EventID, i), AggregateType: "shipment",
				AggregateID: m.EventID, Type: "shipment.requested", CausationID: m.EventID,
				Payload: fmt.Appendf(nil, `{"cause":%q,"n":%d}`, m.EventID, i)}
		}
		if _, err := e.ob.Write(ctx, tx, evs...); err != nil {
			return err
		}
		if after != nil {
			return after(ctx, tx)
		}
		return nil
	}
}

// outIDs are the IDs emitting writes for the message id.
func outIDs(id string) []string { return []string{id + "-out-0", id + "-out-1"} }

// expectOutbox checks which of ids the outbox holds.
func (e *env[TTx]) expectOutbox(what string, ids []string, present bool) {
	e.t.Helper()
	recs := e.byID()
	for _, id := range ids {
		if _, ok := recs[id]; ok != present {
			e.fatalf("%s: event %s in the outbox: %v, want %v", what, id, ok, present)
		}
	}
}

// testChainHandlerEmits: the effect, the inbox record and the handler's events commit together;
// the relay then publishes the events, and a redelivery writes nothing more.
func testChainHandlerEmits[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	res, err := f.in.Process(e.ctx, "c1", msg("order-1", "p"), f.emitting("eff", nil))
	e.must(err, "Process")
	if res.Outcome != core.Applied {
		e.fatalf("Process: %v, want applied", res.Outcome)
	}
	e.expectEffect("eff", 1)
	e.expectOutbox("after the commit", outIDs("order-1"), true)
	for _, r := range e.list(driver.StateAll) {
		if r.CausationID != "order-1" || r.AggregateID != "order-1" {
			e.fatalf("event %s: causation %q aggregate %q, want both order-1", r.ID, r.CausationID, r.AggregateID)
		}
	}
	// The inbox record committed too: a redelivery is a duplicate, runs nothing, writes nothing.
	res, err = f.in.Process(e.ctx, "c1", msg("order-1", "p"), f.emitting("eff", nil))
	e.must(err, "Process (redelivery)")
	if res.Outcome != core.Duplicate || f.calls.Load() != 1 {
		e.fatalf("redelivery: %v after %d handler calls, want duplicate after 1", res.Outcome, f.calls.Load())
	}
	if n := len(e.list(driver.StateAll)); n != 2 {
		e.fatalf("%d events in the outbox after the redelivery, want 2", n)
	}
	// The emitted events are published like any other.
	sink := NewSink()
	rr := e.startRelay(e.a, sink, nil)
	e.waitFor("the handler's events published", func() bool { return sink.AllAcked(outIDs("order-1")) })
	e.stopRelay(rr)
}

// testChainHandlerEmitsRollback: when the handler fails after writing its effect and events, or
// when writing its events fails, nothing of the transaction commits: no effect, no inbox record
// (a redelivery applies), no event. The redelivery then commits all three.
func testChainHandlerEmitsRollback[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	fail := func(context.Context, TTx) error { return errHandler }
	_, err := f.in.Process(e.ctx, "c1", msg("order-1", "p"), f.emitting("eff", fail))
	if !errors.Is(err, errHandler) {
		e.fatalf("Process returned %v, want the handler's error", err)
	}
	e.expectEffect("eff", 0)
	e.expectOutbox("after the handler failed", outIDs("order-1"), false)

	// Writing the events fails (one of their IDs is taken): the effect before it rolls back too.
	e.write(core.Event{ID: "order-2-out-1", AggregateType: "shipment", AggregateID: "taken", Type: "shipment.requested"})
	_, err = f.in.Process(e.ctx, "c1", msg("order-2", "p"), f.emitting("eff", nil))
	if !errors.Is(err, core.ErrDuplicateEvent) {
		e.fatalf("Process returned %v, want an error wrapping ErrDuplicateEvent", err)
	}
	e.expectEffect("eff", 0)
	e.expectOutbox("after the write failed", []string{"order-2-out-0"}, false)
	if n := len(e.list(driver.StateAll)); n != 1 {
		e.fatalf("%d events in the outbox, want only the one written before", n)
	}

	// No inbox record was kept: the redelivery applies, and everything commits together.
	f.expect("redelivery after the handler failed", "c1", msg("order-1", "p"), "unused", core.Applied, 0)
	e.expectEffect("unused", 1) // f.expect's own handler (no events)
	res, err := f.in.Process(e.ctx, "c2", msg("order-1", "p"), f.emitting("eff", nil))
	e.must(err, "Process (another consumer)")
	if res.Outcome != core.Applied {
		e.fatalf("Process: %v, want applied", res.Outcome)
	}
	e.expectEffect("eff", 1)
	e.expectOutbox("after the successful delivery", outIDs("order-1"), true)
}

// testChainOutboxtest: package outboxtest's database helpers (Mark, Since, Drain with its
// recording Sink) work on the adapter.
func testChainOutboxtest[TTx any](e *env[TTx]) {
	e.write(event("before", 0))
	mark, err := outboxtest.Mark(e.ctx, e.a)
	e.must(err, "outboxtest.Mark")
	written := e.write(event("k1", 1), event("k2", 2))
	err = e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if _, err := e.ob.Write(ctx, tx, event("rolled-back", 3)); err != nil {
			return err
		}
		return errHandler
	})
	if !errors.Is(err, errHandler) {
		e.fatalf("rolled-back write: %v, want the function's error", err)
	}
	since := outboxtest.Since(e.a, mark)
	got, err := outboxtest.Written(e.ctx, since, outboxtest.Match{Type: "order.changed"})
	e.must(err, "outboxtest.Written")
	if len(got) != 2 || got[0].ID != written[0].ID || got[1].ID != written[1].ID {
		e.fatalf("since the mark: %v, want %v", got, ids(written))
	}
	for _, m := range []outboxtest.Match{{AggregateID: "before-0"}, {AggregateID: "rolled-back-3"}} {
		e.must(outboxtest.NotWritten(e.ctx, since, m), "outboxtest.NotWritten")
	}
	sink := outboxtest.NewSink()
	st, err := outboxtest.Drain(e.ctx, e.a, sink, nil)
	e.must(err, "outboxtest.Drain")
	if st.Published != 3 {
		e.fatalf("Drain published %d, want 3", st.Published)
	}
	_, err = outboxtest.Written(e.ctx, sink, outboxtest.Match{ID: written[1].ID, Payload: func(p []byte) bool { return string(p) == string(written[1].Payload) }})
	e.must(err, "outboxtest.Written (sink)")
	if n := e.stats().Pending; n != 0 {
		e.fatalf("%d events pending after Drain", n)
	}
}
