// Package binlog is the change source of the outboxkit MySQL / MariaDB adapter: it reads the
// outbox table's inserts from the server's binary log, over the replication protocol
// (github.com/go-mysql-org/go-mysql/replication), for a CDC relay (core.CDCRelay).
//
//	store, err := mysql.New(ctx, db, &mysql.Options{DSN: dsn})
//	...
//	src, err := binlog.NewChangeSource(store, nil) // opts may be nil
//	relay, err := core.NewCDCRelay(store, src, sink, router, nil)
//
// The store (package mysql) keeps the relay's checkpoint and serves its backfill and marks; this
// package only reads the log. It is a package of its own so that a program that only polls
// does not compile or link the binlog reader and what it brings (go.uber.org/zap, pingcap's
// logger and SQL parser, klauspost/compress, ...): a polling program on package mysql depends
// on 39 packages outside the standard library instead of 100 when the change source was part
// of package mysql. A program that imports this package pays for them.
//
// # Guarantees
//
//   - Transactions are streamed in commit order, each with its outbox rows in statement order,
//     decoded to the records Admin.List returns for the same rows. Rolled-back transactions
//     never appear; UPDATE and DELETE rows events (the relay's own marks) are ignored.
//   - Positions are "file:<log>:<offset>" or "gtid:<set>;file:<log>:<offset>" (ChangeSource).
//     A purged position is a *core.PositionLostError, from Resume (file positions) or the first
//     Next (GTID positions, server error 1236).
//   - A stream on which nothing arrives for three HeartbeatPeriods fails with an error
//     wrapping core.ErrStreamStalled.
//
// # Server requirements
//
// binlog_format=ROW and binlog_row_image=FULL (binlog_row_metadata=FULL recommended); the user
// of the binlog connection needs REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on
// MariaDB). The binlog connection needs the DSN (mysql.Options.DSN or Options.DSN): a *sql.DB
// does not reveal its address and credentials.
//
// # Tests
//
// The tests need a server with the binary log (OUTBOXKIT_MYSQL_DSN; scripts/lib/mariadb.sh
// starts one). Two of them purge the server's binary logs (PURGE BINARY LOGS): do not point
// them at a server whose binary logs matter.
package binlog
