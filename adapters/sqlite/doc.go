// Package sqlite is outboxkit's SQLite adapter, on the pure-Go driver modernc.org/sqlite
// (driver name "sqlite"). Its transaction type is *sql.Tx: producers write events with
// core.Outbox[*sql.Tx] inside their own transactions, and core.Relay, core.Inbox[*sql.Tx],
// core.CleanupOutbox and operators use the same *Store.
//
//	db, err := sqlite.OpenDB(ctx, "app.db")
//	store, err := sqlite.New(db, nil)
//	err = store.Migrate(ctx)
//	out, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
//	// in a producer transaction: out.Write(ctx, tx, events...); tx.Commit(); out.Notify(ctx)
//
// A consumer-only service calls [Store.MigrateInbox] instead of Migrate: it creates only the
// inbox's versioned tables (and <InboxTable>_migrations), no outbox table; core.NewInbox works
// on it and core.NewOutbox is refused as not migrated. Migrate, before or after it, keeps the
// inbox's rows.
//
// # Guarantees
//
//   - Insert is all or nothing: a batch larger than one statement's parameter limit is split
//     into several INSERTs inside a SAVEPOINT that is rolled back on error, so the caller's
//     transaction stays usable. A duplicate event ID (or aggregate version, with
//     Options.UniqueAggregateVersion) returns an error wrapping core.ErrDuplicateEvent.
//   - Every lease change (ClaimLanes, RenewLanes, ReleaseLanes, Heartbeat), every Settle,
//     PruneOutbox, PruneInbox and every inbox transaction (InTx) runs in a transaction that
//     takes SQLite's write lock with its first statement, as BEGIN IMMEDIATE does, even when
//     the caller's *sql.DB was opened without _txlock=immediate. SQLite admits one writer at a
//     time, so claims are exclusive, Settle checks all its leases and marks its records with no
//     concurrent takeover in between, and concurrent deliveries of one inbox message run one
//     after the other (the later one sees the record and reports Duplicate). The lock is the
//     database's whichever table the no-op write names: the outbox's meta table, or for the
//     inbox's transactions <InboxTable>_migrations (so an inbox-only database keeps the rule;
//     a store whose inbox is not migrated falls back to the meta table). Within one
//     process a Store queues its own write transactions in Go before asking SQLite, so they
//     do not spin in SQLite's sleep-and-retry busy handler; across processes busy_timeout
//     decides.
//   - An inbox record's key is (consumer, source, tenant, event ID) (core.InboxOptions.Source,
//     core.InboxMessage.Tenant, "" when unset), the primary key of the inbox table since inbox
//     migration 0002: one source's or tenant's record never suppresses another's message of
//     the same event ID. An inbox migrated by an earlier version (key (consumer, event ID)) is
//     refused by CheckInbox, and so by core.NewInbox, as not migrated until Migrate or
//     MigrateInbox applies 0002, which rebuilds the table in its transaction (it copies every
//     record, holding the write lock meanwhile) and gives every existing record source "" and
//     tenant "", the key it had: redeliveries of earlier messages stay duplicates. Consumers of
//     the earlier version cannot insert into the rebuilt table (their statements name the
//     earlier key and fail), so stop them before migrating.
//   - Publisher generations live in one row of <Table>_publisher (created by Migrate, also
//     when it upgrades an outbox migrated by an earlier version; it starts at generation 0).
//     AcquireGeneration reads and increments it in one write transaction, so concurrent
//     callers, in this process or another, get distinct generations. ClaimLanes and RenewLanes
//     check the caller's generation inside their own write transaction: a stale one changes
//     nothing and gets an error wrapping core.ErrFenced, and no AcquireGeneration can commit
//     between the check and the lease changes. Settle is fenced by its leases only.
//   - The pending layout (migration 0007): an outbox row's status columns are never written.
//     Each unpublished record has a narrow row in <Table>_queue (seq, lane, key, attempts, next
//     attempt, last error, parked), written by an AFTER INSERT trigger in the producer's INSERT;
//     each published one a row in <Table>_publications (seq, publication time).
//   - Settle is one transaction of at most five statements whatever the batch size: a lease
//     check, one INSERT of the publication rows and one DELETE of the queue rows of every
//     published seq (or one DELETE of their outbox rows, whose trigger removes the queue rows),
//     one UPDATE of every failure's queue row (seqs and failures are bound as a single JSON
//     array and read with json_each).
//   - Fetch is one SELECT that walks the queue in seq order (its rowid), tests the lane on the
//     queue row, reads the record by seq and stops after the limit; per-key blocking probes a
//     tiny covering partial index of the queue's failed and parked rows. Its cost is the number
//     of queue rows it passes: about limit x (lanes / leased lanes) when keys are spread evenly.
//     Seqs come from an AUTOINCREMENT key and are never reused, even after rows are deleted.
//   - Stats counts the queue and (up to a cap) the publications; List pages by seq.
//
// # Clock
//
// Times are stored as INTEGER unix microseconds (UTC), so comparisons and an injected Now are
// exact. When a call's Now is zero the adapter uses "the database clock", which for an
// embedded database is this process's clock: time.Now. Processes sharing one database file
// must have synchronised clocks, as they must share a clock with any other database server.
//
// # Configuring the database
//
// OpenDB opens a file with the settings the adapter relies on: WAL journal mode, a 10s
// busy_timeout, foreign keys, _txlock=immediate (every read-write transaction, including the
// producer's, begins IMMEDIATE and cannot fail on a lock upgrade) and synchronous=NORMAL.
// With synchronous=NORMAL in WAL mode commits are atomic and survive an application crash,
// but the last transactions before a power loss or operating-system crash may be lost. When
// they must survive that too, open the *sql.DB yourself with DSN's settings but
// _pragma=synchronous(FULL), e.g. "file:app.db?_txlock=immediate&_pragma=busy_timeout(10000)&
// _pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)". A caller
// that opens its own *sql.DB must use the same settings (see DSN); without _txlock=immediate
// the adapter's own transactions are still safe, but the caller's deferred transactions that
// read before writing may fail with SQLITE_BUSY under concurrency.
//
// # Writing in the caller's transaction
//
// Insert (core.Outbox.Write) never interrupts one of its statements when its context ends:
// SQLite's interrupt, which database/sql issues when a running statement's context is
// cancelled, rolls back the whole enclosing transaction, and the caller's later statements
// would then run in autocommit mode, outside its transaction. Insert checks the context before
// each statement instead and, when it ended, undoes its own statements and returns the
// context's error; the caller's transaction stays usable. Insert also refuses, with an error
// wrapping core.ErrInvalidTx, a nil or ended transaction and a transaction on another database
// file (the row would land in a lane no relay of this Store leases). An unmigrated database
// fails every call with an error wrapping core.ErrSchemaMismatch.
//
// Inside InTx (and so inside an inbox handler) use the given *sql.Tx only: a write through the
// *sql.DB would wait for the write lock that transaction holds.
//
// # Wake-ups
//
// Store embeds core.Broadcast: core.Outbox.Notify, called after a producer commits, wakes the
// relays of this process at once. Relays in other processes find new events by polling.
package sqlite
