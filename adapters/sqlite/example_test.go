package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// A producer writes a domain row and two events in one transaction; a relay delivers them,
// in order, to a sink.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxkit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	db, err := sqlite.OpenDB(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)`); err != nil {
		log.Fatal(err)
	}

	// Producer: the order and its events commit together.
	out, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES ('42', 'paid')`); err != nil {
		log.Fatal(err)
	}
	_, err = out.Write(ctx, tx,
		core.Event{ID: "evt-1", AggregateType: "order", AggregateID: "42", Type: "order.created", Payload: []byte(`{"id":"42"}`)},
		core.Event{ID: "evt-2", AggregateType: "order", AggregateID: "42", Type: "order.paid", Payload: []byte(`{"id":"42"}`)},
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	_ = out.Notify(ctx) // wake the relay of this process

	// Relay: deliver to a sink that prints and acknowledges.
	delivered := make(chan string, 2)
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		for _, m := range msgs {
			delivered <- m.Destination + " " + m.ID + " " + m.Type
		}
		return make([]error, len(msgs))
	})
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: "orders-queue"},
		&core.RelayOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx) }()
	fmt.Println(<-delivered)
	fmt.Println(<-delivered)
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// orders-queue evt-1 order.created
	// orders-queue evt-2 order.paid
}

// A consumer applies each event once: the inbox record and the effect commit together, and a
// redelivery is recognised by its event ID and payload digest.
func Example_inbox() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxkit-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.OpenDB(ctx, filepath.Join(dir, "consumer.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE totals (id TEXT PRIMARY KEY, n INTEGER)`); err != nil {
		log.Fatal(err)
	}
	inbox, err := core.NewInbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	count := func(ctx context.Context, tx *sql.Tx, m core.InboxMessage) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO totals (id, n) VALUES ('orders', 1)
			ON CONFLICT (id) DO UPDATE SET n = n + 1`)
		return err
	}
	msg := core.InboxMessage{EventID: "evt-1", Payload: []byte(`{"id":"42"}`), Entity: "order/42", Version: 1}
	for i := 0; i < 2; i++ { // the broker delivers it twice
		res, err := inbox.Process(ctx, "order-projection", msg, count)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Outcome)
	}
	msg.Payload = []byte(`{"id":"43"}`) // same ID, other payload
	_, err = inbox.Process(ctx, "order-projection", msg, count)
	fmt.Println(errors.Is(err, core.ErrDigestMismatch))
	var n int
	if err := db.QueryRowContext(ctx, `SELECT n FROM totals WHERE id = 'orders'`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied", n, "time")
	// Output:
	// applied
	// duplicate
	// true
	// applied 1 time
}
