package webhook_test

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// A relay that posts a PostgreSQL outbox as signed webhooks: events of type "order.placed" go
// to the partner's endpoint. The secret comes from the environment or a secret store.
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
	sink, err := webhook.New(webhook.Options{
		Secrets:     []string{os.Getenv("WEBHOOK_SECRET")},
		Source:      "/shop/orders",
		ContentType: "application/json",
		Timeout:     5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	relay, err := core.NewRelay(store, sink, core.StaticRouter{ByType: map[string]string{
		"order.placed": "https://partner.example/hooks/orders",
	}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// An endpoint that applies every order event once, in the inbox's transaction, and answers
// 2xx only after it committed.
func ExampleNewHandler() {
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
	h, err := webhook.NewHandler(inbox, "billing", func(ctx context.Context, tx pgx.Tx, d *webhook.Delivery) error {
		_, err := tx.Exec(ctx, `UPDATE accounts SET orders = orders + 1 WHERE id = $1`, d.Event.AggregateID)
		return err
	}, &webhook.HandlerOptions{Secrets: []string{os.Getenv("WEBHOOK_SECRET")}})
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /hooks/orders", h)
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", nil))
}
