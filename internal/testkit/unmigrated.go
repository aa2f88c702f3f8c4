package testkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
)

// UnmigratedCalls calls every entry point of the capabilities store has (core.Admin,
// core.RelayStore, core.Pruner, core.Operator, core.LaneResizer) once, with arguments that
// pass their own checks, and returns one line for each call whose error does not wrap
// core.ErrSchemaMismatch. An adapter's test runs it on a database that was never migrated:
// README and the adapters' docs promise that such a database fails every call with that
// error. It returns a line too when store has none of the capabilities.
func UnmigratedCalls(ctx context.Context, store any) []string {
	now := time.Now()
	lease := core.Lease{Lane: 0, Owner: "o", Generation: 1, Until: now.Add(time.Minute)}
	audit := core.AuditEntry{Actor: "t", Command: "test", Arguments: "{}"}
	prune := core.PruneParams{PublishedBefore: now, Limit: 10}
	var calls []struct {
		name string
		call func() error
	}
	add := func(name string, call func() error) {
		calls = append(calls, struct {
			name string
			call func() error
		}{name, call})
	}
	if a, ok := store.(core.Admin); ok {
		for _, st := range []core.RecordState{core.StateAll, core.StatePending, core.StateParked, core.StatePublished} {
			add(fmt.Sprintf("List(%v)", st), func() error { _, err := a.List(ctx, core.ListParams{State: st}); return err })
		}
		add("Stats", func() error { _, err := a.Stats(ctx); return err })
		add("Unpark", func() error { _, err := a.Unpark(ctx, "k"); return err })
		add("ParkedKeys", func() error { _, err := a.ParkedKeys(ctx); return err })
		add("Generation", func() error { _, err := a.Generation(ctx); return err })
	}
	if r, ok := store.(core.RelayStore); ok {
		add("AcquireGeneration", func() error {
			_, err := r.AcquireGeneration(ctx, core.AcquireParams{Kind: core.KindPolling, Holder: "o", Join: true})
			return err
		})
		add("LaneCount", func() error { _, err := r.LaneCount(ctx); return err })
		add("Heartbeat", func() error {
			_, err := r.Heartbeat(ctx, core.HeartbeatParams{Owner: "o", TTL: time.Minute})
			return err
		})
		add("ClaimLanes", func() error {
			_, err := r.ClaimLanes(ctx, core.ClaimParams{Generation: 1, Owner: "o", Max: 1, TTL: time.Minute})
			return err
		})
		add("RenewLanes", func() error {
			_, err := r.RenewLanes(ctx, core.RenewParams{Generation: 1, Leases: []core.Lease{lease}, TTL: time.Minute})
			return err
		})
		add("ReleaseLanes", func() error { return r.ReleaseLanes(ctx, []core.Lease{lease}) })
		add("Fetch", func() error {
			_, err := r.Fetch(ctx, core.FetchParams{Leases: []core.Lease{lease}, Limit: 10})
			return err
		})
		add("Settle", func() error {
			return r.Settle(ctx, core.SettleParams{Leases: []core.Lease{lease}, Published: []int64{1}})
		})
	}
	if p, ok := store.(core.Pruner); ok {
		add("PruneOutbox", func() error { _, err := p.PruneOutbox(ctx, prune); return err })
	}
	if o, ok := store.(core.Operator); ok {
		add("Replay", func() error {
			_, err := o.Replay(ctx, core.ReplayParams{IDs: []string{"e"}, Audit: &audit})
			return err
		})
		add("UnparkKeys", func() error { _, err := o.UnparkKeys(ctx, []string{"k"}, &audit); return err })
		add("PruneAudited", func() error { _, err := o.PruneAudited(ctx, prune, audit); return err })
		add("ResetLanes", func() error { _, err := o.ResetLanes(ctx, core.ResetLanesParams{All: true}, audit); return err })
		add("PruneInboxAudited", func() error {
			_, err := o.PruneInboxAudited(ctx, "c", now.Add(-time.Hour), 10, audit)
			return err
		})
		add("AuditLog", func() error { _, err := o.AuditLog(ctx, core.AuditListParams{}); return err })
	}
	if l, ok := store.(core.LaneResizer); ok {
		add("ResizeLanes", func() error { _, err := l.ResizeLanes(ctx, 8, audit); return err })
	}
	if len(calls) == 0 {
		return []string{fmt.Sprintf("%T has none of the capabilities", store)}
	}
	var bad []string
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, core.ErrSchemaMismatch) {
			bad = append(bad, fmt.Sprintf("%s: %v", c.name, err))
		}
	}
	return bad
}
