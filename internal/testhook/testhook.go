// Package testhook holds the module's test hooks, kept out of the public API (as River keeps
// its test signals private): the clock of core's relays, shadow and cleanup, and the broken
// variants of the in-memory adapter that the conformance self-test must fail. The packages
// that own the hooked code install the functions below when they are initialised; only tests
// call them.
package testhook

import "time"

// SetClock makes opts (a *core.RelayOptions, *core.CDCOptions, *core.ShadowOptions or
// *core.CleanupOptions) use now as the time of every store call and cut-off that would
// otherwise use the database clock (or, for the shadow, time.Now). Package core installs it.
var SetClock func(opts any, now func() time.Time)

// Fault names a guarantee that a memory Store deliberately breaks (conformance self-test).
type Fault int

// Faults.
const (
	// NoFault: the store keeps every guarantee.
	NoFault Fault = iota
	// FaultUnfencedSettle: Settle ignores leases (owner, generation, expiry and lanes).
	FaultUnfencedSettle
	// FaultSharedLanes: ClaimLanes hands out the lowest lanes whoever holds them.
	FaultSharedLanes
	// FaultNoInboxKey: InsertRecord inserts even when (consumer, event id) exists.
	FaultNoInboxKey
	// FaultPruneUnpublished: PruneOutbox deletes rows whether or not they were published.
	FaultPruneUnpublished
	// FaultStaleHorizon: PruneInbox does not wait for open transactions, and Horizon returns the
	// horizon as of the transaction's start (a snapshot older than InsertRecord).
	FaultStaleHorizon
	// FaultRacySettle: Settle checks the leases, then lets other calls run, then applies its changes
	// (a check-then-act race instead of one transaction).
	FaultRacySettle
	// FaultNoKeyBlocking: Fetch ignores failed and parked records when choosing later records of
	// their partition key.
	FaultNoKeyBlocking
	// FaultUnfencedGeneration: ClaimLanes, RenewLanes and SaveCheckpoint ignore the publisher
	// generation.
	FaultUnfencedGeneration
	// FaultResumeAtHead: a change stream resumed from a position the log no longer holds starts at the
	// oldest position still held instead of failing (it skips the gap).
	FaultResumeAtHead
	// FaultPositionAhead: a change stream reports each transaction's position as the one after the
	// next transaction, so resuming from a checkpoint skips a transaction.
	FaultPositionAhead
)

// BreakMemory makes store, a *memory.Store that no goroutine uses yet, break f from now on. Package
// memory sets it in its init function.
var BreakMemory func(store any, f Fault)
