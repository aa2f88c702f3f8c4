package rabbitmq_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// A relay that publishes a PostgreSQL outbox to RabbitMQ: events of type "order.created" go to
// the exchange "orders" with the routing key "order.created", every other event to the queue
// "events" (the default exchange).
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	sink, err := rabbitmq.New("amqp://relay:secret@127.0.0.1:5672/", &rabbitmq.Options{Source: "/shop/orders", ContentType: "application/json"})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	relay, err := core.NewRelay(store, sink, core.StaticRouter{
		ByType:  map[string]string{"order.created": "orders/order.created"},
		Default: "events",
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A consumer that applies every order event once, in the inbox's transaction; the queue is
// declared with its dead-letter exchange and queue first.
func ExampleNewConsumer() {
	ctx := context.Background()
	conn, err := amqp.Dial("amqp://app:secret@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	if err := rabbitmq.DeclareQueue(ch, "order-views", nil); err != nil { // + order-views.dlx, order-views.dlq
		log.Fatal(err)
	}
	_ = conn.Close()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1/app")
	if err != nil {
		log.Fatal(err)
	}
	store, err := postgres.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := rabbitmq.NewConsumer("amqp://app:secret@127.0.0.1:5672/", "order-views", inbox, "order-views",
		func(ctx context.Context, tx pgx.Tx, d *rabbitmq.Delivery) error {
			_, err := tx.Exec(ctx, "UPDATE order_views SET changes = changes + 1 WHERE id = $1", d.Event.AggregateID)
			return err
		}, &rabbitmq.ConsumerOptions{Prefetch: 64})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx is cancelled
		log.Fatal(err)
	}
}
