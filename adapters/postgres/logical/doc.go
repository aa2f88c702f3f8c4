// Package logical is the change source of the outboxkit PostgreSQL adapter: it streams the
// outbox table's inserts by logical replication (the pgoutput plugin, through a replication
// slot, with github.com/jackc/pglogrepl) for a CDC relay (core.CDCRelay).
//
//	store, err := postgres.New(pool, nil)
//	...
//	src, err := logical.NewChangeSource(store, nil) // opts may be nil
//	relay, err := core.NewCDCRelay(store, src, sink, router, nil)
//
// The store (package postgres) keeps the relay's checkpoint and serves its backfill and marks;
// this package only reads the log. It is a package of its own so that a program that only polls
// does not compile or link the replication client: a polling program on package postgres
// depends on 67 packages outside the standard library instead of 68 (pglogrepl and pgio) when
// the change source was part of package postgres. A program that imports this package pays for
// them.
//
// # Guarantees
//
//   - A logical replication slot (pgoutput) on a publication of the outbox's inserts
//     (publish_via_partition_root for a partitioned outbox), on its own replication connection.
//     Start re-creates the slot and returns its consistent point; Resume refuses, with
//     *core.PositionLostError, a missing or invalidated slot, a slot re-created after the
//     checkpoint, or a missing publication.
//   - Transactions arrive in commit order with their outbox rows in statement order, decoded to
//     the records Admin.List returns (from pgoutput's binary tuples on PostgreSQL 14+, text
//     before); rolled-back transactions never appear. Between transactions the server's
//     keepalive positions are returned too (at most one per half StandbyTimeout), so the
//     checkpoint, and the WAL the slot retains, move on when only other tables are written.
//   - The server only ever gets confirmed positions as flushed, sent without waiting for a
//     keepalive. A stream is a driver.VisibleWaiter: the relay marks a transaction's records only
//     once new snapshots see them.
//   - A slot another connection streams from makes Start and Resume wait SlotBusyTimeout, then
//     fail with an error wrapping postgres.ErrSlotActive.
//
// # Server requirements
//
// wal_level=logical; the role of the replication connection needs the REPLICATION attribute,
// and the first Start creates the publication, which needs ownership of the outbox table (see
// the adapter's grants.sql). A retired relay's slot retains WAL until it is dropped
// (ChangeSource.DropSlot, or outboxkit cdc release).
//
// # Tests
//
// The tests need a server with wal_level=logical (OUTBOXKIT_POSTGRES_DSN;
// scripts/lib/postgres.sh starts one) and hold replication slots (at most 3 at once).
package logical
