package conformance

import (
	"errors"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
)

func operatorCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "replay", lanes: 1, run: testOperatorReplay[TTx]},
	}
}

// testOperatorReplay (adapters with core.Operator; others pass it): Replay puts published
// events back to pending with their seqs, so Fetch returns them again in their original order
// and PruneOutbox keeps what follows them; it refuses, changing nothing and auditing nothing,
// unknown or pruned IDs, keys with unpublished events and an empty selection; by key and time
// it takes the key's published events since then; UnparkKeys and PruneAudited write their
// audit rows, and AuditLog returns the latest rows oldest first.
func testOperatorReplay[TTx any](e *env[TTx]) {
	op, isOp := e.a.(core.Operator)
	if !isOp {
		return
	}
	evs := e.write(event("a", 1), event("b", 1), event("a", 2), event("c", 1))
	a1, b1, a2, c1 := evs[0].ID, evs[1].ID, evs[2].ID, evs[3].ID
	ls := e.claim("w", 1, time.Hour, time.Now().Truncate(time.Microsecond))
	publish := func(want ...string) {
		e.t.Helper()
		recs, err := e.a.Fetch(e.ctx, core.FetchParams{Leases: ls, Limit: 100})
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
		e.must(e.a.Settle(e.ctx, core.SettleParams{Leases: ls, Published: seqs}), "Settle")
	}
	pending := func() []string {
		var out []string
		for _, r := range e.list(core.StatePending) {
			out = append(out, r.ID)
		}
		return out
	}
	publish(a1, b1, a2, c1)

	n, err := op.Replay(e.ctx, core.ReplayParams{IDs: []string{a2, a1, a2}, Audit: &core.AuditEntry{Actor: "t", Command: "replay", Arguments: `{"n":1}`}})
	e.must(err, "Replay by IDs")
	if n != 2 {
		e.fatalf("Replay replayed %d events, want 2", n)
	}
	if got := pending(); !slices.Equal(got, []string{a1, a2}) {
		e.fatalf("pending after Replay: %v, want [a1 a2]", got)
	}
	for _, r := range e.list(core.StatePending) {
		if r.Attempts != 0 || !r.PublishedAt.IsZero() || !r.ParkedAt.IsZero() || !r.NextAttemptAt.IsZero() {
			e.fatalf("a replayed record is not as never attempted: %+v", r)
		}
	}
	refused := func(what string, p core.ReplayParams, want error) {
		e.t.Helper()
		_, err := op.Replay(e.ctx, p)
		if !errors.Is(err, want) {
			e.fatalf("Replay %s: %v, want %v", what, err, want)
		}
	}
	refused("of an unpublished event", core.ReplayParams{IDs: []string{a1}, Audit: &core.AuditEntry{Actor: "t", Command: "replay"}}, core.ErrReplayKeyPending)
	refused("of a key with unpublished events", core.ReplayParams{PartitionKey: "a"}, core.ErrReplayKeyPending)
	refused("of an unknown ID", core.ReplayParams{IDs: []string{c1, "nope"}}, core.ErrReplayNotFound)
	refused("of nothing", core.ReplayParams{}, core.ErrInvalidOptions)
	if got := pending(); !slices.Equal(got, []string{a1, a2}) {
		e.fatalf("a refused Replay changed the records: pending %v", got)
	}
	// The watermark: nothing at or after the replayed a1 is deleted.
	pruned, err := e.a.PruneOutbox(e.ctx, core.PruneParams{PublishedBefore: time.Now().Add(time.Hour)})
	e.must(err, "PruneOutbox")
	if pruned != 0 {
		e.fatalf("PruneOutbox deleted %d rows behind a replayed event", pruned)
	}
	publish(a1, a2)

	refused("of a key since the future", core.ReplayParams{PartitionKey: "a", Since: time.Now().Add(time.Hour)}, core.ErrReplayNotFound)
	n, err = op.Replay(e.ctx, core.ReplayParams{PartitionKey: "a", Since: time.Now().Add(-time.Hour)})
	e.must(err, "Replay by key")
	if n != 2 {
		e.fatalf("Replay by key replayed %d events, want 2", n)
	}
	publish(a1, a2)

	_, err = op.UnparkKeys(e.ctx, []string{"a", "b"}, &core.AuditEntry{Actor: "t", Command: "unpark"})
	e.must(err, "UnparkKeys")
	pruned, err = op.PruneAudited(e.ctx, core.PruneParams{PublishedBefore: time.Now().Add(time.Hour), Limit: 3}, core.AuditEntry{Actor: "t", Command: "cleanup"})
	e.must(err, "PruneAudited")
	if pruned != 4 {
		e.fatalf("PruneAudited deleted %d rows, want 4 (in batches of 3)", pruned)
	}
	refused("of a pruned ID", core.ReplayParams{IDs: []string{b1}}, core.ErrReplayNotFound)

	log, err := op.AuditLog(e.ctx, core.AuditListParams{})
	e.must(err, "AuditLog")
	var got []string
	for _, a := range log {
		got = append(got, a.Command)
	}
	if !slices.Equal(got, []string{"replay", "unpark", "cleanup"}) || log[0].Rows != 2 || log[2].Rows != 4 || log[0].Arguments != `{"n":1}` || log[0].Actor != "t" {
		e.fatalf("AuditLog: %+v", log)
	}
	if latest, err := op.AuditLog(e.ctx, core.AuditListParams{Limit: 1}); err != nil || len(latest) != 1 || latest[0].Command != "cleanup" {
		e.fatalf("AuditLog(Limit 1): %+v, %v", latest, err)
	}
	if later, err := op.AuditLog(e.ctx, core.AuditListParams{Since: time.Now().Add(time.Hour)}); err != nil || len(later) != 0 {
		e.fatalf("AuditLog(Since the future): %+v, %v", later, err)
	}
}
