package batcher_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// A sink's Send builds one Item per message and lets Run keep the prefix rule. Here the
// broker refuses the second message of group "order-1" and takes everything else: the third
// message of that group, although the broker took it, is reported not acknowledged.
func Example() {
	msgs := []core.Message{
		{Record: driver.Record{Event: core.Event{ID: "e1"}}, GroupID: "order-1", Destination: "orders"},
		{Record: driver.Record{Event: core.Event{ID: "e2"}}, GroupID: "order-1", Destination: "orders"},
		{Record: driver.Record{Event: core.Event{ID: "e3"}}, GroupID: "order-1", Destination: "orders"},
		{Record: driver.Record{Event: core.Event{ID: "e4"}}, GroupID: "order-2", Destination: "orders"},
	}
	items := make([]batcher.Item, len(msgs))
	for i, m := range msgs {
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination, Size: len(m.Payload)}
	}
	send := func(ctx context.Context, dest string, idx []int) []error {
		res := make([]error, len(idx)) // one broker request to dest
		for k, i := range idx {
			if msgs[i].ID == "e2" {
				res[k] = errors.New("refused")
			}
		}
		return res
	}
	out := batcher.Run(context.Background(), items, batcher.Options{MaxEntries: 10, Concurrency: 4}, send)
	for i, err := range out {
		fmt.Printf("%s: %v\n", msgs[i].ID, err)
	}
	fmt.Println("contract:", core.CheckOutcomes(msgs, out))
	// Output:
	// e1: <nil>
	// e2: refused
	// e3: outbox: not acknowledged
	// e4: <nil>
	// contract: <nil>
}
