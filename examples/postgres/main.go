// Command postgres is outboxkit on PostgreSQL with pgx: the producer writes its domain row and
// its event in one pgx transaction, a relay publishes committed events, and a consumer applies
// each one once through an inbox in the same database.
//
//	export OUTBOXKIT_POSTGRES_DSN='postgres://user:password@localhost:5432/app?sslmode=disable'
//	go run ./examples/postgres
//
// It creates the outbox and inbox tables (Store.Migrate: embedded, idempotent migrations) and
// two tables of its own, orders and order_totals, in the database the DSN names; run it again
// and it adds to them. The broker is the in-process one of sinks/memory, so that nothing but
// PostgreSQL is needed; swap in sinks/sqs, sinks/sns or sinks/kafka (each a core.Sink) for a
// real one.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/memory"
)

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	dsn := os.Getenv("OUTBOXKIT_POSTGRES_DSN")
	if dsn == "" {
		fmt.Fprintln(os.Stderr, "postgres: set OUTBOXKIT_POSTGRES_DSN to a PostgreSQL URL, e.g. postgres://user:password@localhost:5432/app?sslmode=disable")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, dsn, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres:", err)
		os.Exit(1)
	}
}

// placed is the payload of an "order.placed" event.
type placed struct {
	OrderID  string `json:"order_id"`
	Customer string `json:"customer"`
	Total    int    `json:"total"`
}

func run(ctx context.Context, dsn string, out io.Writer) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, nil) // default table names (outbox, inbox, ...), 64 lanes
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, customer text NOT NULL, total int NOT NULL);
		CREATE TABLE IF NOT EXISTS order_totals (customer text PRIMARY KEY, total int NOT NULL)`); err != nil {
		return err
	}

	// Producer: the order row and its event commit in ONE pgx transaction, or neither does.
	ob, err := core.NewOutbox[pgx.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	orders := []placed{
		{OrderID: newID(), Customer: "alice", Total: 30},
		{OrderID: newID(), Customer: "bob", Total: 12},
	}
	for _, o := range orders {
		payload, _ := json.Marshal(o)
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total) VALUES ($1, $2, $3)`,
				o.OrderID, o.Customer, o.Total); err != nil {
				return err // the event is not written either
			}
			_, err := ob.Write(ctx, tx, core.Event{
				AggregateType: "order", AggregateID: o.OrderID, Type: "order.placed",
				Destination: "orders", Payload: payload,
			})
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "producer: order %s for %s (%d) and its event committed together\n", o.OrderID, o.Customer, o.Total)
	}
	if err := ob.Notify(ctx); err != nil { // LISTEN/NOTIFY: wake the relays now, not at their next poll
		return err
	}

	// Relay: leases lanes, publishes in order per order id, marks after the broker's ack.
	broker, err := memory.NewBroker(nil)
	if err != nil {
		return err
	}
	router := core.StaticRouter{ByDestination: map[string]string{"orders": "orders-queue"}}
	relay, err := core.NewRelay(store, broker, router, nil)
	if err != nil {
		return err
	}
	running := core.Start(ctx, relay)

	// Consumer: each delivery applied once, in a transaction of its own, through the inbox.
	inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
	if err != nil {
		return err
	}
	for range orders {
		var msg core.Message
		select {
		case msg = <-broker.Deliveries():
		case <-ctx.Done():
			return errors.Join(errors.New("no delivery"), ctx.Err())
		}
		in := core.InboxMessageOf(&msg.Event, msg.CreatedAt, "")
		res, err := inbox.Process(ctx, "order-totals", in, func(ctx context.Context, tx pgx.Tx, m core.InboxMessage) error {
			var o placed
			if err := json.Unmarshal(m.Payload, &o); err != nil {
				return core.Permanent(err)
			}
			_, err := tx.Exec(ctx, `INSERT INTO order_totals (customer, total) VALUES ($1, $2)
				ON CONFLICT (customer) DO UPDATE SET total = order_totals.total + excluded.total`, o.Customer, o.Total)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "consumer: %s %s: %s\n", msg.Type, msg.AggregateID, res.Outcome)
	}

	// Graceful stop: what is in flight is settled, lanes are released, nothing is sent twice.
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := running.Stop(stopCtx); err != nil {
		return err
	}
	st, err := store.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "outbox: %d pending, %d parked\n", st.Pending, st.Parked)
	return nil
}

// newID returns a random order id.
func newID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("o-%x", b)
}
