package sqs_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// The producer side: a relay that delivers outbox events to SQS queues, with oversize payloads
// stored in S3.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	sink, err := sqs.New(awssqs.NewFromConfig(cfg), &sqs.Options{
		ClaimCheck: &sqs.ClaimCheck{Client: s3.NewFromConfig(cfg), Bucket: "my-outbox-payloads"},
	})
	if err != nil {
		log.Fatal(err)
	}
	store, _ := memory.New(nil) // your database adapter
	router := core.StaticRouter{ByType: map[string]string{
		"order.created": "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
	}}
	relay, err := core.NewRelay(store, sink, router, nil)
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}

// The consumer side: each message is applied once, in the same transaction as its inbox record,
// and deleted only after that transaction committed.
func ExampleNewConsumer() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, _ := memory.New(nil) // your database adapter
	inbox, err := core.NewInbox[*memory.Tx](ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := sqs.NewConsumer(awssqs.NewFromConfig(cfg), "https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo",
		inbox, "billing", func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
			// Apply d.Event (d.Event.Type, d.Event.Payload, ...) using tx.
			return tx.Incr("orders")
		}, &sqs.ConsumerOptions{S3: s3.NewFromConfig(cfg), ClaimCheckBuckets: []string{"orders-claim-checks"}})
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(ctx)
}
