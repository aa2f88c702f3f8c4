package memory_test

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// A domain change and its event commit together in one transaction.
func Example() {
	ctx := context.Background()
	store, err := memory.New(nil)
	if err != nil {
		panic(err)
	}
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*memory.Tx](store), nil)
	if err != nil {
		panic(err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		if err := tx.Incr("orders"); err != nil { // the domain change
			return err
		}
		_, err := ob.Write(ctx, tx, core.Event{
			AggregateType: "order", AggregateID: "42", Type: "order.created",
			Payload: []byte(`{"total":10}`),
		})
		return err
	})
	if err != nil {
		panic(err)
	}
	_ = ob.Notify(ctx) // wake relays of this store

	st, _ := store.Stats(ctx)
	fmt.Println("orders:", store.Counter("orders"), "pending events:", st.Pending)
	// Output: orders: 1 pending events: 1
}
