package conformance

import (
	"testing"
)

// Run runs the whole suite against the adapter that h builds. It is the suite's one entry
// point. It first checks h.Capabilities against an adapter of h.New (subtest "capabilities":
// every optional capability the adapter implements must be declared, and every declared one
// implemented) and logs one line of what h does not offer. Each area is a subtest and each case
// in it has a stable name, "area/case":
//
//   - write: atomicity, validation, duplicate, defaults, roundtrip, lane-count, tx-group
//   - lanes: exclusive, lowest-first, fair-share, expiry-takeover, taken-over, generation,
//     release, renew, heartbeat, resize-under-load, resize-stale-writer (the last two with
//     driver.LaneResizer)
//   - fencing: stale-settle, expired, race (1,000 races of a stale Settle against a takeover)
//   - delivery: at-least-once, order, rolled-back, crash-restart, delete-on-publish, wakeup
//     (with driver.Waker and driver.Notifier: Outbox.Notify wakes a relay that polls once an
//     hour, and with driver.Flusher Outbox.Flush returns nil; without both: Notify returns nil
//     and a relay delivers by polling), ingress (with driver.IngressCounter: the count grows
//     by the records of each committed transaction, and marks do not lower it)
//   - retry: fetch-blocking, holds-key, park-unpark, permanent, prefix-violation, sink-down
//   - cleanup: retention, below-seq, batches
//   - operator (core.Operator on a driver.OperatorStore): replay (Replay in seq order and its
//     refusals, the watermark behind a replayed event, audited Unpark and Cleanup, AuditLog),
//     lanes-reset (ResetLanes: the old owner's Settle and RenewLanes refused, another worker
//     claims the lanes at once, audit rows, bad selections refused), inbox-prune (PruneInbox:
//     the horizon raised, the records deleted in batches, audit rows), inbox-consumers
//     (InboxConsumers: names in order, horizons, counts up to the limit), wake (with driver.Waker
//     and driver.Notifier: Unpark and Replay wake a relay that polls once an hour), status
//     (Status: counts, blocked, destinations, publish rate, publisher, lanes),
//     checkpoint-release (with driver.CheckpointReleaser: the checkpoint deleted, audit rows),
//     audit-writer (with driver.AuditWriter: CheckAudit leaves no row, WriteAudit writes one)
//   - inbox: concurrent-once, digest-mismatch, handler-error, handler-panic, versions,
//     gap-reject, retention, consumers, horizon-after-insert, batch, batch-outcomes (through the
//     adapter's driver.InboxBatchStore when declared, and message by message), set,
//     prune-beside-delivery (without driver.SingleWriter: Inbox.Prune returns while a delivery's
//     transaction is open), tenants (the key (consumer, source, tenant, event ID): one tenant's
//     or source's message is never another's duplicate, versions per scope, a refused tenant,
//     a prune that deletes one record of a shared event ID)
//   - publisher: join-and-bump, stale-claim-and-renew, concurrent-acquire, checkpoint-fenced
//     (with driver.CheckpointStore, which Harness.CDC requires), polling-relay-fenced
//   - chain: handler-emits, handler-emits-rollback (an inbox handler writes outbox events in its
//     transaction: effect, inbox record and events commit together or not at all), outboxtest
//     (package outboxtest's database helpers on the adapter), reconcile (package reconcile on
//     the adapter; its inbox findings with reconcile.InboxReader)
//   - badtx: nil-and-ended (a nil and an ended transaction refused with core.ErrInvalidTx by
//     Outbox.Write and the inbox methods, nothing written), foreign (with Harness.NewForeign: the
//     same for a transaction of another database)
//   - unmigrated: schema-mismatch (with Harness.NewUnmigrated: every entry point of a database
//     never migrated fails with core.ErrSchemaMismatch)
//   - liveness: takeover (with driver.Liveness, Harness.Reopen and Harness.KillSession: a dead
//     session's lanes are claimed before their leases expire, a live one's are not, the old
//     holder is fenced)
//   - cdc (only with Harness.CDC): commit-order, crash-points, lost-position-backfill, cutover,
//     shadow, parked-key, retention
//
// A case of an optional capability that h does not declare passes with nothing to check and
// logs that it is not offered (go test -v shows it); wakeup checks the base behaviour instead. Areas and cases run in parallel, each case on its own adapter from h.New and under a
// watchdog (h.Timeout) that turns a hang into a failure with a dump of every goroutine.
// Relays, outboxes, inboxes and cleanups are the real ones of package core; the sink is this
// package's recording, fault-injecting Sink. Tests that need precise control call the store
// interfaces directly, with injected clocks (Now fields) instead of sleeps.
func Run[TTx any](t *testing.T, h Harness[TTx]) {
	t.Helper()
	if h.New == nil || h.Effect == nil || h.EffectCount == nil {
		t.Fatal("conformance: Harness.New, Effect and EffectCount are required")
	}
	t.Run("capabilities", func(t *testing.T) {
		watchdog(t, h.Timeout, h.Diagnose)
		checkCapabilities(t, h)
	})
	if off := notOffered(h); off != "" {
		t.Logf("conformance: not offered: %s; their cases check nothing", off)
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
	runArea(t, h, "badtx", badTxCases[TTx]())
	runArea(t, h, "unmigrated", unmigratedCases[TTx]())
	runArea(t, h, "liveness", livenessCases[TTx]())
	if h.CDC != nil {
		if h.CDC.Source == nil || h.CDC.LosePosition == nil {
			t.Fatal("conformance: CDCHarness.Source and LosePosition are required")
		}
		runAreaSerial(t, h, "cdc", cdcCases[TTx](), h.CDC.Serial)
	}
}
