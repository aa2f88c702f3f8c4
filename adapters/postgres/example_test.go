package postgres_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
)

// A producer appends an event in its own transaction, then wakes the relays; a relay delivers
// committed events to a sink.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	store, err := postgres.New(pool, &postgres.Options{Schema: "public"})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	outbox, err := core.NewOutbox(ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE orders SET status = 'paid' WHERE id = $1`, 42); err != nil {
			return err
		}
		_, err := outbox.Write(ctx, tx, core.Event{
			AggregateType: "order", AggregateID: "42", Type: "order.paid", Payload: []byte(`{"id":42}`),
		})
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = outbox.Notify(ctx) // after commit; a lost notification only costs latency

	var sink core.Sink // e.g. an SQS or Kafka sink
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: "orders"}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run // relay.Run(ctx) blocks until ctx is cancelled
}
