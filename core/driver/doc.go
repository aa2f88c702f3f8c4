// Package driver is outboxkit's implementor API: what a database adapter or a sink implements,
// and the types and checks they share with package core. Applications do not need it: they call
// package core (Outbox, Relay, CDCRelay, Inbox) and pass it an adapter's store.
//
// It holds:
//   - the store interfaces, each sized for one caller in core: OutboxStore (Outbox.Write),
//     RelayStore (Relay), InboxStore and InboxBatchStore (Inbox), Pruner and PartitionPruner
//     (CleanupOutbox), CDCStore, CheckpointStore, ChangeSource and ChangeStream (CDCRelay);
//   - their parameters and row types (Record, Lease, ClaimParams, SettleParams, InboxRecord,
//     Checkpoint, ChangeTx, ...), and the fencing rule every adapter applies (Lease.HeldAt,
//     CheckLeases);
//   - the optional capabilities an adapter may offer (Admin, OperatorStore, StatusReader, LaneResizer,
//     LaneInserter, Notifier, Waker, Liveness, LogReleaser, ...);
//   - the shared validation rules (Normalize, CheckText, CheckConsumer, CheckReplay, ...) and
//     the sentinel errors, which core repeats under the same names for applications.
//
// An adapter proves that it keeps these contracts with package
// github.com/outboxkit/outbox/conformance, which every adapter of this module runs.
//
// The interfaces may grow between releases as the engines in core need more from a store;
// adapters outside this module should run the conformance suite of the version they build
// against.
package driver
