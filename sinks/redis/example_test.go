package redis_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// A relay that publishes a PostgreSQL outbox to Redis streams: events of type "order.created"
// go to the stream "orders", trimmed to about a million entries.
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
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	sink, err := redissink.New(client, &redissink.Options{Source: "/shop/orders", ContentType: "application/json", MaxLen: 1_000_000})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := core.NewRelay(store, sink, core.StaticRouter{ByType: map[string]string{"order.created": "orders"}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// A member of the group "order-views" of the stream "orders" that applies every order event
// once, in the inbox's transaction.
func ExampleNewConsumer() {
	ctx := context.Background()
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
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	c, err := redissink.NewConsumer(client, "orders", "order-views", inbox, "order-views",
		func(ctx context.Context, tx pgx.Tx, d *redissink.Delivery) error {
			_, err := tx.Exec(ctx, "UPDATE order_views SET changes = changes + 1 WHERE id = $1", d.Event.AggregateID)
			return err
		}, &redissink.ConsumerOptions{Name: "order-views-1"})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx is cancelled
		log.Fatal(err)
	}
}
