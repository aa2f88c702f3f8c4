package jsonschema_test

import (
	"context"
	"errors"
	"fmt"
	"testing/fstest"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/schema/jsonschema"
)

func Example() {
	ctx := context.Background()
	reg := jsonschema.New(&jsonschema.Options{RequireSchemaID: true})
	err := reg.Add("order.created", "v1", []byte(`{
		"type": "object",
		"required": ["order", "amount"],
		"properties": {"order": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}}
	}`))
	if err != nil {
		panic(err)
	}
	store, err := memory.New(nil)
	if err != nil {
		panic(err)
	}
	outbox, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: reg})
	if err != nil {
		panic(err)
	}
	event := func(payload string) core.Event {
		return core.Event{AggregateType: "order", AggregateID: "42", Type: "order.created", SchemaID: "v1", Payload: []byte(payload)}
	}

	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := outbox.Write(ctx, tx, event(`{"order": "42", "amount": 3}`), event(`{"order": "42", "amount": 0}`))
		return err
	})
	fmt.Println(errors.Is(err, core.ErrSchemaRejected), errors.Is(err, core.ErrInvalidEvent), errors.Is(err, jsonschema.ErrInvalidPayload))
	var se *core.SchemaError
	if errors.As(err, &se) {
		fmt.Println("event", se.Index, se.Type, se.SchemaID, "-", se.Err)
	}
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := outbox.Write(ctx, tx, event(`{"order": "42", "amount": 3}`))
		return err
	})
	fmt.Println(err)
	// Output:
	// true true true
	// event 1 order.created v1 - jsonschema: payload does not match its schema (type "order.created", schema id "v1"): at "/amount": keyword minimum
	// <nil>
}

// A directory of schemas laid out as <event type>/<schema id>.json (os.DirFS("schemas") in a
// service; an in-memory file system here).
func ExampleRegistry_AddFS() {
	reg := jsonschema.New(nil)
	err := reg.AddFS(fstest.MapFS{
		"order.created/v1.json": {Data: []byte(`{"type": "object", "required": ["order"]}`)},
		"order.created/v2.json": {Data: []byte(`{"type": "object", "required": ["order", "currency"]}`)},
	})
	fmt.Println(reg.Len(), err)
	err = reg.Validate(context.Background(), "order.created", "v2", []byte(`{"order": "42"}`))
	fmt.Println(err)
	err = reg.Validate(context.Background(), "order.created", "v3", []byte(`{"order": "42"}`))
	fmt.Println(errors.Is(err, jsonschema.ErrUnknownSchema))
	// Output:
	// 2 <nil>
	// jsonschema: payload does not match its schema (type "order.created", schema id "v2"): at "/": keyword required
	// true
}
