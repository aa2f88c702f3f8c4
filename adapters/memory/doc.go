// Package memory is the in-memory reference adapter of outboxkit. It implements every contract
// of package core that the conformance suite checks (driver.OutboxStore, driver.RelayStore,
// driver.InboxStore, driver.Pruner, driver.Admin) plus driver.InboxBatchStore,
// driver.Notifier and driver.Waker, the operator commands' steps and status reads
// (driver.OperatorStore, driver.StatusReader: run them with core.Operator),
// driver.LaneInserter, driver.LaneResizer, driver.CDCStore, driver.CheckpointStore,
// driver.CheckpointReleaser, driver.AuditWriter and reconcile.InboxReader, with the
// transaction type *Tx. It needs no infrastructure: use it in tests, examples and demos, and as
// the model a database adapter is compared against.
//
// # Guarantees
//
//   - Transactions are serialisable: Store.InTx (there is no Begin/Commit; InTx is the only way
//     to get a *Tx) takes one global writer lock for the whole transaction (like SQLite's single
//     writer). Writes made through a *Tx (Insert, Incr, the
//     inbox methods) are kept in the transaction and applied atomically when fn returns nil; they
//     are invisible to every other caller until then, and discarded when fn returns an error or
//     panics. Inside the transaction they are visible to the same *Tx.
//   - Insert is all or nothing; a duplicate ID (committed or earlier in the same transaction)
//     returns an error wrapping core.ErrDuplicateEvent. Seq is assigned in insertion order.
//   - Relay calls (ClaimLanes, Settle, ...) lock the state briefly and are atomic: Settle checks
//     every lease first and changes nothing when one is lost (*driver.LanesLostError).
//   - PruneInbox takes the writer lock, so it runs between transactions (the single-writer form
//     of driver.InboxStore's retention rule). With a single writer, InsertRecord never waits for
//     another transaction.
//   - An operator transaction (InOperatorTx, which core.Operator runs) holds the writer lock
//     and the state for its whole length and undoes its steps unless it commits.
//     ReleaseCheckpoint (the checkpoint deleted with its audit row), WriteAudit and CheckAudit
//     (whose row is always undone; only a done ctx refuses it) each run as one.
//   - The inbox batch methods (LockVersions, InsertRecords, SetVersions) are the single-record
//     methods applied to each entity or record in order, kept in the *Tx like them.
//     InboxRecords reads committed records only.
//   - Times are UTC with microsecond precision, like the SQL adapters. Every call with a Now
//     field uses it when non-zero, else time.Now(). Insert stamps CreatedAt with time.Now().
//   - Every method returns ctx.Err() (wrapped) when ctx is already done, and changes nothing.
//   - Notify never fails; Outbox.Notify after a commit wakes every relay of this Store.
//     Commits do not notify on their own.
//
// The domain side is a tiny table of counters: (*Tx).Incr adds 1 to a named counter in the
// transaction and (*Store).Counter reads the committed value, so that tests and demos can show a
// domain change and its events (or its inbox record) committing together.
//
// Nothing is durable: the state lives as long as the *Store.
package memory
