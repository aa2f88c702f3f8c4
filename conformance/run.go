package conformance

import (
	"testing"
)

// Run runs the whole suite against the adapter that h builds. It is the suite's one entry
// point. Each area is a subtest and each case in it has a stable name, "area/case":
//
//   - write: atomicity, validation, duplicate, defaults, roundtrip, lane-count
//   - lanes: exclusive, lowest-first, fair-share, expiry-takeover, generation, release, renew,
//     heartbeat
//   - fencing: stale-settle, expired, race (1,000 races of a stale Settle against a takeover)
//   - delivery: at-least-once, order, rolled-back, crash-restart, delete-on-publish, wakeup
//     (skipped unless the adapter implements core.Waker and core.Notifier)
//   - retry: fetch-blocking, holds-key, park-unpark, permanent, prefix-violation, sink-down
//   - cleanup: retention, below-seq, batches
//   - operator: replay (adapters with core.Operator: Replay in seq order and its refusals, the
//     watermark behind a replayed event, audited UnparkKeys and PruneAudited, AuditLog),
//     lanes-reset (ResetLanes: the old owner's Settle and RenewLanes refused, another worker
//     claims the lanes at once, audit rows, bad selections refused), inbox-prune
//     (PruneInboxAudited: the horizon raised, the records deleted in batches, audit rows)
//   - inbox: concurrent-once, digest-mismatch, handler-error, versions, gap-reject, retention,
//     consumers, horizon-after-insert
//   - chain: handler-emits, handler-emits-rollback (an inbox handler writes outbox events in its
//     transaction: effect, inbox record and events commit together or not at all), outboxtest
//     (package outboxtest's database helpers on the adapter)
//
// Areas and cases run in parallel, each case on its own adapter from h.New and under a
// watchdog (h.Timeout) that turns a hang into a failure with a dump of every goroutine.
// Relays, outboxes, inboxes and cleanups are the real ones of package core; the sink is this
// package's recording, fault-injecting Sink. Tests that need precise control call the store
// interfaces directly, with injected clocks (Now fields) instead of sleeps.
func Run[TTx any](t *testing.T, h Harness[TTx]) {
	t.Helper()
	if h.New == nil || h.Effect == nil || h.EffectCount == nil {
		t.Fatal("conformance: Harness.New, Effect and EffectCount are required")
	}
	runArea(t, h, "write", writeCases[TTx]())
	runArea(t, h, "lanes", laneCases[TTx]())
	runArea(t, h, "fencing", fencingCases[TTx]())
	runArea(t, h, "delivery", deliveryCases[TTx]())
	runArea(t, h, "retry", retryCases[TTx]())
	runArea(t, h, "cleanup", cleanupCases[TTx]())
	runArea(t, h, "operator", operatorCases[TTx]())
	runArea(t, h, "inbox", inboxCases[TTx]())
	runArea(t, h, "publisher", publisherCases[TTx]())
	runArea(t, h, "chain", chainCases[TTx]())
	if h.CDC != nil {
		if h.CDC.Source == nil || h.CDC.LosePosition == nil {
			t.Fatal("conformance: CDCHarness.Source and LosePosition are required")
		}
		runAreaSerial(t, h, "cdc", cdcCases[TTx](), h.CDC.Serial)
	}
}
