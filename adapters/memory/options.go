package memory

import "log/slog"

// Options configures a Store. The zero value (or nil) is ready to use.
type Options struct {
	// Lanes is the lane count, as a migration would record it. Default core.DefaultLanes;
	// at most core.MaxLanes.
	Lanes int
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
	// Fault deliberately breaks one guarantee. It exists only so that the conformance suite can
	// prove that it catches broken adapters. Default NoFault; never set it otherwise.
	Fault Fault
}

// Fault names a guarantee that a Store deliberately breaks (conformance self-tests only).
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
	// FaultUnheldHorizon: PruneInbox does not wait for transactions that read the horizon.
	FaultUnheldHorizon
	// FaultRacySettle: Settle checks the leases, then lets other calls run, then applies its
	// changes (a check-then-act race instead of one transaction).
	FaultRacySettle
	// FaultNoKeyBlocking: Fetch ignores failed and parked records when choosing later records
	// of their partition key.
	FaultNoKeyBlocking
	// FaultUnfencedGeneration: ClaimLanes, RenewLanes and SaveCheckpoint ignore the publisher
	// generation.
	FaultUnfencedGeneration
	// FaultResumeAtHead: a change stream resumed from a position the log no longer holds starts
	// at the oldest position still held instead of failing (it skips the gap).
	FaultResumeAtHead
	// FaultPositionAhead: a change stream reports each transaction's position as the one after
	// the next transaction, so resuming from a checkpoint skips a transaction.
	FaultPositionAhead
)
