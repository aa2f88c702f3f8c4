package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The contract areas: the typed errors of a database that was never migrated (unmigrated) and
// of a transaction the adapter cannot use (badtx), and driver.Liveness (liveness). The inbox
// area's prune-beside-delivery case is in inbox.go.

// unmigratedCases are the "unmigrated" area's cases (with Harness.NewUnmigrated).
func unmigratedCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{{name: "schema-mismatch", bare: true, run: testUnmigrated[TTx]}}
}

// badTxCases are the "badtx" area's cases.
func badTxCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "nil-and-ended", run: testBadTxNilAndEnded[TTx]},
		{name: "foreign", run: testBadTxForeign[TTx]},
	}
}

// livenessCases are the "liveness" area's cases (with driver.Liveness, Harness.Reopen and
// Harness.KillSession).
func livenessCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{{name: "takeover", lanes: 4, run: testLivenessTakeover[TTx]}}
}

// testUnmigrated: on a database that was never migrated (Harness.NewUnmigrated) every entry
// point fails with an error wrapping core.ErrSchemaMismatch, as README and the adapters' docs
// promise: core.NewOutbox, Inbox.Process, an Insert in a transaction, and each method of
// driver.Admin, driver.RelayStore, driver.Pruner, core.Operator (with OperatorStore) and
// driver.LaneResizer (with LaneResizer), called once with arguments that pass their own checks.
func testUnmigrated[TTx any](e *env[TTx]) {
	if e.h.NewUnmigrated == nil {
		e.notOffered("Harness.NewUnmigrated")
		return
	}
	a := e.h.NewUnmigrated(e.t)
	if a == nil {
		e.fatalf("Harness.NewUnmigrated returned nil")
	}
	ctx := e.ctx
	now := time.Now()
	var bad []string
	check := func(name string, err error) {
		if !errors.Is(err, core.ErrSchemaMismatch) {
			bad = append(bad, fmt.Sprintf("%s: %v", name, err))
		}
	}
	// What a newcomer sees first: the constructors' errors name the remedy once, as a
	// *core.NotMigratedError, and repeat no prefix.
	says := func(name string, err error) {
		check(name, err)
		var nm *core.NotMigratedError
		if err == nil || !errors.As(err, &nm) || !errors.Is(err, core.ErrNotMigrated) {
			bad = append(bad, fmt.Sprintf("%s: not a *core.NotMigratedError: %v", name, err))
			return
		}
		msg := err.Error()
		prefix, _, _ := strings.Cut(msg, ":")
		for _, want := range []string{"Migrate", "migrate: true", "outboxkit migrate"} {
			if !strings.Contains(msg, want) {
				bad = append(bad, fmt.Sprintf("%s: the message does not name the remedy %q: %q", name, want, msg))
			}
		}
		if strings.Count(msg, "not migrated") != 1 || strings.Count(msg, prefix+":") != 1 || strings.Contains(msg, "schema mismatch") {
			bad = append(bad, fmt.Sprintf("%s: the message repeats itself: %q", name, msg))
		}
	}
	_, err := core.NewOutbox(ctx, driver.OutboxStore[TTx](a), nil)
	says("core.NewOutbox", err)
	_, err = core.NewInbox(ctx, driver.InboxStore[TTx](a), nil)
	says("core.NewInbox", err)
	check("CheckInbox", a.CheckInbox(ctx))

	lease := driver.Lease{Lane: 0, Owner: "o", Generation: 1, Until: now.Add(time.Minute)}
	audit := driver.AuditEntry{Actor: "t", Command: "test", Arguments: "{}"}
	prune := driver.PruneParams{PublishedBefore: now, Limit: 10}
	for _, st := range []driver.RecordState{driver.StateAll, driver.StatePending, driver.StateParked, driver.StatePublished} {
		_, err := a.List(ctx, driver.ListParams{State: st})
		check(fmt.Sprintf("List(%v)", st), err)
	}
	_, err = a.Stats(ctx)
	check("Stats", err)
	_, err = a.Unpark(ctx, "k")
	check("Unpark", err)
	_, err = a.ParkedKeys(ctx)
	check("ParkedKeys", err)
	_, err = a.Generation(ctx)
	check("Generation", err)
	_, err = a.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "o", Join: true})
	check("AcquireGeneration", err)
	_, err = a.LaneCount(ctx)
	check("LaneCount", err)
	_, err = a.Heartbeat(ctx, driver.HeartbeatParams{Owner: "o", TTL: time.Minute})
	check("Heartbeat", err)
	_, err = a.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "o", Max: 1, TTL: time.Minute})
	check("ClaimLanes", err)
	_, err = a.RenewLanes(ctx, driver.RenewParams{Generation: 1, Leases: []driver.Lease{lease}, TTL: time.Minute})
	check("RenewLanes", err)
	check("ReleaseLanes", a.ReleaseLanes(ctx, []driver.Lease{lease}))
	_, err = a.Fetch(ctx, driver.FetchParams{Leases: []driver.Lease{lease}, Limit: 10})
	check("Fetch", err)
	check("Settle", a.Settle(ctx, driver.SettleParams{Leases: []driver.Lease{lease}, Published: []int64{1}}))
	_, err = a.PruneOutbox(ctx, prune)
	check("PruneOutbox", err)
	if e.h.Capabilities.Has(OperatorStore) {
		st, ok := a.(driver.OperatorStore)
		if !ok {
			e.fatalf("Harness.NewUnmigrated's %T is no driver.OperatorStore (Harness.Capabilities)", a)
		}
		op, err := core.NewOperator(st, nil)
		e.must(err, "NewOperator")
		_, err = op.Replay(ctx, driver.ReplayParams{IDs: []string{"e"}, Audit: &audit})
		check("Operator.Replay", err)
		_, err = op.Unpark(ctx, []string{"k"}, &audit)
		check("Operator.Unpark", err)
		_, err = op.Cleanup(ctx, prune, audit)
		check("Operator.Cleanup", err)
		_, err = op.ResetLanes(ctx, driver.ResetLanesParams{All: true}, audit)
		check("Operator.ResetLanes", err)
		_, err = op.PruneInbox(ctx, "c", now.Add(-time.Hour), 10, audit)
		check("Operator.PruneInbox", err)
		_, err = op.AuditLog(ctx, driver.AuditListParams{})
		check("Operator.AuditLog", err)
		_, err = op.Status(ctx)
		check("Operator.Status", err)
	}
	if e.h.Capabilities.Has(LaneResizer) {
		rs, ok := a.(driver.LaneResizer)
		if !ok {
			e.fatalf("Harness.NewUnmigrated's %T is no driver.LaneResizer (Harness.Capabilities)", a)
		}
		_, err = rs.ResizeLanes(ctx, 8, audit)
		check("ResizeLanes", err)
	}
	// Last: on a single-writer database the transaction holds the one writer.
	check("Insert in a transaction", a.InTx(ctx, func(ctx context.Context, tx TTx) error {
		ev := event("k", 0)
		ev.ID = "e"
		return a.Insert(ctx, tx, []driver.Record{{Event: ev}})
	}))
	for _, b := range bad {
		e.t.Errorf("on an unmigrated database, %s; want an error wrapping core.ErrSchemaMismatch", b)
	}
}

// inboxTxCalls calls each driver.InboxStore method that takes a transaction (Horizon,
// InsertRecord, LockVersion, SetVersion) with tx, and returns one line for each call whose
// error does not wrap core.ErrInvalidTx.
func inboxTxCalls[TTx any](ctx context.Context, s driver.InboxStore[TTx], tx TTx) []string {
	rec := driver.InboxRecord{Consumer: "c", EventID: "bad-tx", Outcome: core.Applied, OccurredAt: time.Now()}
	calls := []struct {
		name string
		call func() error
	}{
		{"Horizon", func() error { _, err := s.Horizon(ctx, tx, "c"); return err }},
		{"InsertRecord", func() error { _, _, err := s.InsertRecord(ctx, tx, rec); return err }},
		{"LockVersion", func() error { _, _, err := s.LockVersion(ctx, tx, "c", "entity"); return err }},
		{"SetVersion", func() error { return s.SetVersion(ctx, tx, "c", "entity", 7) }},
	}
	var bad []string
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, core.ErrInvalidTx) {
			bad = append(bad, fmt.Sprintf("%s: %v", c.name, err))
		}
	}
	return bad
}

// testBadTxNilAndEnded: a nil transaction and one that has ended are refused with an error
// wrapping core.ErrInvalidTx by Outbox.Write and by every driver.InboxStore method that takes a
// transaction, and nothing is written.
func testBadTxNilAndEnded[TTx any](e *env[TTx]) {
	var none TTx
	ev := event("badtx", 0)
	if _, err := e.ob.Write(e.ctx, none, ev); !errors.Is(err, core.ErrInvalidTx) {
		e.t.Errorf("Outbox.Write with a nil transaction: %v, want an error wrapping core.ErrInvalidTx", err)
	}
	for _, b := range inboxTxCalls(e.ctx, driver.InboxStore[TTx](e.a), none) {
		e.t.Errorf("with a nil transaction, %s; want an error wrapping core.ErrInvalidTx", b)
	}
	var ended TTx
	e.must(e.a.InTx(e.ctx, func(_ context.Context, tx TTx) error { ended = tx; return nil }), "InTx")
	if _, err := e.ob.Write(e.ctx, ended, ev); !errors.Is(err, core.ErrInvalidTx) {
		e.t.Errorf("Outbox.Write with an ended transaction: %v, want an error wrapping core.ErrInvalidTx", err)
	}
	for _, b := range inboxTxCalls(e.ctx, driver.InboxStore[TTx](e.a), ended) {
		e.t.Errorf("with an ended transaction, %s; want an error wrapping core.ErrInvalidTx", b)
	}
	if got := e.list(driver.StateAll); len(got) != 0 {
		e.fatalf("the refused writes left %d records", len(got))
	}
	expectNoInboxRecord(e, e.a)
}

// testBadTxForeign (with Harness.NewForeign): a transaction of another database or store,
// migrated alike, is refused with an error wrapping core.ErrInvalidTx by Outbox.Write and by
// every driver.InboxStore method that takes a transaction, and nothing is written in either.
func testBadTxForeign[TTx any](e *env[TTx]) {
	if e.h.NewForeign == nil {
		e.notOffered("Harness.NewForeign")
		return
	}
	other := e.h.NewForeign(e.t, e.a)
	if other == nil {
		e.fatalf("Harness.NewForeign returned nil")
	}
	e.must(other.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if _, err := e.ob.Write(ctx, tx, event("badtx", 0)); !errors.Is(err, core.ErrInvalidTx) {
			e.t.Errorf("Outbox.Write with a transaction of another database: %v, want an error wrapping core.ErrInvalidTx", err)
		}
		for _, b := range inboxTxCalls(ctx, driver.InboxStore[TTx](e.a), tx) {
			e.t.Errorf("with a transaction of another database, %s; want an error wrapping core.ErrInvalidTx", b)
		}
		return nil
	}), "the other database's transaction")
	for name, a := range map[string]Adapter[TTx]{"the adapter": e.a, "the other database": other} {
		page, err := a.List(e.ctx, driver.ListParams{State: driver.StateAll})
		e.must(err, "List")
		if len(page) != 0 {
			e.t.Errorf("the refused write left %d records in %s", len(page), name)
		}
		expectNoInboxRecord(e, a)
	}
}

// expectNoInboxRecord checks that a holds neither the record nor the version that inboxTxCalls
// tried to write: its own insert of the record succeeds (and is rolled back).
func expectNoInboxRecord[TTx any](e *env[TTx], a Adapter[TTx]) {
	e.t.Helper()
	errRollback := errors.New("conformance: roll back")
	err := a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if v, found, err := a.LockVersion(ctx, tx, "c", "entity"); err != nil || found {
			return fmt.Errorf("LockVersion = %d, %v, %v; want no version: a refused SetVersion was written", v, found, err)
		}
		rec := driver.InboxRecord{Consumer: "c", EventID: "bad-tx", Outcome: core.Applied, OccurredAt: time.Now()}
		if _, inserted, err := a.InsertRecord(ctx, tx, rec); err != nil || !inserted {
			return fmt.Errorf("InsertRecord = inserted %v, %v; want inserted: a refused InsertRecord was written", inserted, err)
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.fatalf("%v", err)
	}
}

// testLivenessTakeover (driver.Liveness, with Harness.Reopen and Harness.KillSession), on two
// adapters of one 4-lane outbox: the lanes of an owner holding a sign of life can be claimed
// as soon as its session ends, long before their leases expire; while the session lives (an
// owner alive but slow) they cannot; leases taken without a sign of life still wait for expiry;
// the old holder is fenced.
func testLivenessTakeover[TTx any](e *env[TTx]) {
	if !e.offers(Liveness) {
		return
	}
	if e.h.Reopen == nil || e.h.KillSession == nil {
		e.notOffered("Harness.Reopen and Harness.KillSession (the liveness area)")
		return
	}
	holder := capable[driver.Liveness](e, Liveness)
	claimer := e.h.Reopen(e.t, e.a)
	if claimer == nil {
		e.fatalf("Harness.Reopen returned nil")
	}
	ctx := e.ctx
	life, err := holder.HoldLiveness(ctx, "old")
	e.must(err, "HoldLiveness")
	defer func() { e.must(life.Release(), "Life.Release") }()
	old, err := e.a.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 2, TTL: time.Hour})
	e.must(err, "ClaimLanes(old)")
	if len(old) != 2 {
		e.fatalf("ClaimLanes(old, Max 2) took %d lanes", len(old))
	}
	e.must(life.Check(ctx), "Life.Check while the session lives")
	plain, err := e.a.ClaimLanes(ctx, driver.ClaimParams{Owner: "plain", Max: 2, TTL: time.Hour})
	e.must(err, "ClaimLanes(plain)")
	if len(plain) != 2 {
		e.fatalf("ClaimLanes(plain, Max 2) took %d lanes", len(plain))
	}
	claim := func() []driver.Lease {
		got, err := claimer.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
		e.must(err, "ClaimLanes(new)")
		return got
	}
	if got := claim(); len(got) != 0 {
		e.fatalf("the holders are alive, yet another worker claimed %+v", got)
	}
	e.must(e.h.KillSession(ctx, e.t, e.a, old[0].Lane), "Harness.KillSession")
	var got []driver.Lease
	e.waitFor("the dead session's lanes to come free", func() bool {
		got = claim()
		return len(got) > 0
	})
	if len(got) != 2 {
		e.fatalf("after the session died another worker claimed %+v; want only the dead session's 2 lanes, not those leased without a sign of life", got)
	}
	for i := range got {
		if got[i].Lane != old[i].Lane || got[i].Generation != old[i].Generation+1 {
			e.fatalf("claimed %+v after the session died; want lanes %+v with the next generation", got, old)
		}
	}
	if life.Check(ctx) == nil {
		e.fatalf("Life.Check returned nil after its session was killed")
	}
	if renewed, err := e.a.RenewLanes(ctx, driver.RenewParams{Leases: old, TTL: time.Hour}); err != nil || len(renewed) != 0 {
		e.fatalf("the old holder renewed %+v (%v); want it fenced", renewed, err)
	}
	if renewed, err := e.a.RenewLanes(ctx, driver.RenewParams{Leases: plain, TTL: time.Hour}); err != nil || len(renewed) != 2 {
		e.fatalf("the plain holder renewed %+v (%v); want its 2 lanes", renewed, err)
	}
}
