package readme

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
)

// readme:begin docs/testing.md
// placeOrder is the application code under test: an order row and its event in one transaction.
func placeOrder(ctx context.Context, ob *core.Outbox[*sql.Tx], tx *sql.Tx, id string) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
		return err
	}
	payload, err := json.Marshal(map[string]string{"id": id})
	if err != nil {
		return err
	}
	_, err = ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: id,
		Type: "order.placed", Destination: "billing", Payload: payload})
	return err
}

func TestPlaceOrder(t *testing.T) {
	ctx := t.Context()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "app.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)

	// The application's outbox, built on a Recorder: it remembers what each transaction wrote.
	rec := outboxtest.Record[*sql.Tx](store)
	ob, err := core.NewOutbox[*sql.Tx](ctx, rec, nil)
	require.NoError(t, err)
	mark := outboxtest.RequireMark(t, store)

	err = store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := placeOrder(ctx, ob, tx, "42"); err != nil {
			return err
		}
		// The transaction wrote the event (checked before it commits)...
		outboxtest.RequireWritten(t, rec.Tx(tx), outboxtest.Match{Type: "order.placed", AggregateID: "42"})
		outboxtest.RequireNotWritten(t, rec.Tx(tx), outboxtest.Match{Type: "order.cancelled"})
		return nil
	})
	require.NoError(t, err)
	// ...the database committed it...
	outboxtest.RequireWritten(t, outboxtest.Since(store, mark), outboxtest.Match{AggregateID: "42"})
	// ...and a relay publishes it to the billing queue with the order's id in the payload.
	sink := outboxtest.NewSink()
	router := core.StaticRouter{ByDestination: map[string]string{"billing": "billing-queue"}}
	outboxtest.RequireDrained(t, store, sink, router)
	msgs := outboxtest.RequireWritten(t, sink, outboxtest.Match{Type: "order.placed", Destination: "billing",
		PayloadDesc: `{"id":"42"}`, Payload: func(p []byte) bool {
			var v struct{ ID string }
			return json.Unmarshal(p, &v) == nil && v.ID == "42"
		}})
	require.Len(t, msgs, 1)
	require.Equal(t, "billing-queue", sink.Messages()[0].Destination)
}

// readme:end
