package conformance

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// operatorCases are the "operator" area's cases: core.Operator (the operator commands of
// outboxkit) driven on adapters with driver.OperatorStore (others pass them).
func operatorCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "replay", lanes: 1, run: testOperatorReplay[TTx]},
		{name: "lanes-reset", lanes: 4, run: testOperatorResetLanes[TTx]},
		{name: "inbox-prune", run: testOperatorPruneInbox[TTx]},
		{name: "inbox-consumers", run: testOperatorInboxConsumers[TTx]},
		{name: "wake", lanes: 4, run: testOperatorWake[TTx]},
		{name: "status", lanes: 4, run: testOperatorStatus[TTx]},
		{name: "checkpoint-release", run: testOperatorCheckpointRelease[TTx]},
		{name: "audit-writer", run: testOperatorAuditWriter[TTx]},
	}
}

// testOperatorInboxConsumers (driver.OperatorStore): StatusReader.InboxConsumers lists the
// consumers that hold records or have a horizon, in name order, each with its horizon and its
// record count up to the limit (More beyond it); an empty inbox lists none.
func testOperatorInboxConsumers[TTx any](e *env[TTx]) {
	if !e.offers(OperatorStore) {
		return
	}
	st := capable[driver.OperatorStore](e, OperatorStore)
	got, err := st.InboxConsumers(e.ctx, 2)
	e.must(err, "InboxConsumers of an empty inbox")
	if len(got) != 0 {
		e.fatalf("InboxConsumers of an empty inbox: %+v; want none", got)
	}
	f := e.inbox(nil)
	for i := range 3 {
		f.expect("b", "b-consumer", msg(fmt.Sprintf("m%d", i), "p"), "eff", core.Applied, 0)
	}
	f.expect("a", "a-consumer", msg("m0", "p"), "eff", core.Applied, 0)
	horizon := i0.Add(-time.Hour)
	_, err = f.in.Prune(e.ctx, "c-pruned", horizon, 10) // a horizon and no record
	e.must(err, "Inbox.Prune")
	got, err = st.InboxConsumers(e.ctx, 2)
	e.must(err, "InboxConsumers")
	want := []driver.InboxConsumer{
		{Consumer: "a-consumer", Records: 1},
		{Consumer: "b-consumer", Records: 2, More: true},
		{Consumer: "c-pruned", Horizon: horizon},
	}
	if len(got) != len(want) {
		e.fatalf("InboxConsumers(limit 2) = %+v; want %+v", got, want)
	}
	for i := range want {
		g := got[i]
		if g.Consumer != want[i].Consumer || g.Records != want[i].Records || g.More != want[i].More || !g.Horizon.Equal(want[i].Horizon) {
			e.fatalf("InboxConsumers(limit 2)[%d] = %+v; want %+v", i, g, want[i])
		}
	}
	got, err = st.InboxConsumers(e.ctx, 3)
	e.must(err, "InboxConsumers")
	if len(got) != 3 || got[1].Records != 3 || got[1].More {
		e.fatalf("InboxConsumers(limit 3) = %+v; want b-consumer's 3 records, not more", got)
	}
}

// testOperatorCheckpointRelease (driver.CheckpointReleaser, with driver.CheckpointStore and
// driver.OperatorStore): ReleaseCheckpoint reports false and writes its audit row (Rows 0)
// when there is no checkpoint; with one, it deletes it, reports true and writes its row with
// Rows 1.
func testOperatorCheckpointRelease[TTx any](e *env[TTx]) {
	if !e.offers(CheckpointReleaser) {
		return
	}
	rel := capable[driver.CheckpointReleaser](e, CheckpointReleaser)
	if !e.offers(CheckpointStore | OperatorStore) {
		e.fatalf("Harness.Capabilities declares driver.CheckpointReleaser without driver.CheckpointStore and driver.OperatorStore")
	}
	cs := capable[driver.CheckpointStore](e, CheckpointStore)
	op, _ := e.operator(nil)
	audit := driver.AuditEntry{Actor: "conformance", Command: "cdc release", Arguments: "{}"}
	if had, err := rel.ReleaseCheckpoint(e.ctx, audit); err != nil || had {
		e.fatalf("ReleaseCheckpoint without a checkpoint = %v, %v; want false, nil", had, err)
	}
	g, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "a"})
	e.must(err, "AcquireGeneration")
	e.must(cs.SaveCheckpoint(e.ctx, driver.Checkpoint{Source: "src", Position: "pos", Generation: g.Generation}), "SaveCheckpoint")
	if had, err := rel.ReleaseCheckpoint(e.ctx, audit); err != nil || !had {
		e.fatalf("ReleaseCheckpoint with a checkpoint = %v, %v; want true, nil", had, err)
	}
	if c, ok, err := cs.LoadCheckpoint(e.ctx); err != nil || ok {
		e.fatalf("LoadCheckpoint after ReleaseCheckpoint = %+v, %v, %v; want none", c, ok, err)
	}
	log, err := op.AuditLog(e.ctx, driver.AuditListParams{})
	e.must(err, "AuditLog")
	if len(log) != 2 || log[0].Command != "cdc release" || log[0].Actor != "conformance" || log[0].Rows != 0 ||
		log[1].Command != "cdc release" || log[1].Rows != 1 {
		e.fatalf("AuditLog after two releases: %+v; want two \"cdc release\" rows by conformance, Rows 0 then 1", log)
	}
}

// testOperatorAuditWriter (driver.AuditWriter, with driver.OperatorStore): CheckAudit leaves no
// row; WriteAudit writes its row with Rows as given, which AuditLog returns.
func testOperatorAuditWriter[TTx any](e *env[TTx]) {
	if !e.offers(AuditWriter) {
		return
	}
	aw := capable[driver.AuditWriter](e, AuditWriter)
	if !e.offers(OperatorStore) {
		e.fatalf("Harness.Capabilities declares driver.AuditWriter without driver.OperatorStore")
	}
	op, _ := e.operator(nil)
	e.must(aw.CheckAudit(e.ctx), "CheckAudit")
	if log, err := op.AuditLog(e.ctx, driver.AuditListParams{}); err != nil || len(log) != 0 {
		e.fatalf("AuditLog after CheckAudit: %+v, %v; want no row", log, err)
	}
	e.must(aw.WriteAudit(e.ctx, driver.AuditEntry{Actor: "conformance", Command: "backfill", Arguments: `{"n":3}`, Rows: 3}), "WriteAudit")
	log, err := op.AuditLog(e.ctx, driver.AuditListParams{})
	e.must(err, "AuditLog")
	if len(log) != 1 || log[0].Command != "backfill" || log[0].Actor != "conformance" || log[0].Rows != 3 || log[0].ID == 0 {
		e.fatalf("AuditLog after WriteAudit: %+v; want one \"backfill\" row by conformance with Rows 3", log)
	}
}

// operator returns a core.Operator on the adapter, or false (logged) when the adapter is no
// driver.OperatorStore.
func (e *env[TTx]) operator(opts *core.OperatorOptions) (*core.Operator, bool) {
	e.t.Helper()
	if !e.offers(OperatorStore) {
		return nil, false
	}
	st := capable[driver.OperatorStore](e, OperatorStore)
	op, err := core.NewOperator(st, opts)
	e.must(err, "NewOperator")
	return op, true
}

// testOperatorReplay (adapters with driver.OperatorStore; others pass it): Replay puts published
// events back to pending with their seqs, so Fetch returns them again in their original order
// and PruneOutbox keeps what follows them; it refuses, changing nothing and auditing nothing,
// unknown or pruned IDs, keys with unpublished events and an empty selection; by key and time
// it takes the key's published events since then; Unpark and Cleanup write their audit rows,
// and AuditLog returns the latest rows oldest first.
func testOperatorReplay[TTx any](e *env[TTx]) {
	op, isOp := e.operator(nil)
	if !isOp {
		return
	}
	evs := e.write(event("a", 1), event("b", 1), event("a", 2), event("c", 1))
	a1, b1, a2, c1 := evs[0].ID, evs[1].ID, evs[2].ID, evs[3].ID
	ls := e.claim("w", 1, time.Hour, time.Now().Truncate(time.Microsecond))
	publish := func(want ...string) {
		e.t.Helper()
		recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: ls, Limit: 100})
		e.must(err, "Fetch")
		var got []string
		var seqs []int64
		for _, r := range recs {
			got = append(got, r.ID)
			seqs = append(seqs, r.Seq)
		}
		if !slices.Equal(got, want) {
			e.fatalf("Fetch returned %v, want %v (seq order)", got, want)
		}
		e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: ls, Published: seqs}), "Settle")
	}
	pending := func() []string {
		var out []string
		for _, r := range e.list(driver.StatePending) {
			out = append(out, r.ID)
		}
		return out
	}
	publish(a1, b1, a2, c1)

	n, err := op.Replay(e.ctx, driver.ReplayParams{IDs: []string{a2, a1, a2}, Audit: &driver.AuditEntry{Actor: "t", Command: "replay", Arguments: `{"n":1}`}})
	e.must(err, "Replay by IDs")
	if n != 2 {
		e.fatalf("Replay replayed %d events, want 2", n)
	}
	if got := pending(); !slices.Equal(got, []string{a1, a2}) {
		e.fatalf("pending after Replay: %v, want [a1 a2]", got)
	}
	for _, r := range e.list(driver.StatePending) {
		if r.Attempts != 0 || !r.PublishedAt.IsZero() || !r.ParkedAt.IsZero() || !r.NextAttemptAt.IsZero() {
			e.fatalf("a replayed record is not as never attempted: %+v", r)
		}
	}
	refused := func(what string, p driver.ReplayParams, want error) {
		e.t.Helper()
		_, err := op.Replay(e.ctx, p)
		if !errors.Is(err, want) {
			e.fatalf("Replay %s: %v, want %v", what, err, want)
		}
	}
	refused("of an unpublished event", driver.ReplayParams{IDs: []string{a1}, Audit: &driver.AuditEntry{Actor: "t", Command: "replay"}}, core.ErrReplayKeyPending)
	refused("of a key with unpublished events", driver.ReplayParams{PartitionKey: "a"}, core.ErrReplayKeyPending)
	refused("of an unknown ID", driver.ReplayParams{IDs: []string{c1, "nope"}}, core.ErrReplayNotFound)
	refused("of nothing", driver.ReplayParams{}, core.ErrInvalidOptions)
	if got := pending(); !slices.Equal(got, []string{a1, a2}) {
		e.fatalf("a refused Replay changed the records: pending %v", got)
	}
	// The watermark: nothing at or after the replayed a1 is deleted.
	pruned, err := e.a.PruneOutbox(e.ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour)})
	e.must(err, "PruneOutbox")
	if pruned != 0 {
		e.fatalf("PruneOutbox deleted %d rows behind a replayed event", pruned)
	}
	publish(a1, a2)

	refused("of a key since the future", driver.ReplayParams{PartitionKey: "a", Since: time.Now().Add(time.Hour)}, core.ErrReplayNotFound)
	n, err = op.Replay(e.ctx, driver.ReplayParams{PartitionKey: "a", Since: time.Now().Add(-time.Hour)})
	e.must(err, "Replay by key")
	if n != 2 {
		e.fatalf("Replay by key replayed %d events, want 2", n)
	}
	publish(a1, a2)

	_, err = op.Unpark(e.ctx, []string{"a", "b"}, &driver.AuditEntry{Actor: "t", Command: "unpark"})
	e.must(err, "Unpark")
	pruned, err = op.Cleanup(e.ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour), Limit: 3}, driver.AuditEntry{Actor: "t", Command: "cleanup"})
	e.must(err, "Cleanup")
	if pruned != 4 {
		e.fatalf("Cleanup deleted %d rows, want 4 (in batches of 3)", pruned)
	}
	refused("of a pruned ID", driver.ReplayParams{IDs: []string{b1}}, core.ErrReplayNotFound)

	log, err := op.AuditLog(e.ctx, driver.AuditListParams{})
	e.must(err, "AuditLog")
	var got []string
	for _, a := range log {
		got = append(got, a.Command)
	}
	if !slices.Equal(got, []string{"replay", "unpark", "cleanup"}) || log[0].Rows != 2 || log[2].Rows != 4 || log[0].Arguments != `{"n":1}` || log[0].Actor != "t" {
		e.fatalf("AuditLog: %+v", log)
	}
	if latest, err := op.AuditLog(e.ctx, driver.AuditListParams{Limit: 1}); err != nil || len(latest) != 1 || latest[0].Command != "cleanup" {
		e.fatalf("AuditLog(Limit 1): %+v, %v", latest, err)
	}
	if later, err := op.AuditLog(e.ctx, driver.AuditListParams{Since: time.Now().Add(time.Hour)}); err != nil || len(later) != 0 {
		e.fatalf("AuditLog(Since the future): %+v, %v", later, err)
	}
}

// testOperatorResetLanes (adapters with driver.OperatorStore): ResetLanes ends the selected held
// leases at once. The old owner's Settle (even by its own clock, at which its lease has not
// run out) and RenewLanes are refused and mark nothing; another worker claims the lanes at
// that same time, as free lanes, with the generation incremented by the reset and by its
// claim; other owners' leases are untouched; the audit rows count the lanes changed (free
// lanes are not); a bad selection is refused, changing and auditing nothing.
func testOperatorResetLanes[TTx any](e *env[TTx]) {
	op, isOp := e.operator(nil)
	if !isOp {
		return
	}
	e.write(event(keyForLane(4, 0, 0), 1), event(keyForLane(4, 1, 0), 1), event(keyForLane(4, 2, 0), 1))
	t0 := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	stale := e.claim("stalled", 2, time.Hour, t0)
	other := e.claim("other", 1, time.Hour, t0)
	if len(stale) != 2 || stale[0].Lane != 0 || stale[1].Lane != 1 || len(other) != 1 || other[0].Lane != 2 {
		e.fatalf("claims: %+v, %+v; want lanes 0 and 1, then 2", stale, other)
	}
	recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: stale, Limit: 10})
	e.must(err, "Fetch")
	if len(recs) != 2 {
		e.fatalf("Fetch of lanes 0 and 1 returned %d records, want 2", len(recs))
	}
	seqs := []int64{recs[0].Seq, recs[1].Seq}

	for _, p := range []driver.ResetLanesParams{
		{}, {Lanes: []int{0}, Owner: "stalled"}, {Owner: "stalled", All: true}, {Lanes: []int{4}}, {Lanes: []int{1, -1}},
	} {
		if _, err := op.ResetLanes(e.ctx, p, driver.AuditEntry{Actor: "t", Command: "lanes reset"}); !errors.Is(err, core.ErrInvalidOptions) {
			e.fatalf("ResetLanes(%+v): %v, want an *OptionError", p, err)
		}
	}
	if log, err := op.AuditLog(e.ctx, driver.AuditListParams{}); err != nil || len(log) != 0 {
		e.fatalf("refused ResetLanes wrote audit rows: %+v, %v", log, err)
	}
	if renewed, err := e.a.RenewLanes(e.ctx, driver.RenewParams{Leases: stale, TTL: time.Hour, Now: t0}); err != nil || len(renewed) != 2 {
		e.fatalf("a refused ResetLanes changed the leases: RenewLanes returned %+v, %v", renewed, err)
	}

	n, err := op.ResetLanes(e.ctx, driver.ResetLanesParams{Owner: "stalled"}, driver.AuditEntry{Actor: "t", Command: "lanes reset", Arguments: `{"owner":"stalled"}`})
	e.must(err, "ResetLanes(Owner)")
	if n != 2 {
		e.fatalf("ResetLanes(Owner) changed %d lanes, want 2", n)
	}
	staleSettle := func(when string, now time.Time) {
		e.t.Helper()
		err := e.a.Settle(e.ctx, driver.SettleParams{Leases: stale, Published: seqs, Now: now})
		var lost *driver.LanesLostError
		if !errors.As(err, &lost) || !slices.Equal(lost.Lanes, []int{0, 1}) {
			e.fatalf("the old owner's Settle %s after ResetLanes: %v, want a *LanesLostError naming lanes 0 and 1", when, err)
		}
		if got := len(e.list(driver.StatePending)); got != 3 {
			e.fatalf("the old owner's refused Settle %s changed records: %d pending, want 3", when, got)
		}
	}
	staleSettle("by its own clock", t0)
	staleSettle("by the database clock", time.Time{})
	if renewed, err := e.a.RenewLanes(e.ctx, driver.RenewParams{Leases: stale, TTL: time.Hour, Now: t0}); err != nil || len(renewed) != 0 {
		e.fatalf("the old owner renewed reset leases: %+v, %v", renewed, err)
	}

	// Another worker claims them at once (at t0, when the old leases had an hour left).
	next := e.claim("next", 4, time.Hour, t0)
	if len(next) != 3 || next[0].Lane != 0 || next[1].Lane != 1 || next[2].Lane != 3 {
		e.fatalf("a claim after ResetLanes got %+v, want lanes 0, 1 and the free 3", next)
	}
	for i, l := range next[:2] {
		if l.Generation != stale[i].Generation+2 {
			e.fatalf("lane %d: generation %d after ResetLanes and a claim, want %d (the reset's and the claim's)", l.Lane, l.Generation, stale[i].Generation+2)
		}
	}
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: next[:2], Published: seqs, Now: t0}), "Settle by the new owner")
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: other, Published: []int64{e.list(driver.StatePending)[0].Seq}, Now: t0}), "Settle by an owner whose lanes were not reset")
	staleSettle2 := e.a.Settle(e.ctx, driver.SettleParams{Leases: stale, Failed: []driver.Failure{{Seq: seqs[0], Lane: 0, Error: "x"}}, Now: t0})
	if !errors.As(staleSettle2, new(*driver.LanesLostError)) {
		e.fatalf("the old owner's Settle after the takeover: %v, want a *LanesLostError", staleSettle2)
	}

	n, err = op.ResetLanes(e.ctx, driver.ResetLanesParams{Lanes: []int{2, 3, 2}}, driver.AuditEntry{Actor: "t", Command: "lanes reset"})
	e.must(err, "ResetLanes(Lanes)")
	if n != 2 {
		e.fatalf("ResetLanes(Lanes 2, 3) changed %d lanes, want 2", n)
	}
	n, err = op.ResetLanes(e.ctx, driver.ResetLanesParams{All: true}, driver.AuditEntry{Actor: "t", Command: "lanes reset"})
	e.must(err, "ResetLanes(All)")
	if n != 2 {
		e.fatalf("ResetLanes(All) changed %d lanes, want 2 (lanes 0 and 1 of the new owner)", n)
	}
	n, err = op.ResetLanes(e.ctx, driver.ResetLanesParams{All: true}, driver.AuditEntry{Actor: "t", Command: "lanes reset"})
	e.must(err, "ResetLanes(All) of free lanes")
	if n != 0 {
		e.fatalf("ResetLanes(All) changed %d free lanes", n)
	}
	log, rows := auditRows(e, op, "lanes reset")
	if !slices.Equal(rows, []int64{2, 2, 2, 0}) || log[0].Arguments != `{"owner":"stalled"}` {
		e.fatalf("AuditLog after four resets: %+v", log)
	}
}

// testOperatorPruneInbox (adapters with driver.OperatorStore): PruneInbox is Inbox.Prune with
// an audit row: it raises the horizon (older messages are refused, newer ones and other
// consumers untouched), deletes the older records limit at a time, whether or not the last
// batch is full, and its audit row counts them; bad arguments change and audit nothing.
func testOperatorPruneInbox[TTx any](e *env[TTx]) {
	op, isOp := e.operator(nil)
	if !isOp {
		return
	}
	f := e.inbox(nil)
	at := func(id string, d time.Duration) core.InboxMessage {
		m := msg(id, "p")
		m.OccurredAt = i0.Add(d)
		return m
	}
	for i := range 5 {
		f.expect("old", "c1", at(fmt.Sprintf("o%d", i), -time.Duration(i)*time.Minute), "eff", core.Applied, 0)
	}
	f.expect("new", "c1", at("n", 3*time.Hour), "eff", core.Applied, 0)
	f.expect("other consumer", "c2", at("o0", 0), "eff", core.Applied, 0)
	audit := driver.AuditEntry{Actor: "t", Command: "inbox prune", Arguments: `{"consumer":"c1"}`}
	for _, c := range []struct {
		consumer string
		before   time.Time
		limit    int
		want     error
	}{
		{"c1", core.MinTime.Add(-time.Second), 2, core.ErrInvalidHorizon},
		{"c1", time.Now().Add(time.Hour), 2, core.ErrInvalidHorizon},
		{"", i0.Add(time.Hour), 2, core.ErrInvalidMessage},
		{"c1", i0.Add(time.Hour), core.MaxPruneLimit + 1, core.ErrInvalidOptions},
	} {
		if _, err := op.PruneInbox(e.ctx, c.consumer, c.before, c.limit, audit); !errors.Is(err, c.want) {
			e.fatalf("PruneInbox(%q, %v, %d): %v, want %v", c.consumer, c.before, c.limit, err, c.want)
		}
	}
	if log, err := op.AuditLog(e.ctx, driver.AuditListParams{}); err != nil || len(log) != 0 {
		e.fatalf("refused PruneInbox wrote audit rows: %+v, %v", log, err)
	}
	f.expect("a refused prune moved no horizon", "c1", at("o0", 0), "eff", core.Duplicate, core.Applied)

	n, err := op.PruneInbox(e.ctx, "c1", i0.Add(time.Hour), 2, audit)
	e.must(err, "PruneInbox")
	counts := []int64{int64(n)} // what each audit row holds
	if !e.prunedOK(n, 5) {
		e.fatalf("PruneInbox deleted %d records, want 5 (in batches of 2)", n)
	}
	f.expectErr("pruned message redelivered", "c1", at("o0", 0), "eff", core.ErrBeyondRetention)
	f.expect("newer message redelivered", "c1", at("n", 3*time.Hour), "eff", core.Duplicate, core.Applied)
	f.expect("other consumer's record kept", "c2", at("o0", 0), "eff", core.Duplicate, core.Applied)
	for i := range 4 {
		f.expect("between the horizons", "c1", at(fmt.Sprintf("b%d", i), 2*time.Hour), "eff", core.Applied, 0)
	}
	n, err = op.PruneInbox(e.ctx, "c1", i0.Add(150*time.Minute), 2, driver.AuditEntry{Actor: "t", Command: "inbox prune"})
	e.must(err, "PruneInbox (full last batch)")
	counts = append(counts, int64(n))
	if !e.prunedOK(n, 4) {
		e.fatalf("PruneInbox deleted %d records, want 4 (two full batches)", n)
	}
	n, err = op.PruneInbox(e.ctx, "c1", i0, 0, driver.AuditEntry{Actor: "t", Command: "inbox prune"})
	e.must(err, "PruneInbox (lower)")
	if n != 0 {
		e.fatalf("a lower PruneInbox deleted %d records", n)
	}
	f.expectErr("after a lower prune the horizon stays", "c1", at("b9", 2*time.Hour), "eff", core.ErrBeyondRetention)
	e.expectEffect("eff", 11)
	log, rows := auditRows(e, op, "inbox prune")
	if !slices.Equal(rows, append(counts, 0)) || log[0].Arguments != `{"consumer":"c1"}` || log[0].Actor != "t" {
		e.fatalf("AuditLog after three prunes: %+v", log)
	}
}

// auditRows returns op's audit log, every row of which must be of command, and the rows'
// Rows.
func auditRows[TTx any](e *env[TTx], op *core.Operator, command string) ([]driver.AuditEntry, []int64) {
	e.t.Helper()
	log, err := op.AuditLog(e.ctx, driver.AuditListParams{})
	e.must(err, "AuditLog")
	var rows []int64
	for _, a := range log {
		if a.Command != command {
			e.fatalf("AuditLog: %+v", log)
		}
		rows = append(rows, a.Rows)
	}
	return log, rows
}

// testOperatorWake (adapters with driver.OperatorStore, driver.Waker and driver.Notifier):
// Unpark and Replay wake the relays: a relay that polls once an hour delivers an unparked key's
// events, and then the replayed events again, within seconds of the command (it sleeps for an
// hour otherwise).
func testOperatorWake[TTx any](e *env[TTx]) {
	op, isOp := e.operator(nil)
	if !isOp {
		return
	}
	if !e.offers(Waker | Notifier) {
		return
	}
	sink := NewSink()
	w := ids(e.write(event("wake", 1), event("wake", 2)))
	sink.FailID(w[0], core.Permanent(errInjected)) // parked at its first send
	o := relayOptions(e.name("sleepy"))
	o.PollInterval = time.Hour
	o.LeaseTTL = time.Minute
	r := e.startRelay(e.a, sink, o)
	e.waitFor("the relay to claim its lanes", func() bool { return r.r.Stats().Lanes == e.lanes })
	e.waitFor("the failing event to be parked", func() bool { return e.stats().Parked == 1 })
	sink.FailID(w[0], nil)
	within := func(what string, cond func() bool) {
		e.t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				e.fatalf("%s: not within 10s (the relay polls once an hour: it was not woken)", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	n, err := op.Unpark(e.ctx, []string{"wake"}, &driver.AuditEntry{Actor: "t", Command: "unpark"})
	e.must(err, "Unpark")
	if n != 1 {
		e.fatalf("Unpark changed %d records, want 1", n)
	}
	within("the unparked key's events delivered after Unpark", func() bool { return sink.AllAcked(w) })
	e.waitSettled()
	n, err = op.Replay(e.ctx, driver.ReplayParams{IDs: w, Audit: &driver.AuditEntry{Actor: "t", Command: "replay"}})
	e.must(err, "Replay")
	if n != 2 {
		e.fatalf("Replay replayed %d events, want 2", n)
	}
	within("the replayed events delivered again after Replay", func() bool { return sink.Acks(w[0]) >= 2 && sink.Acks(w[1]) >= 2 })
	e.checkOrder(sink, map[string][]string{"wake": w})
}

// testOperatorStatus (adapters with driver.OperatorStore): Status answers every status read:
// the counts (a parked record, the pending record blocked behind it, a published one), the
// pending records per destination (bounded by StatusDestinations, partial then), the publish
// rate of the last minute when the adapter can tell, the publisher generation, no checkpoint,
// and every lane's lease.
func testOperatorStatus[TTx any](e *env[TTx]) {
	op, isOp := e.operator(nil)
	if !isOp {
		return
	}
	s, err := op.Status(e.ctx)
	e.must(err, "Status of an empty outbox")
	if s.Pending != 0 || s.Parked != 0 || s.Published != 0 || s.Blocked != 0 || !s.OldestPendingAt.IsZero() || len(s.Destinations) != 0 || s.DestinationsPartial || len(s.Lanes) != e.lanes || s.Checkpoint != nil {
		e.fatalf("Status of an empty outbox: %+v", s)
	}
	if s.PublishRateKnown && s.PublishRate != 0 {
		e.fatalf("Status of an empty outbox: publish rate %v", s.PublishRate)
	}
	b := event("b", 1)
	b.Destination = "elsewhere"
	evs := e.write(event("a", 1), event("a", 2), b, event("c", 1))
	a1, a2, c1 := evs[0].ID, evs[1].ID, evs[3].ID
	pub, err := e.a.AcquireGeneration(e.ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "status"})
	e.must(err, "AcquireGeneration")
	ls, err := e.a.ClaimLanes(e.ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w", Max: e.lanes, TTL: time.Hour})
	e.must(err, "ClaimLanes")
	recs, err := e.a.Fetch(e.ctx, driver.FetchParams{Leases: ls, Limit: 10})
	e.must(err, "Fetch")
	seq := map[string]driver.Record{}
	for _, r := range recs {
		seq[r.ID] = r
	}
	if _, ok := seq[a1]; !ok {
		e.fatalf("Fetch did not return %s", a1)
	}
	e.must(e.a.Settle(e.ctx, driver.SettleParams{Leases: ls, Published: []int64{seq[c1].Seq},
		Failed: []driver.Failure{{Seq: seq[a1].Seq, Lane: seq[a1].Lane, Error: "x", Park: true}}}), "Settle")

	s, err = op.Status(e.ctx)
	e.must(err, "Status")
	if s.Pending != 2 || s.Parked != 1 || s.Published != 1 || s.Blocked != 1 || s.OldestPendingAt.IsZero() {
		e.fatalf("Status counts: pending %d, parked %d, published %d, blocked %d, oldest %v; want 2, 1, 1, 1 (%s behind %s) and a time",
			s.Pending, s.Parked, s.Published, s.Blocked, s.OldestPendingAt, a2, a1)
	}
	if len(s.Destinations) != 2 || s.Destinations[""] != 1 || s.Destinations["elsewhere"] != 1 || s.DestinationsPartial {
		e.fatalf("Status destinations: %v (partial %v), want one pending of \"\" and one of \"elsewhere\"", s.Destinations, s.DestinationsPartial)
	}
	if s.PublishRateKnown && s.PublishRate <= 0 {
		e.fatalf("Status publish rate %v after a publication, want > 0", s.PublishRate)
	}
	if !s.PublishRateKnown {
		e.t.Log("the adapter cannot tell the publish rate")
	}
	if s.Publisher.Generation != pub.Generation || s.Publisher.Kind != driver.KindPolling || s.Publisher.Holder != "status" {
		e.fatalf("Status publisher %+v, want %+v", s.Publisher, pub)
	}
	if len(s.Lanes) != e.lanes {
		e.fatalf("Status lanes: %+v, want %d", s.Lanes, e.lanes)
	}
	for i, l := range s.Lanes {
		if l.Lane != i || l.Owner != "w" || l.Generation != ls[i].Generation || !l.Until.Equal(ls[i].Until) {
			e.fatalf("Status lane %d: %+v, want %+v", i, l, ls[i])
		}
	}

	// StatusDestinations bounds the breakdown to the oldest pending records.
	op1, _ := e.operator(&core.OperatorOptions{StatusDestinations: 1})
	s, err = op1.Status(e.ctx)
	e.must(err, "Status (StatusDestinations 1)")
	if len(s.Destinations) != 1 || s.Destinations[""] != 1 || !s.DestinationsPartial {
		e.fatalf("Status destinations of the oldest pending record: %v (partial %v), want {\"\": 1}, partial (%s is older than %s)", s.Destinations, s.DestinationsPartial, a2, evs[2].ID)
	}
}
