// Package postgres is the PostgreSQL adapter of outboxkit, on github.com/jackc/pgx/v5.
//
// [New] takes a *pgxpool.Pool and returns a [Store] whose writer and inbox run in the caller's
// pgx.Tx; [NewSQL] takes a *sql.DB opened with pgx's stdlib driver and returns one that runs
// in the caller's *sql.Tx. Both run the same SQL statements (named statements in queries.sql) and
// implement driver.OutboxStore, driver.RelayStore, driver.CheckpointStore, driver.InboxStore,
// driver.Pruner, driver.Admin, driver.Notifier (with driver.Flusher: [Store.Flush] sends the last
// notifications before the pool closes) and driver.Waker. [Store.Migrate] creates or checks the
// schema (embedded, idempotent migrations; the lane count is recorded and a different one is
// refused with core.ErrSchemaMismatch); [Store.MigrateInbox] creates only the inbox's tables,
// for a consumer-only service (Migrate, before or after it, keeps the inbox's rows).
// [Store.HoldLiveness] (driver.Liveness) ties an owner's leases to a session-level advisory
// lock, so that a crashed CDC relay's successor takes its lanes over as soon as the server has
// ended its session.
//
// # Change data capture
//
// The change source of a CDC relay (core.CDCRelay) is in package
// github.com/outboxkit/outbox/adapters/postgres/logical: logical.NewChangeSource(store, opts)
// streams the outbox's inserts by logical replication (pgoutput, a replication slot). The Store
// keeps the relay's checkpoint (driver.CheckpointStore). A program that only polls does not
// import package logical, and so does not compile or link the replication client
// (github.com/jackc/pglogrepl): a program that builds a polling relay on this package depends on
// 67 packages outside the standard library (60 of them third-party) instead of 68 (62) when the
// change source was in this package. TestPollingDepsHaveNoCDC (internal/depcheck) keeps it so.
//
// # Guarantees
//
//   - Insert is one statement in the caller's transaction: the outbox rows commit or roll back
//     with the domain change. A duplicate event ID returns an error wrapping
//     core.ErrDuplicateEvent (PostgreSQL then aborts the transaction, as for any failed
//     statement). A nil or ended transaction, and a transaction on another database of the
//     server (current_database() differs from the one LaneCount, which core.NewOutbox runs,
//     learned), insert nothing and return an error wrapping core.ErrInvalidTx: the row would
//     sit in an outbox no relay of this Store reads. A database of the same name on another
//     server cannot be told apart. An unmigrated schema fails every call with an error
//     wrapping core.ErrSchemaMismatch.
//   - Lanes are leased exclusively: ClaimLanes locks free lane rows with FOR UPDATE SKIP LOCKED
//     ([ClaimSkipLocked], default) or takes transaction-scoped advisory locks
//     ([ClaimAdvisoryLock]); every lease carries a generation that fences later calls. Claims
//     keep their LIMIT however stale the table statistics are (= ANY(ARRAY(subquery))).
//   - The pending layout (migration 0008): an outbox row never changes after insert. Each
//     unpublished record has a narrow row in Table+"_pending" (seq, lane, partition key,
//     created_at, attempts, next attempt, last error, parked), written by Insert's own
//     statement (created_at lets a lookup of the outbox row prune a partitioned outbox); a record
//     is published exactly when its pending row is gone. Each settle that publishes appends one
//     entry to the settle log Table+"_settled" (time, lowest and highest seq, the seqs), which
//     gives the publication time of records published since the migration (earlier ones keep
//     published_at) and bounds cleanup. Writers and relays of the earlier version keep working
//     during an upgrade: a trigger, which this version's statements keep from firing, writes and
//     deletes the pending rows of their inserts and deletes; a record an earlier relay marked is
//     sent again by this version's relay (duplicates, never loss or reordering).
//   - Settle is a single statement, hence a single transaction: it locks the leased lane rows,
//     and deletes or updates pending rows (and writes the log entry) only when every lease is
//     still held (owner, generation and lease_until > now); otherwise it returns
//     *driver.LanesLostError and changes nothing.
//   - The relay's fetch reads pending rows only, in seq order on the pending table's primary
//     key, with a primary key lookup of the outbox per record; failed and parked pending rows
//     have their own tiny partial index.
//   - Cleanup deletes only rows below the lowest pending seq and below the lowest seq of the
//     settle log entries at or after the cut-off (and, published before the migration, with
//     published_at before it), reading both in one snapshot.
//   - With Options.AsyncSettle, Settle's transaction commits without waiting for its WAL flush:
//     the relay no longer waits for the disk between batches (and no longer doubles the
//     producers' fsync load). A server crash may lose the last marks; those events are
//     delivered again, so delivery stays at least once and in order per key.
//   - With Options.Partitioning, the outbox is partitioned by created_at ranges (daily by
//     default); event IDs stay unique through a side table. The Store is a
//     driver.PartitionPruner: core.CleanupOutbox first drops sealed partitions whose rows are all
//     published before the cut-off and below the watermarks (checked again under an exclusive
//     table lock, so a partition holding an unpublished row is never dropped), and creates
//     partitions ahead ([Store.EnsurePartitions]).
//   - Publisher generations: one row per outbox (Table+"_publisher"). AcquireGeneration locks
//     it FOR UPDATE and increments it in one transaction; ClaimLanes, RenewLanes and
//     SaveCheckpoint lock it FOR SHARE in the same statement as their work and change nothing
//     unless the caller's generation is the current one (else an error wrapping
//     core.ErrFenced), so a claim either completes before a takeover or sees it.
//   - CDC: the checkpoint (Table+"_cdc_checkpoint") is saved under the publisher fence (above).
//     Package logical's change source streams the outbox's inserts.
//   - Semantic columns cannot change after insert: a trigger refuses any UPDATE that changes
//     them (it fires only for UPDATEs naming them). The file grants.sql gives an application
//     role INSERT only (plus the pending row of its insert) and a relay role SELECT plus the
//     changes of pending rows and the settle log.
//   - Time: every statement uses coalesce($now, now()), so the database clock decides unless
//     a caller injects Now; times are stored with microsecond precision.
//   - Wake-ups: Notify, called after the producer committed, returns at once; a background
//     sender issues NOTIFY from its own small transaction with synchronous_commit off, merging
//     the calls that arrive while one is in flight, so notifications never cap producer
//     throughput. Wakeups LISTENs on a dedicated connection and reconnects on failure. A lost
//     notification costs latency only: relays still poll.
//   - Inbox: Horizon reads the consumer's horizon without a lock, after the insert and in a new
//     statement (transactions are read committed); PruneInbox raises it in its own autocommit
//     statement before it deletes, so busy consumers never hold it up; InsertRecord uses INSERT ... ON CONFLICT DO NOTHING,
//     so a concurrent duplicate waits on the unique index and then reads the committed row.
//
// # Partitioned inbox
//
// With Options.InboxPartitioning the inbox is partitioned by processed_at, the database clock
// when a record is written (daily by default), so that records go a whole partition at a time
// instead of by a DELETE per record: no dead tuples, no vacuum debt, little WAL. The Store is
// then a driver.PartitionedInbox:
//
//   - Records go to the current partition: a message's own time (occurred_at, which may be
//     old, absent or skewed) never decides where it is written. Migrate, MigrateInbox and
//     PruneInbox create the partitions ahead ([Store.EnsurePartitions]); run one of them at
//     least once every Ahead intervals.
//   - Keys stay unique across partitions. A partitioned table's unique index must hold its
//     partition key, so the primary key is (consumer, event_id, source, tenant, processed_at),
//     and InsertRecord takes a transaction-level advisory lock on a hash of each record's key
//     (in hash order), then looks for the key in every partition, then inserts what it did not
//     find: a redelivery is a duplicate and other content a conflict, as on a plain inbox, and a
//     concurrent transaction with the same key waits for the first. A batch of n records takes
//     n advisory locks until it commits: size the server's lock table
//     (max_locks_per_transaction × max_connections, 6,400 by default) for the batches that run
//     at once. The look-up probes each partition's primary key, so it costs a little more per
//     partition kept.
//   - Inbox.Prune (and Operator.PruneInbox) raises the horizon first, exactly as on a plain
//     inbox, so the retention rule is unchanged. It then deletes no record: it drops each sealed
//     partition (its range over) every record of which occurred before its consumer's horizon,
//     checked per consumer on the (consumer, occurred_at) index, again under an ACCESS EXCLUSIVE
//     lock on the inbox (5 s lock timeout; inbox transactions wait for the drop, and a partition
//     whose lock timed out stays for the next prune, so that a delivery in progress never makes
//     a prune fail). It returns how many records of its consumer the dropped partitions held.
//   - So a partition stays while any consumer with a record in it has not pruned past that
//     record, including consumers that never prune, and records older than a horizon stay until
//     their partition goes (their messages are refused all the same). Prune every consumer that
//     shares the inbox, or give a consumer that never prunes its own InboxTable.
//
// Identifiers (schema, table names, notification channel) are validated and quoted once, when
// the Store is built. Statements work in every pgx query execution mode, including
// QueryExecModeExec and QueryExecModeSimpleProtocol (for transaction-pooling proxies: README,
// "Behind a connection pooler"; Wakeups and HoldLiveness refuse them, see ErrPooledConnection).
package postgres
