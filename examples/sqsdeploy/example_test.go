package sqsdeploy_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"github.com/aws/aws-sdk-go-v2/config"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/examples/sqsdeploy"
)

// The whole deployment in one process (in production, the producer and the relay run in the
// orders service and the consumer in the order-views service, each on its own database).
// Infrastructure: an SNS FIFO topic "orders.fifo" and an SQS FIFO queue subscribed to it with
// RawMessageDelivery=true and a redrive policy.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	awsCfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	ordersDB, err := pgxpool.New(ctx, os.Getenv("ORDERS_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer ordersDB.Close()
	viewsDB, err := pgxpool.New(ctx, os.Getenv("VIEWS_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer viewsDB.Close()

	cfg := sqsdeploy.Config{
		Topics:   map[string]string{sqsdeploy.EventStatusChanged: "arn:aws:sns:eu-west-1:123456789012:orders.fifo"},
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/order-views.fifo",
	}
	if err := sqsdeploy.MigrateProducer(ctx, ordersDB, cfg); err != nil {
		log.Fatal(err)
	}
	if err := sqsdeploy.MigrateConsumer(ctx, viewsDB, cfg); err != nil {
		log.Fatal(err)
	}

	// Orders service: relay in the background, producer on the request path.
	go func() {
		if err := sqsdeploy.RunRelay(ctx, ordersDB, awssns.NewFromConfig(awsCfg), cfg); err != nil {
			log.Print(err)
		}
	}()
	producer, err := sqsdeploy.NewProducer(ctx, ordersDB, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := producer.SetStatus(ctx, "42", "paid"); err != nil {
		log.Fatal(err)
	}

	// Order-views service: the consumer keeps order_views up to date, each event exactly once.
	if err := sqsdeploy.RunConsumer(ctx, viewsDB, awssqs.NewFromConfig(awsCfg), cfg); err != nil {
		log.Fatal(err)
	}
}
