package mysql_test

import (
	"context"
	"database/sql"
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
