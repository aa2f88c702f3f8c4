package testkit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// UnmigratedCalls calls every entry point of the capabilities store has (driver.Admin,
// driver.RelayStore, driver.Pruner, driver.OperatorStore through core.Operator, driver.LaneResizer) once, with arguments that
// pass their own checks, and returns one line for each call whose error does not wrap
// core.ErrSchemaMismatch. An adapter's test runs it on a database that was never migrated:
// README and the adapters' docs promise that such a database fails every call with that
// error. It returns a line too when store has none of the capabilities.
func UnmigratedCalls(ctx context.Context, store any) []string {
	now := time.Now()
	lease := driver.Lease{Lane: 0, Owner: "o", Generation: 1, Until: now.Add(time.Minute)}
	audit := driver.AuditEntry{Actor: "t", Command: "test", Arguments: "{}"}
	prune := driver.PruneParams{PublishedBefore: now, Limit: 10}
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
	if a, ok := store.(driver.Admin); ok {
		for _, st := range []driver.RecordState{driver.StateAll, driver.StatePending, driver.StateParked, driver.StatePublished} {
			add(fmt.Sprintf("List(%v)", st), func() error { _, err := a.List(ctx, driver.ListParams{State: st}); return err })
		}
		add("Stats", func() error { _, err := a.Stats(ctx); return err })
		add("Unpark", func() error { _, err := a.Unpark(ctx, "k"); return err })
		add("ParkedKeys", func() error { _, err := a.ParkedKeys(ctx); return err })
		add("Generation", func() error { _, err := a.Generation(ctx); return err })
	}
	if r, ok := store.(driver.RelayStore); ok {
		add("AcquireGeneration", func() error {
			_, err := r.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "o", Join: true})
			return err
		})
		add("LaneCount", func() error { _, err := r.LaneCount(ctx); return err })
		add("Heartbeat", func() error {
			_, err := r.Heartbeat(ctx, driver.HeartbeatParams{Owner: "o", TTL: time.Minute})
			return err
		})
		add("ClaimLanes", func() error {
			_, err := r.ClaimLanes(ctx, driver.ClaimParams{Generation: 1, Owner: "o", Max: 1, TTL: time.Minute})
			return err
		})
		add("RenewLanes", func() error {
			_, err := r.RenewLanes(ctx, driver.RenewParams{Generation: 1, Leases: []driver.Lease{lease}, TTL: time.Minute})
			return err
		})
		add("ReleaseLanes", func() error { return r.ReleaseLanes(ctx, []driver.Lease{lease}) })
		add("Fetch", func() error {
			_, err := r.Fetch(ctx, driver.FetchParams{Leases: []driver.Lease{lease}, Limit: 10})
			return err
		})
		add("Settle", func() error {
			return r.Settle(ctx, driver.SettleParams{Leases: []driver.Lease{lease}, Published: []int64{1}})
		})
	}
	if p, ok := store.(driver.Pruner); ok {
		add("PruneOutbox", func() error { _, err := p.PruneOutbox(ctx, prune); return err })
	}
	if st, ok := store.(driver.OperatorStore); ok {
		o, err := core.NewOperator(st, nil)
		if err != nil {
			return []string{fmt.Sprintf("NewOperator: %v", err)}
		}
		add("Replay", func() error {
			_, err := o.Replay(ctx, driver.ReplayParams{IDs: []string{"e"}, Audit: &audit})
			return err
		})
		add("Unpark", func() error { _, err := o.Unpark(ctx, []string{"k"}, &audit); return err })
		add("Cleanup", func() error { _, err := o.Cleanup(ctx, prune, audit); return err })
		add("ResetLanes", func() error { _, err := o.ResetLanes(ctx, driver.ResetLanesParams{All: true}, audit); return err })
		add("PruneInbox", func() error {
			_, err := o.PruneInbox(ctx, "c", now.Add(-time.Hour), 10, audit)
			return err
		})
		add("AuditLog", func() error { _, err := o.AuditLog(ctx, driver.AuditListParams{}); return err })
		add("Status", func() error { _, err := o.Status(ctx); return err })
	}
	if l, ok := store.(driver.LaneResizer); ok {
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
