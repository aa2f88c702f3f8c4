package core_test

import (
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func ExampleLaneOf() {
	// Every adapter stores this lane; it depends only on the partition key and the lane count.
	fmt.Println(driver.LaneOf("order/42", 64))
	// Output: 18
}

func ExampleStaticRouter() {
	r := core.StaticRouter{ByDestination: map[string]string{
		"orders": "https://sqs.example/123/orders.fifo",
	}}
	dest, _ := r.Route(&core.Event{Destination: "orders", Type: "order.created"})
	fmt.Println(dest)
	_, err := r.Route(&core.Event{Destination: "payments", Type: "payment.taken"})
	fmt.Println(errors.Is(err, core.ErrUnknownDestination), core.IsPermanent(err))
	// Output:
	// https://sqs.example/123/orders.fifo
	// true true
}

func ExampleNormalize() {
	_, err := driver.Normalize(0, core.Event{AggregateType: "order", Type: "order.created"}, core.Limits{})
	var ve *core.ValidationError
	fmt.Println(errors.As(err, &ve), ve.Field, errors.Is(err, core.ErrInvalidEvent))
	// Output: true AggregateID true
}
