// Package mysql is the outboxkit adapter for MySQL 8.0+ and MariaDB 10.6+ on
// github.com/go-sql-driver/mysql. Its transaction type is *sql.Tx: producers write outbox rows
// in their own transaction, and the inbox records a message in the transaction of its effect.
//
// A *Store implements driver.OutboxStore[*sql.Tx], driver.RelayStore, driver.InboxStore[*sql.Tx],
// driver.Pruner, driver.Admin and driver.CheckpointStore (so driver.CDCStore), and wakes relays of the
// same process after core.Outbox.Notify (driver.Notifier, driver.Waker). It passes the conformance
// suite with both claim strategies. The Store also implements driver.Liveness with GET_LOCK, so
// that a crashed CDC relay's successor takes its lanes over at once.
//
// [Store.Migrate] creates the outbox's and the inbox's tables; [Store.MigrateInbox] creates only
// the inbox's, for a consumer-only service (no outbox table: core.NewInbox works, core.NewOutbox
// is refused as not migrated). Both take one GET_LOCK and are idempotent; Migrate, before or
// after MigrateInbox, keeps the inbox's rows.
//
// # Change data capture
//
// The change source of a CDC relay (core.CDCRelay) is in package
// github.com/outboxkit/outbox/adapters/mysql/binlog: binlog.NewChangeSource(store, opts) reads
// the outbox's inserts from the server's binary log; it needs the DSN (Options.DSN or
// binlog.Options.DSN). The Store keeps the relay's checkpoint (driver.CheckpointStore). A
// program that only polls does not import package binlog, and so does not compile or link the
// binlog reader (github.com/go-mysql-org/go-mysql with go.uber.org/zap and pingcap's logger and
// SQL parser): a program that builds a polling relay on this package depends on 39 packages
// outside the standard library (32 of them third-party, from 10 modules) instead of 100 (94
// from 23 modules) when the change source was in this package. TestPollingDepsHaveNoCDC
// (internal/depcheck) keeps it so.
//
// # Connection requirements
//
// The DSN must select a database and set parseTime=true; loc must stay UTC (the driver's
// default). New checks all three and returns an error wrapping ErrConnection otherwise, and
// refuses servers older than MySQL 8.0 or MariaDB 10.6 with ErrUnsupportedServer.
// interpolateParams=true is recommended: without it every statement with parameters costs
// extra round trips to prepare and close it. Tables are InnoDB. Text is compared byte for byte,
// as on the other adapters: partition keys, aggregate ids, inbox consumers and entities, owners
// and the other text the adapter or its triggers compare are VARBINARY/MEDIUMBLOB columns
// (migration 009; MySQL's and MariaDB's utf8mb4_bin ignores trailing spaces), and ids and names,
// which the API allows no spaces in, are ascii_bin; so text that differs in case or in trailing
// spaces is different. With
// ClaimGetLock every owner holding lanes keeps one connection of the pool open.
//
// # Guarantees
//
//   - Insert is one multi-row INSERT (split into statements under a savepoint for very large
//     writes) in the caller's transaction: all or nothing. A duplicate ID, or with
//     Options.UniqueAggregateVersion a duplicate (aggregate type, id, version > 0, type),
//     returns an error wrapping core.ErrDuplicateEvent. The Store's SQL names its tables with
//     the database of the *sql.DB it was built on, so a caller's transaction whose connection
//     has another default database of the same server still writes the Store's outbox (MySQL
//     transactions span the databases of a server); a nil or ended transaction returns an
//     error wrapping core.ErrInvalidTx. A database of the same name on another server cannot
//     be told apart.
//   - InsertLanes (driver.LaneInserter, which core.Outbox.Write uses) checks the lane count with
//     a locking read of its meta row (LOCK IN SHARE MODE, kept until the transaction ends):
//     for one record in the insert's own statement (the subquery that gives the row its
//     lane), for several in a statement just before the insert; ResizeLanes (driver.LaneResizer) locks that row FOR UPDATE
//     first, so it waits for the writer transactions that inserted and holds the next ones
//     back, and a writer whose snapshot predates a resize still reads the new count, is
//     refused with core.ErrLaneCountChanged and inserts again. Both waits are bounded by
//     innodb_lock_wait_timeout (50 s by default; ErrLockWaitTimeout): a resize of a large
//     backlog can make writers time out, and a writer transaction open longer makes the
//     resize fail, changing nothing. Insert is unchecked and not held back by a resize.
//   - Time is the database clock (UTC_TIMESTAMP(6)) unless a call injects Now: every statement
//     writes COALESCE(CAST(:now AS DATETIME(6)), UTC_TIMESTAMP(6)), :now NULL unless injected;
//     all times are DATETIME(6) in UTC, microsecond precision.
//   - ClaimLanes is exclusive: ClaimSkipLocked locks candidate lane rows with FOR UPDATE SKIP
//     LOCKED; ClaimGetLock does the same and ties each lease to a GET_LOCK held by the owner's
//     session, so that a dead session's lanes can be taken at once. Either way every lease is
//     fenced by (owner, generation, lease_until > now): Settle marks the records, then locks
//     the leased lane rows FOR UPDATE and checks every lease in the same transaction before
//     it commits, and when one is lost rolls back (changing nothing) and returns a
//     *driver.LanesLostError.
//   - The pending layout (migration 010): an outbox row does not change after insert. Each
//     unpublished record has a narrow row in Table+"_pending" (seq, lane, partition key,
//     created_at, attempts, next_attempt_at, last_error, parked_at), written in the writer's
//     INSERT statement by an AFTER INSERT trigger. A mark writes the record's row in the settle
//     log Table+"_settled" (seq, publication time) and deletes its pending row; a delete-on-publish
//     settle deletes the pending rows, then the outbox rows (an AFTER DELETE trigger takes the
//     pending row of any other outbox DELETE; the settle sets @outboxkit_unpended around its own
//     so that the trigger skips it); failures, parking and Unpark change the pending row only. A record is published when it has no pending row; its
//     publication time is its settle log row's, or its published_at when it was published
//     before the migration (or by a relay of an earlier version during a rolling upgrade:
//     AFTER UPDATE and AFTER DELETE triggers carry such a relay's marks, failures and deletes to
//     the pending rows). Cleanup deletes below the lowest pending seq only, a record published
//     since the migration together with its settle log row.
//   - Fetch honours per-key blocking: a record is skipped when an earlier-or-same pending
//     record of its partition key is parked or not yet due. MariaDB has no partial indexes: a
//     stored generated column stands in (the pending table's ix_failed holds only rows that
//     failed), and the common path walks the pending table's primary key in seq order, joining
//     each row's outbox row by primary key, without touching published records.
//   - Publisher generations live in one row of Table+"_pub" (generation 0 on a fresh outbox).
//     AcquireGeneration locks it FOR UPDATE; ClaimLanes, RenewLanes and SaveCheckpoint read it
//     LOCK IN SHARE MODE in their own transaction, so a call of an older generation either
//     commits before the new generation exists or changes nothing and returns an error
//     wrapping core.ErrFenced. Settle is fenced by its leases only.
//   - CDC: the checkpoint is one row of Table+"_cdc", saved under the publisher fence (above).
//     Package binlog's change source streams the outbox's inserts from the binary log.
//   - Inbox: a record's key is (consumer, source, tenant, event ID) (core.InboxOptions.Source,
//     InboxMessage.Tenant; both empty when unset, and for the records written before migration
//     011). The primary key on those columns, in the order (consumer, event_id, source, tenant)
//     so that lookups by event ID alone (PruneInbox's deletes name whole keys; InboxRecords)
//     stay ranges of it, written with INSERT IGNORE in the effect's transaction, makes
//     concurrent duplicate deliveries wait and then see the record; the effect is applied once.
//     Horizon reads the consumer's horizon without a lock (the first consistent read of
//     Process's transaction, after the insert); PruneInbox raises it in its own autocommit
//     statement before it deletes (the records of every source and tenant), then reads the
//     keys of the records to delete without locks and deletes them by primary key, so that a
//     delivery in progress (its record inserted, its handler still running) never holds a
//     prune up. Entity versions are locked with INSERT ... ON DUPLICATE KEY UPDATE (an
//     exclusive lock even for a new entity), so concurrent versions queue; their keys (up to
//     driver.MaxEntityKeyLen bytes, the source and tenant before the entity) fit the entity
//     column, VARBINARY(2048).
//   - Concurrent duplicate deliveries that all commit cost no deadlock (the later ones wait
//     for the first and then read its record). When the first delivery rolls back (its handler
//     failed) while others wait on its key, InnoDB picks deadlock victims among the waiters
//     (about one per waiter); they are retried as below and the effect is still applied once.
//   - Fetch skips a blocked key's rows by walking past them: a key parked with a very large
//     backlog behind it slows every Fetch of its lane's holder until it is unparked.
//   - Deadlocks (error 1213) in claim, renew, release, settle, prune and InTx transactions are
//     retried as whole transactions, at most Options.DeadlockRetries times, and counted
//     (Store.DeadlockRetries); beyond that the error wraps ErrDeadlock. Lock wait timeouts
//     (1205) wrap ErrLockWaitTimeout and are not retried.
//
// # Tests
//
// The tests need a server: OUTBOXKIT_MYSQL_DSN names it (e.g. "root@tcp(127.0.0.1:3306)/");
// each test creates and drops its own database. scripts/lib/mariadb.sh starts a throwaway
// MariaDB and exports the variable. The CDC tests (package binlog) read the server's binary
// log, and two of them purge it (PURGE BINARY LOGS): do not point them at a server whose binary
// logs matter.
package mysql
