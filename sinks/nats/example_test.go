package nats_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// A relay's sink: the stream ORDERS covers the subjects the router names ("orders.>").
func ExampleNew() {
	nc, err := nats.Connect("nats://127.0.0.1:4222", nats.Name("outboxkit-relay"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close() // after the relay's last Send
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"},
		Duplicates: 10 * time.Minute}); err != nil {
		log.Fatal(err)
	}
	sink, err := natssink.New(nc, &natssink.Options{Source: "https://billing.example.com", ContentType: "application/json"})
	if err != nil {
		log.Fatal(err)
	}
	router := core.StaticRouter{ByType: map[string]string{"order.created": "orders.created"}}
	_, _ = sink, router // core.NewRelay(store, sink, router, ...)
}

// A consumer of the stream ORDERS, recording every event in an inbox on database/sql.
func ExampleNewConsumer() {
	var inbox *core.Inbox[*sql.Tx] // core.NewInbox(ctx, store, nil)
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	c, err := natssink.NewConsumer(js, "ORDERS", "billing", inbox, "billing",
		func(ctx context.Context, tx *sql.Tx, d *natssink.Delivery) error {
			_, err := tx.ExecContext(ctx, "UPDATE orders SET status = 'paid' WHERE id = $1", d.Event.AggregateID)
			return err
		}, &natssink.ConsumerOptions{MaxDeliver: 5, DeadLetterSubject: func(s string) string { return "dlq." + s }})
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run // c.Run(ctx) until shutdown
}
