package kafka_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// A relay that publishes a PostgreSQL outbox to Kafka: the caller builds the franz-go client
// (brokers, TLS, SASL, compression); events of type "order.*" go to the topic "orders".
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
	client, err := kgo.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	sink, err := kafka.New(client, &kafka.Options{Source: "/shop/orders", ContentType: "application/json"})
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

// A consumer group member that applies every order event once, in the inbox's transaction.
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
	c, err := kafka.NewConsumer("order-views", []string{"orders"}, inbox, "order-views",
		func(ctx context.Context, tx pgx.Tx, d *kafka.Delivery) error {
			_, err := tx.Exec(ctx, "UPDATE order_views SET changes = changes + 1 WHERE id = $1", d.Event.AggregateID)
			return err
		}, &kafka.ConsumerOptions{ClientOptions: []kgo.Opt{kgo.SeedBrokers("127.0.0.1:9092")}})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx is cancelled
		log.Fatal(err)
	}
}
