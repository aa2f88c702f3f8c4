package conformance

import (
	"errors"
	"iter"
	"slices"
	"time"

	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/reconcile"
)

// testChainReconcile: package reconcile on the adapter. One of each kind of finding is planted
// (a duplicate that hides an omission among them) and each is reported with its ID. The inbox
// findings (not applied, digest mismatch, stale) are checked when the adapter implements the
// optional reconcile.InboxReader; without it the outbox findings are.
func testChainReconcile[TTx any](e *env[TTx]) {
	ev := func(id, agg string, v int64) core.Event {
		return core.Event{ID: id, AggregateType: "order", AggregateID: agg, AggregateVersion: v, Type: "order.changed",
			Payload: []byte(`{"id":"` + id + `"}`)}
	}
	e1, e2, e3, dup := ev("e1", "1", 1), ev("e2", "1", 2), ev("e3", "1", 3), ev("dup", "1", 2)
	p1, na1, dm1, st1, ok1 := ev("p1", "p", 0), ev("na1", "n", 0), ev("dm1", "d", 0), ev("st1", "s", 0), ev("ok1", "o", 0)
	e.write(e1, e2, dup, p1, na1, dm1, st1, ok1)
	sink := &outboxtest.Sink{Fail: func(m core.Message) error {
		if m.ID == "p1" {
			return core.Permanent(errors.New("rejected"))
		}
		return nil
	}}
	_, err := outboxtest.Drain(e.ctx, e.a, sink, nil)
	e.must(err, "outboxtest.Drain")
	u1 := ev("u1", "u", 0)
	e.write(u1) // never published

	in := e.inbox(nil)
	apply := func(id, payload, entity string, v int64) {
		_, err := in.in.Process(e.ctx, "c", core.InboxMessage{EventID: id, Payload: []byte(payload), Entity: entity, Version: v},
			func(context.Context, TTx, core.InboxMessage) error { return nil })
		e.must(err, "Process "+id)
	}
	for _, x := range []core.Event{e1, e2, dup, ok1} {
		apply(x.ID, string(x.Payload), "", 0)
	}
	apply(dm1.ID, "another payload", "", 0) // digest mismatch
	apply("newer", "x", "ent", 2)
	apply(st1.ID, string(st1.Payload), "ent", 1) // recorded stale: not applied

	expected := func(yield func(reconcile.Expected, error) bool) {
		for _, x := range []core.Event{e1, e2, e3, p1, na1, dm1, st1, ok1, u1} {
			if !yield(reconcile.Expected{ID: x.ID, AggregateType: x.AggregateType, AggregateID: x.AggregateID, Version: x.AggregateVersion}, nil) {
				return
			}
		}
	}
	o := reconcile.Options{Now: time.Now().Add(time.Hour)}
	withInbox := e.offers(InboxReader) // the inbox findings
	if withInbox {
		o.Inbox, o.Consumer = capable[reconcile.InboxReader](e, InboxReader), "c"
	}
	rep, err := reconcile.Run(e.ctx, iter.Seq2[reconcile.Expected, error](expected), e.a, o)
	e.must(err, "reconcile.Run")
	check := func(kind string, got []string, want ...string) {
		if !slices.Equal(got, want) {
			e.t.Errorf("%s: %v, want %v\n%s", kind, got, want, rep)
		}
	}
	check("Missing", rep.Missing, "e3")
	check("Extra", rep.Extra, "dup")
	check("DuplicateVersions", rep.DuplicateVersions, "order/1@2")
	check("Unpublished", rep.Unpublished, "u1")
	check("Parked", rep.Parked, "p1")
	if withInbox {
		check("NotApplied", rep.NotApplied, "na1")
		check("DigestMismatches", rep.DigestMismatches, "dm1")
		check("Stale", rep.Stale, "st1")
	} else {
		check("NotApplied", rep.NotApplied)
	}
	if rep.OK() || !errors.Is(rep.Err(), reconcile.ErrFindings) {
		e.fatalf("report with findings: OK %v, Err %v", rep.OK(), rep.Err())
	}
}
