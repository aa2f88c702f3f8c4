// Package conformance is the test suite every outboxkit adapter must pass. An adapter calls Run
// from its own test file:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Harness[*sql.Tx]{
//			New:         func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] { ... },
//			Effect:      func(ctx context.Context, tx *sql.Tx, key string) error { ... },
//			EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) { ... },
//		})
//	}
//
// The suite drives the adapter through the real core.Outbox, core.Relay, core.Inbox and
// core.CleanupOutbox, with a recording, fault-injecting sink, so what it proves is what users
// get. Subtests have stable names (area/case); each runs under a watchdog that turns a hang into
// a failure. The package imports only core, the standard library, the module's own test hook
// (internal/testhook, which sets the clock of a cleanup without a public option), the public
// test helpers of package outboxtest and package reconcile (both import core and the standard
// library only).
//
// The suite proves itself: its own tests run it against the in-memory reference adapter (which
// must pass) and, in child processes, against test-only wrappers of it (faulty_test.go) that
// break one guarantee each through the adapter's exported API — an unfenced Settle, a Settle
// that checks its leases and applies in two steps, non-exclusive lanes, a Fetch without per-key
// blocking, an inbox without its unique key, a cleanup that deletes unpublished rows, a stale
// horizon, an unfenced publisher generation, a change stream that resumes past a lost position
// or reports positions one transaction ahead — each of which must fail in the subtests that
// check that guarantee.
//
// Sink, the recording and fault-injecting core.Sink the suite uses, is exported for tests of
// relays and sinks elsewhere, and so is CrashStore, the store of a relay process that can die at
// any point.
//
// RunSink is the suite of a core.Sink: a sink's test calls it with a SinkHarness whose New
// returns the sink, a destination and a way to read that destination back (SinkFixture). It
// proves the sink contract through the broker — one outcome per message, byte-exact delivery
// of what was acknowledged, core.CheckOutcomes' per-key rule when a message fails, concurrent
// Sends, cancelled contexts, permanent versus retryable failures, oversize messages, per-key
// order and the deduplication id — with the failure hooks and properties the harness declares;
// a case whose hook or property is missing logs that it is not offered. Every sink of the
// module runs it, and its self-test fails it on broken sinks.
package conformance

import (
	"context"
	"github.com/outboxkit/outbox/core/driver"
	"log/slog"
	"testing"
	"time"
)

// Adapter is everything the suite drives: the writer, relay, inbox, cleanup and admin
// contracts of package core.
type Adapter[TTx any] interface {
	driver.OutboxStore[TTx]
	driver.RelayStore
	driver.InboxStore[TTx]
	driver.Pruner
	driver.Admin
}

// Harness builds fresh fixtures for each subtest and declares what the adapter offers beyond
// Adapter: its optional capabilities (Capabilities) and the optional hooks below. Run checks
// each declared capability and fails an adapter whose declaration is not exactly what it
// implements; a capability or hook left out is logged as not offered, and its cases pass with
// nothing to check. Run's doc says what each case does without them.
type Harness[TTx any] struct {
	// New returns an adapter on a freshly migrated, empty outbox and inbox with the given lane
	// count, isolated from every other subtest (subtests may run in parallel). Release resources
	// with t.Cleanup. Required.
	New func(t *testing.T, lanes int) Adapter[TTx]
	// Effect applies a domain change in tx: it adds 1 to the counter named key (creating it at
	// 1), in a table of the same database. The suite uses it to prove that domain rows and
	// outbox rows commit together and that the inbox applies an effect exactly once. Required.
	Effect func(ctx context.Context, tx TTx, key string) error
	// EffectCount returns the committed value of the counter named key (0 when absent), as seen
	// by the adapter that New returned last in this subtest. Required.
	EffectCount func(ctx context.Context, a Adapter[TTx], key string) (int, error)
	// Capabilities declares the optional capabilities the adapter implements, as a set
	// (conformance.Waker | conformance.Notifier | ...). The "capabilities" subtest fails when
	// the adapter implements one of them that is not declared (the suite would otherwise skip
	// its checks silently) or when one is declared that the adapter does not implement; the
	// cases of each declared capability then check it. Default none.
	Capabilities Capability
	// Timeout bounds each subtest (the watchdog). Default 2 minutes.
	Timeout time.Duration
	// Diagnose, when set, is called when a subtest's watchdog fires, with a context of 10
	// seconds; what it returns is reported with the goroutines (e.g. the database's sessions,
	// locks and replication state, to tell a stalled server from a stalled adapter). Default
	// nil: the goroutines only.
	Diagnose func(ctx context.Context) string
	// Logger receives the logs of the relays the suite runs. Default: discarded.
	Logger *slog.Logger
	// NewUnmigrated, when set, runs the "unmigrated" area: it returns an adapter as New does
	// but on a database (or schema) that was never migrated, so that every entry point fails
	// with core.ErrSchemaMismatch. Release resources with t.Cleanup. Default nil: the area is
	// not offered.
	NewUnmigrated func(t *testing.T) Adapter[TTx]
	// NewForeign, when set, runs the badtx/foreign case: it returns an adapter on another
	// database (or store) migrated alike, whose transactions a (an adapter New returned in
	// this subtest) must refuse with core.ErrInvalidTx. Leave it nil when a's database accepts
	// them by design (a MySQL transaction spans the databases of a server and the adapter
	// names its tables with its database). Default nil: the case is not offered.
	NewForeign func(t *testing.T, a Adapter[TTx]) Adapter[TTx]
	// Reopen, with KillSession and the Liveness capability, runs the "liveness" area: it
	// returns a second adapter on the outbox of a, as a second relay process would open it.
	// Default nil: the area is not offered.
	Reopen func(t *testing.T, a Adapter[TTx]) Adapter[TTx]
	// KillSession ends the database session that holds the sign of life (driver.Liveness) of
	// the lease of lane in a's outbox, as the kernel does when the process holding it is
	// killed. Default nil: the liveness area is not offered.
	KillSession func(ctx context.Context, t *testing.T, a Adapter[TTx], lane int) error
	// CDC, when set, also runs the "cdc" area: core.CDCRelay on the adapter's own change log
	// (delivery in commit order, crash points, lost positions and Backfill, cutover between
	// polling and CDC, shadow mode). The adapter must then implement driver.CheckpointStore and
	// declare it (Capabilities).
	CDC *CDCHarness[TTx]
}

// CDCHarness gives the suite an adapter's change log.
type CDCHarness[TTx any] struct {
	// Source returns a change source on the outbox of a (an adapter New returned in this
	// subtest). name is unique within the subtest: two sources of one outbox with different
	// names must not share server-side state (a PostgreSQL replication slot), so that a shadow
	// relay can read beside the active one. Release resources with t.Cleanup. Required.
	Source func(t *testing.T, a Adapter[TTx], name string) driver.ChangeSource
	// LosePosition makes the position the relay last checkpointed unavailable while no relay
	// runs, as an operator or the server would: purge the binary logs, drop the slot. Required.
	LosePosition func(t *testing.T, a Adapter[TTx], src driver.ChangeSource)
	// Serial runs the area's cases one after another instead of in parallel (when LosePosition
	// acts on the whole server, as PURGE BINARY LOGS does).
	Serial bool
}
