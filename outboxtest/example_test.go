package outboxtest_test

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
)

// placeOrder is the application code under test: the order row and its event in one
// transaction.
func placeOrder(ctx context.Context, ob *core.Outbox[*sql.Tx], tx *sql.Tx, id string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
		return err
	}
	_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: id,
		Type: "order.placed", Destination: "billing", Payload: []byte(`{"id":"` + id + `"}`)})
	return err
}

// openStore returns a migrated SQLite store with an orders table, in a temporary directory.
func openStore(ctx context.Context) (*sqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "outboxtest-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err := sqlite.OpenDB(ctx, filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		log.Fatal(err)
	}
	return store, func() { db.Close(); os.RemoveAll(dir) }
}

// A Recorder remembers what each transaction wrote; Written checks it (RequireWritten does
// the same in a test and fails it with this listing).
func ExampleRecorder() {
	ctx := context.Background()
	store, done := openStore(ctx)
	defer done()

	rec := outboxtest.Record[*sql.Tx](store)
	ob, err := core.NewOutbox[*sql.Tx](ctx, rec, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := placeOrder(ctx, ob, tx, "42"); err != nil {
			return err
		}
		got, err := outboxtest.Written(ctx, rec.Tx(tx), outboxtest.Match{Type: "order.placed", AggregateID: "42"})
		if err != nil {
			return err
		}
		fmt.Println("written:", got[0].Type, got[0].AggregateID, got[0].Destination)
		_, err = outboxtest.Written(ctx, rec.Tx(tx), outboxtest.Match{Type: "order.cancelled"})
		fmt.Println(err != nil)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// written: order.placed 42 billing
	// true
}

// Since reads what the database committed after a Mark; Drain publishes it once through a
// real relay to a recording Sink.
func ExampleDrain() {
	ctx := context.Background()
	store, done := openStore(ctx)
	defer done()
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	if err != nil {
		log.Fatal(err)
	}
	mark, err := outboxtest.Mark(ctx, store)
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"1", "2"} {
		if err := store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return placeOrder(ctx, ob, tx, id) }); err != nil {
			log.Fatal(err)
		}
	}
	committed, err := outboxtest.Written(ctx, outboxtest.Since(store, mark), outboxtest.Match{Type: "order.placed"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("committed:", len(committed))

	sink := outboxtest.NewSink()
	router := core.StaticRouter{ByDestination: map[string]string{"billing": "billing-queue"}}
	st, err := outboxtest.Drain(ctx, store, sink, router)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published:", st.Published)
	msgs := sink.Messages()
	// Order holds per partition key only: sort for a stable listing.
	slices.SortFunc(msgs, func(a, b core.Message) int { return cmp.Compare(a.AggregateID, b.AggregateID) })
	for _, m := range msgs {
		fmt.Println(m.Destination, m.AggregateID, string(m.Payload))
	}
	// Output:
	// committed: 2
	// published: 2
	// billing-queue 1 {"id":"1"}
	// billing-queue 2 {"id":"2"}
}
