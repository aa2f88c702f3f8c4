package core_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	sinkmemory "github.com/outboxkit/outbox/sinks/memory"
)

// These examples run on the in-memory adapter (adapters/memory, transaction type *memory.Tx)
// and the in-process broker (sinks/memory). With a database adapter the transaction type is
// the driver's own: *sql.Tx (adapters/sqlite, adapters/mysql, postgres.NewSQL) or pgx.Tx
// (postgres.New); see examples/quickstart and examples/postgres.

// NewOutbox checks that the store is migrated and learns its lane count; Write then appends
// events inside the caller's transaction, so they commit or roll back with the domain change.
func ExampleNewOutbox() {
	ctx := context.Background()
	store, _ := memory.New(nil)
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	if err != nil {
		panic(err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		if err := tx.Incr("orders"); err != nil { // the domain change
			return err
		}
		ids, err := ob.Write(ctx, tx, core.Event{
			AggregateType: "order", AggregateID: "42", Type: "order.placed",
			Payload: []byte(`{"total":10}`),
		})
		fmt.Println("ids assigned:", len(ids))
		return err
	})
	fmt.Println("committed:", err == nil, "orders:", store.Counter("orders"))
	// Output:
	// ids assigned: 1
	// committed: true orders: 1
}

// An invalid event writes nothing of the call and names the field; when the transaction's
// function fails, neither the domain change nor the event is committed.
func ExampleOutbox_Write() {
	ctx := context.Background()
	store, _ := memory.New(nil)
	ob, _ := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		if err := tx.Incr("orders"); err != nil {
			return err
		}
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", Type: "order.placed"})
		return err // AggregateID is missing: the whole transaction rolls back
	})
	var ve *core.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Field, errors.Is(err, core.ErrInvalidEvent))
	st, _ := store.Stats(ctx)
	fmt.Println("orders:", store.Counter("orders"), "pending:", st.Pending)
	// Output:
	// true AggregateID true
	// orders: 0 pending: 0
}

// A relay publishes committed events to a sink through a router, and Shutdown stops it
// gracefully: the batch in flight is settled and nothing acknowledged is sent again.
func ExampleNewRelay() {
	ctx := context.Background()
	store, _ := memory.New(nil)
	ob, _ := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	_ = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx,
			core.Event{AggregateType: "order", AggregateID: "42", Type: "order.placed", Destination: "orders"},
			core.Event{AggregateType: "order", AggregateID: "42", Type: "order.paid", Destination: "orders"})
		return err
	})

	broker, _ := sinkmemory.NewBroker(nil)
	router := core.StaticRouter{ByDestination: map[string]string{"orders": "orders-queue"}}
	relay, err := core.NewRelay(store, broker, router, &core.RelayOptions{PollInterval: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()

	for range 2 { // in order: one partition key (order/42)
		m := <-broker.Deliveries()
		fmt.Println(m.Type, "to", m.Destination)
	}
	stop, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("shutdown:", relay.Shutdown(stop), "run:", <-done)
	// Output:
	// order.placed to orders-queue
	// order.paid to orders-queue
	// shutdown: <nil> run: <nil>
}

// Process applies a delivered event once: the record (consumer, event id, payload digest)
// and the handler's effect commit in one transaction; a redelivery runs nothing, and the same
// id with another payload is refused.
func ExampleInbox_Process() {
	ctx := context.Background()
	store, _ := memory.New(nil)
	inbox, err := core.NewInbox[*memory.Tx](ctx, store, nil)
	if err != nil {
		panic(err)
	}
	apply := func(ctx context.Context, tx *memory.Tx, m core.InboxMessage) error {
		return tx.Incr("totals") // the effect, in the inbox's transaction
	}
	msg := core.InboxMessage{EventID: "01J0000000000000000000EVNT", Payload: []byte(`{"total":10}`)}
	for range 2 {
		res, err := inbox.Process(ctx, "totals", msg, apply)
		fmt.Println(res.Outcome, err)
	}
	msg.Payload = []byte(`{"total":99}`)
	_, err = inbox.Process(ctx, "totals", msg, apply)
	fmt.Println(errors.Is(err, core.ErrDigestMismatch), "effects:", store.Counter("totals"))
	// Output:
	// applied <nil>
	// duplicate <nil>
	// true effects: 1
}
