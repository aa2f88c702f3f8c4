package testkit

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Writer returns a producer that commits, in one transaction of tr, n events of partition key
// key (aggregate "order"/key, type "order.changed", the given payload) through ob, and returns
// their IDs in write order.
func Writer[TTx any](tr driver.Transactor[TTx], ob *core.Outbox[TTx], n int, payload []byte) func(ctx context.Context, key string) ([]string, error) {
	return func(ctx context.Context, key string) ([]string, error) {
		evs := make([]core.Event, n)
		for i := range evs {
			evs[i] = core.Event{AggregateType: "order", AggregateID: key, Type: "order.changed", PartitionKey: key, Payload: payload}
		}
		var ids []string
		err := tr.InTx(ctx, func(ctx context.Context, tx TTx) error {
			out, err := ob.Write(ctx, tx, evs...)
			if err != nil {
				return err
			}
			ids = make([]string, len(out))
			for i, ev := range out {
				ids[i] = ev.ID
			}
			return nil
		})
		return ids, err
	}
}
