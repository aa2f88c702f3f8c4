package core_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/schema/jsonschema"
)

const orderSchema = `{
	"type": "object",
	"required": ["order", "amount"],
	"properties": {"order": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}}
}`

// orders is a registry with order.created/v1 (orderSchema).
func orders(t testing.TB, opts *jsonschema.Options) *jsonschema.Registry {
	t.Helper()
	reg := jsonschema.New(opts)
	require.NoError(t, reg.Add("order.created", "v1", []byte(orderSchema)))
	return reg
}

func order(id, payload string) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: "42", Type: "order.created", SchemaID: "v1", Payload: []byte(payload)}
}

const (
	good = `{"order": "42", "amount": 3}`
	bad  = `{"order": "42", "amount": 0}`
)

// requireRejected checks err is Write's rejection of event index i (id) by the JSON
// registry with reason.
func requireRejected(t *testing.T, err error, i int, id string, reason error) {
	t.Helper()
	var se *core.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, i, se.Index)
	require.Equal(t, id, se.EventID)
	require.Equal(t, "order.created", se.Type)
	require.Equal(t, "v1", se.SchemaID)
	require.ErrorIs(t, err, core.ErrSchemaRejected)
	require.ErrorIs(t, err, core.ErrInvalidEvent, "existing checks for invalid events hold")
	require.ErrorIs(t, err, reason)
	require.True(t, core.IsPermanent(err))
	var ve *core.ValidationError
	require.False(t, errors.As(err, &ve), "a schema rejection is no field error")
}

// Write refuses a payload its schema rejects and writes nothing of the call, in the caller's
// transaction, which goes on: what it wrote before commits, and only that.
func TestWriteSchemaCheckWritesNothingOfARejectedCall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: orders(t, nil)})
	require.NoError(t, err)
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, order("before", good))
		require.NoError(t, err)
		stored, err := ob.Write(ctx, tx, order("a", good), order("b", bad), order("c", good))
		require.Nil(t, stored)
		requireRejected(t, err, 1, "b", jsonschema.ErrInvalidPayload)
		_, err = ob.Write(ctx, tx, order("d", `not json`))
		requireRejected(t, err, 0, "d", jsonschema.ErrNotJSON)
		return tx.Incr("effect") // the caller's own write in the same transaction
	})
	require.NoError(t, err)
	requireOutbox(t, store, "before")
	require.Equal(t, 1, store.Counter("effect"))

	// A good call passes, with ids assigned: the id of a rejected event is the assigned one.
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		stored, err := ob.Write(ctx, tx, order("", good), order("", good))
		require.NoError(t, err)
		require.Len(t, stored, 2)
		_, err = ob.Write(ctx, tx, order("", bad))
		var se *core.SchemaError
		require.ErrorAs(t, err, &se)
		require.NotEmpty(t, se.EventID)
		return nil
	})
	require.NoError(t, err)
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Pending)
}

// requireOutbox checks the outbox holds exactly the events ids.
func requireOutbox(t *testing.T, store *memory.Store, ids ...string) {
	t.Helper()
	recs, err := store.List(t.Context(), driver.ListParams{State: driver.StateAll})
	require.NoError(t, err)
	var got []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	require.Equal(t, ids, got)
}

// The same on SQLite, in the caller's *sql.Tx: after the refusal the transaction is still
// usable and commits what it wrote before.
func TestWriteSchemaCheckSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "schema.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, &core.OutboxOptions{Schemas: orders(t, nil)})
	require.NoError(t, err)

	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = ob.Write(ctx, tx, order("before", good))
	require.NoError(t, err)
	_, err = ob.Write(ctx, tx, order("a", good), order("b", bad))
	requireRejected(t, err, 1, "b", jsonschema.ErrInvalidPayload)
	require.NoError(t, tx.Commit())

	var ids []string
	rows, err := db.QueryContext(ctx, "SELECT id FROM outbox ORDER BY seq")
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"before"}, ids)
}

// recorder is a SchemaValidator that records what it is asked and rejects payload "no".
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) Validate(_ context.Context, typ, id string, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, typ+"/"+id+"="+string(payload))
	if string(payload) == "no" {
		return errors.New("said no")
	}
	return nil
}

// The validator sees every event, an event without a SchemaID too (it decides), after the
// event's own checks; the JSON registry lets such an event pass unless RequireSchemaID.
func TestWriteAsksTheValidatorAboutEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := memory.New(nil)
	require.NoError(t, err)
	rec := &recorder{}
	ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: rec})
	require.NoError(t, err)
	noID := order("n", "x")
	noID.SchemaID = ""
	invalid := order("bad id", "x")
	err = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, order("a", "x"), noID)
		require.NoError(t, err)
		_, err = ob.Write(ctx, tx, order("b", "no"))
		require.ErrorIs(t, err, core.ErrSchemaRejected)
		require.ErrorContains(t, err, `event 0 (id b, type "order.created", schema id "v1"): said no`)
		_, err = ob.Write(ctx, tx, invalid) // refused by the event's own checks first
		var ve *core.ValidationError
		require.ErrorAs(t, err, &ve)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{"order.created/v1=x", "order.created/=x", "order.created/v1=no"}, rec.calls)

	for _, c := range []struct {
		require bool
		want    error
	}{{false, nil}, {true, jsonschema.ErrNoSchemaID}} {
		ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: orders(t, &jsonschema.Options{RequireSchemaID: c.require})})
		require.NoError(t, err)
		_ = store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			ev := order("", "not even json")
			ev.SchemaID = ""
			_, err := ob.Write(ctx, tx, ev)
			if c.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, c.want)
				require.ErrorIs(t, err, core.ErrSchemaRejected)
			}
			return nil
		})
	}
}

// The inbox refuses a message its schema rejects with a permanent error, before its
// transaction: nothing is recorded and the handler does not run. A good message is applied,
// and its redelivery is a Duplicate as ever.
func TestInboxSchemaCheck(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := memory.New(nil)
	require.NoError(t, err)
	in, err := core.NewInbox(ctx, store, &core.InboxOptions{Schemas: orders(t, nil)})
	require.NoError(t, err)
	calls := 0
	apply := func(ctx context.Context, tx *memory.Tx, m core.InboxMessage) error {
		calls++
		return tx.Incr(m.EventID)
	}
	msg := func(id, payload string) core.InboxMessage {
		ev := order(id, payload)
		return core.InboxMessageOf(&ev, time.Time{}, "test")
	}
	requireNotRecorded := func(ids ...string) {
		t.Helper()
		recs, err := store.InboxRecords(ctx, "billing", ids)
		require.NoError(t, err)
		require.Empty(t, recs)
	}

	_, err = in.Process(ctx, "billing", msg("bad", bad), apply)
	var se *core.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, core.SchemaError{Index: 0, EventID: "bad", Type: "order.created", SchemaID: "v1", Err: se.Err}, *se)
	require.ErrorIs(t, err, core.ErrSchemaRejected)
	require.ErrorIs(t, err, jsonschema.ErrInvalidPayload)
	require.True(t, core.IsPermanent(err))
	require.NotErrorIs(t, err, core.ErrInvalidEvent, "no Write was refused")
	require.Zero(t, calls)
	requireNotRecorded("bad")

	for _, want := range []core.Outcome{core.Applied, core.Duplicate} {
		res, err := in.Process(ctx, "billing", msg("good", good), apply)
		require.NoError(t, err)
		require.Equal(t, want, res.Outcome)
	}
	require.Equal(t, 1, store.Counter("good"))

	// A batch with one rejected message: a *BatchError naming it, nothing of the batch
	// recorded, whichever way the batch is handled.
	batch := []core.InboxMessage{msg("b1", good), msg("b2", bad), msg("b3", good)}
	_, err = in.ProcessBatch(ctx, "billing", batch, func(ctx context.Context, tx *memory.Tx, _ int, m core.InboxMessage) error {
		return apply(ctx, tx, m)
	})
	requireBatchRejected(t, err, 1)
	_, err = in.ProcessSet(ctx, "billing", batch, func(ctx context.Context, tx *memory.Tx, ms []core.InboxMessage) error {
		calls += len(ms)
		return nil
	})
	requireBatchRejected(t, err, 1)
	require.Equal(t, 1, calls)
	requireNotRecorded("b1", "b2", "b3")
	res, err := in.ProcessBatch(ctx, "billing", []core.InboxMessage{batch[0], batch[2], msg("good", good)}, func(ctx context.Context, tx *memory.Tx, _ int, m core.InboxMessage) error {
		return apply(ctx, tx, m)
	})
	require.NoError(t, err)
	require.Equal(t, []core.InboxResult{{Outcome: core.Applied}, {Outcome: core.Applied}, {Outcome: core.Duplicate, Prior: core.Applied}}, res)
}

func requireBatchRejected(t *testing.T, err error, i int) {
	t.Helper()
	var be *core.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, i, be.Index)
	var se *core.SchemaError
	require.ErrorAs(t, err, &se)
	require.Equal(t, i, se.Index)
	require.ErrorIs(t, err, core.ErrSchemaRejected)
	require.True(t, core.IsPermanent(err))
}

// Writers share one registry while schemas are added: each call is refused or written whole.
func TestWriteSchemaCheckConcurrent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store, err := memory.New(nil)
	require.NoError(t, err)
	reg := orders(t, nil)
	ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: reg})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 50 {
			err := reg.Add("other", fmt.Sprintf("v%d", i), []byte(`{"type": "object"}`))
			if err != nil {
				t.Error(err)
			}
		}
	})
	const writers, calls = 4, 25
	for w := range writers {
		wg.Go(func() {
			for i := range calls {
				payload := good
				if i%2 == 1 {
					payload = bad
				}
				err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
					_, err := ob.Write(ctx, tx, order(fmt.Sprintf("w%d-%d-a", w, i), good), order(fmt.Sprintf("w%d-%d-b", w, i), payload))
					return err
				})
				if (i%2 == 1) != errors.Is(err, core.ErrSchemaRejected) {
					t.Errorf("writer %d call %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(writers*(calls+1)/2*2), st.Pending, "two events of every accepted call, none of a refused one")
	require.Equal(t, 51, reg.Len())
}

// BenchmarkWriteSchemaCheck compares Write of one ~100-byte JSON event on the memory adapter
// with and without the JSON Schema check.
func BenchmarkWriteSchemaCheck(b *testing.B) {
	for _, c := range []struct {
		name    string
		schemas core.SchemaValidator
	}{{"without", nil}, {"with", orders(b, nil)}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := b.Context()
			store, err := memory.New(nil)
			require.NoError(b, err)
			ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Schemas: c.schemas})
			require.NoError(b, err)
			ev := order("", `{"order": "42", "amount": 3, "note": "a short note to make it about a hundred bytes"}`)
			b.ReportAllocs()
			for b.Loop() {
				err := store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
					_, err := ob.Write(ctx, tx, ev)
					return err
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
