package binlog_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
)

// A CDC relay publishes from the binary log instead of polling. The server needs
// binlog_format=ROW and binlog_row_image=FULL (binlog_row_metadata=FULL recommended); the user
// needs REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB). (Not run: it
// needs a server.)
func ExampleNewChangeSource() {
	ctx := context.Background()
	dsn := "relay:secret@tcp(127.0.0.1:3306)/shop?parseTime=true&interpolateParams=true"
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		log.Fatal(err)
	}
	// The DSN again: the binlog connection needs the address and credentials, which a *sql.DB
	// does not reveal.
	store, err := mysql.New(ctx, db, &mysql.Options{DSN: dsn})
	if err != nil {
		log.Fatal(err)
	}
	// GTID positions when the server has GTIDs, binary log file and offset otherwise.
	source, err := binlog.NewChangeSource(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	var sink core.Sink // e.g. an SQS or SNS sink
	relay, err := core.NewCDCRelay(store, source, sink, core.StaticRouter{Default: "orders"},
		&core.CDCOptions{MaxRetainedBytes: 8 << 30})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); errors.Is(err, core.ErrPositionLost) {
		// The binary logs after the checkpoint were purged: republish what they held, then resume.
		if err := relay.Backfill(ctx); err != nil {
			log.Fatal(err)
		}
	}
}
