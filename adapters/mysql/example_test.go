package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"log"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Write an event in the same transaction as a domain change, and run a relay. (Not run: it
// needs a server.)
func Example() {
	ctx := context.Background()
	// parseTime=true is required; loc must stay UTC; interpolateParams saves round trips.
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/shop?parseTime=true&interpolateParams=true")
	if err != nil {
		log.Fatal(err)
	}
	store, err := mysql.New(ctx, db, &mysql.Options{Lanes: 64})
	if err != nil {
		log.Fatal(err) // e.g. mysql.ErrUnsupportedServer, mysql.ErrConnection
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](store), nil)
	if err != nil {
		log.Fatal(err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = ?", 42); err != nil {
			return err
		}
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: "42", Type: "order.paid"})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = ob.Notify(ctx) // wakes relays of this process at once

	sink := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		return make([]error, len(msgs)) // deliver msgs to a broker here
	})
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: "orders"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx) // until ctx ends
}

// A CDC relay publishes from the binary log instead of polling. The server needs
// binlog_format=ROW and binlog_row_image=FULL (binlog_row_metadata=FULL recommended); the user
// needs REPLICATION SLAVE and REPLICATION CLIENT (BINLOG MONITOR on MariaDB). (Not run: it
// needs a server.)
func ExampleStore_ChangeSource() {
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
	source, err := store.ChangeSource(nil)
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
