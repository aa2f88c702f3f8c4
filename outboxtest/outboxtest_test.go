package outboxtest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/outboxtest"
)

// fakeTB records what a Require helper reports instead of failing the test.
type fakeTB struct {
	testing.TB // nil: only the methods below are called
	ctx        context.Context
	fatal      []string
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Context() context.Context  { return f.ctx }
func (f *fakeTB) Fatal(args ...any)         { f.fatal = append(f.fatal, fmt.Sprint(args...)) }
func (f *fakeTB) Fatalf(s string, a ...any) { f.fatal = append(f.fatal, fmt.Sprintf(s, a...)) }

type bundle struct {
	store *memory.Store
	rec   *outboxtest.Recorder[*memory.Tx]
	ob    *core.Outbox[*memory.Tx]
}

func setup(t *testing.T) bundle {
	t.Helper()
	store, err := memory.New(&memory.Options{Lanes: 4})
	require.NoError(t, err)
	rec := outboxtest.Record[*memory.Tx](store)
	ob, err := core.NewOutbox[*memory.Tx](t.Context(), rec, nil)
	require.NoError(t, err)
	return bundle{store: store, rec: rec, ob: ob}
}

func order(id, typ string) core.Event {
	return core.Event{ID: "evt-" + id + "-" + typ, AggregateType: "order", AggregateID: id, Type: typ,
		Destination: "billing", Payload: fmt.Appendf(nil, `{"order":%q}`, id)}
}

func TestRequireWrittenTx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var tx1, tx2 *memory.Tx
	require.NoError(t, b.store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		tx1 = tx
		_, err := b.ob.Write(ctx, tx, order("1", "order.placed"), order("1", "order.paid"))
		require.NoError(t, err)
		// Checked before the commit, inside the transaction.
		got := outboxtest.RequireWritten(t, b.rec.Tx(tx), outboxtest.Match{AggregateID: "1"})
		require.Len(t, got, 2)
		return nil
	}))
	require.NoError(t, b.store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		tx2 = tx
		_, err := b.ob.Write(ctx, tx, order("2", "order.placed"))
		return err
	}))
	outboxtest.RequireWritten(t, b.rec.Tx(tx1), outboxtest.Match{Type: "order.paid", AggregateType: "order", Destination: "billing",
		Payload: func(p []byte) bool { return bytes.Contains(p, []byte(`"1"`)) }})
	outboxtest.RequireNotWritten(t, b.rec.Tx(tx1), outboxtest.Match{AggregateID: "2"})
	outboxtest.RequireNotWritten(t, b.rec.Tx(tx2), outboxtest.Match{Type: "order.paid"})
	got := outboxtest.RequireWritten(t, b.rec.All(), outboxtest.Match{Type: "order.placed"})
	require.Equal(t, []string{"1", "2"}, []string{got[0].AggregateID, got[1].AggregateID})

	// A failed Write records nothing.
	require.Error(t, b.store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := b.ob.Write(ctx, tx, order("1", "order.placed")) // duplicate ID
		require.ErrorIs(t, err, core.ErrDuplicateEvent)
		outboxtest.RequireNotWritten(t, b.rec.Tx(tx), outboxtest.Match{})
		return err
	}))
}

func TestFailureListsWhatWasWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var tx1 *memory.Tx
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		tx1 = tx
		_, err := b.ob.Write(ctx, tx, order("1", "order.placed"), order("1", "order.paid"))
		return err
	}))

	ftb := &fakeTB{ctx: t.Context()}
	got := outboxtest.RequireWritten(ftb, b.rec.Tx(tx1), outboxtest.Match{Type: "order.shipped", AggregateID: "1",
		Payload: func([]byte) bool { return true }, PayloadDesc: "any JSON"})
	require.Nil(t, got)
	require.Len(t, ftb.fatal, 1)
	require.Equal(t, `outboxtest: no event matching type=order.shipped aggregate_id=1 payload matching any JSON was written; written instead (2):
	id=evt-1-order.placed type=order.placed aggregate=order/1 version=0 destination=billing payload="{\"order\":\"1\"}"
	id=evt-1-order.paid type=order.paid aggregate=order/1 version=0 destination=billing payload="{\"order\":\"1\"}"`, ftb.fatal[0])

	ftb = &fakeTB{ctx: t.Context()}
	outboxtest.RequireNotWritten(ftb, b.rec.Tx(tx1), outboxtest.Match{Type: "order.paid"})
	require.Len(t, ftb.fatal, 1)
	require.Equal(t, `outboxtest: 1 event(s) matching type=order.paid were written, want none:
	id=evt-1-order.paid type=order.paid aggregate=order/1 version=0 destination=billing payload="{\"order\":\"1\"}"`, ftb.fatal[0])

	ftb = &fakeTB{ctx: t.Context()}
	outboxtest.RequireWritten(ftb, b.rec.Tx(&memory.Tx{}), outboxtest.Match{})
	require.Equal(t, []string{"outboxtest: no event matching any event was written; nothing was written"}, ftb.fatal)

	// The error forms, for code without a testing.TB.
	_, err := outboxtest.Written(t.Context(), b.rec.Tx(tx1), outboxtest.Match{ID: "nope"})
	var me *outboxtest.MismatchError
	require.ErrorAs(t, err, &me)
	require.ErrorIs(t, err, outboxtest.ErrMismatch)
	require.Len(t, me.Records, 2)
	boom := errors.New("boom")
	_, err = outboxtest.Written(t.Context(), outboxtest.SourceFunc(func(context.Context) ([]driver.Record, error) { return nil, boom }), outboxtest.Match{})
	require.ErrorIs(t, err, boom)
	require.NotErrorIs(t, err, outboxtest.ErrMismatch)

	// A long payload is cut in the listing.
	long := order("3", "order.placed")
	long.Payload = []byte(strings.Repeat("x", 500))
	require.Contains(t, outboxtest.Describe(long), `... (500 bytes)`)
}

func TestSinceAndDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	write := func(evs ...core.Event) {
		require.NoError(t, b.store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := b.ob.Write(ctx, tx, evs...)
			return err
		}))
	}
	write(order("1", "order.placed"))
	mark := outboxtest.RequireMark(t, b.store)
	write(order("2", "order.placed"), order("2", "order.paid"))
	require.Error(t, b.store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := b.ob.Write(ctx, tx, order("3", "order.placed"))
		require.NoError(t, err)
		return errors.New("rolled back")
	}))
	since := outboxtest.Since(b.store, mark)
	got := outboxtest.RequireWritten(t, since, outboxtest.Match{AggregateID: "2"})
	require.Len(t, got, 2)
	require.Positive(t, got[0].Seq)
	outboxtest.RequireNotWritten(t, since, outboxtest.Match{AggregateID: "1"}) // before the mark
	outboxtest.RequireNotWritten(t, since, outboxtest.Match{AggregateID: "3"}) // rolled back

	sink := outboxtest.NewSink()
	st := outboxtest.RequireDrained(t, b.store, sink, nil)
	require.EqualValues(t, 3, st.Published)
	msgs := sink.Messages()
	require.Len(t, msgs, 3)
	require.Equal(t, outboxtest.DefaultDestination, msgs[0].Destination)
	outboxtest.RequireWritten(t, sink, outboxtest.Match{Type: "order.paid", AggregateID: "2"})
	stats, err := b.store.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, stats.Pending)

	// A permanent failure parks the event and its key; Drain still returns.
	write(order("4", "order.placed"), order("4", "order.paid"), order("5", "order.placed"))
	sink.Reset()
	sink.Fail = func(m core.Message) error {
		if m.AggregateID == "4" {
			return core.Permanent(errors.New("rejected"))
		}
		return nil
	}
	st = outboxtest.RequireDrained(t, b.store, sink, core.StaticRouter{ByDestination: map[string]string{"billing": "billing-queue"}})
	require.EqualValues(t, 1, st.Published)
	outboxtest.RequireWritten(t, sink, outboxtest.Match{AggregateID: "5"})
	outboxtest.RequireNotWritten(t, sink, outboxtest.Match{AggregateID: "4"})
	require.Equal(t, "billing-queue", sink.Messages()[0].Destination)
	stats, err = b.store.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, stats.Parked)
	require.EqualValues(t, 1, stats.Pending) // the key's second event waits behind the parked one
}

func TestDrainGivesUpWhenContextEnds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.store.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		_, err := b.ob.Write(ctx, tx, order("1", "order.placed"))
		return err
	}))
	sink := &outboxtest.Sink{Fail: func(core.Message) error { return errors.New("broker down") }}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := outboxtest.Drain(ctx, b.store, sink, nil)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "drain: 1 event(s) still pending")

	// A context that ended before Drain began still gets the count, from a store that (as a
	// database would) refuses every read under an ended context.
	done, cancelDone := context.WithCancel(t.Context())
	cancelDone()
	_, err = outboxtest.Drain(done, ctxStats{b.store}, sink, nil)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "drain: 1 event(s) still pending")
}

func TestSinkPrefixRule(t *testing.T) {
	t.Parallel()
	rec := func(id, key string) core.Message {
		return core.Message{Record: driver.Record{Event: core.Event{ID: id}}, GroupID: key}
	}
	s := &outboxtest.Sink{Fail: func(m core.Message) error {
		if m.ID == "a1" {
			return errors.New("no")
		}
		return nil
	}}
	msgs := []core.Message{rec("a1", "a"), rec("b1", "b"), rec("a2", "a")}
	out := s.Send(t.Context(), msgs)
	require.NoError(t, core.CheckOutcomes(msgs, out))
	require.ErrorIs(t, out[2], core.ErrNotAcknowledged)
	require.NoError(t, out[1])
	require.Len(t, s.Messages(), 1)
}

// ctxStats is a store whose Stats fails once its context ended, as a database's does (the
// memory store answers regardless).
type ctxStats struct{ *memory.Store }

func (s ctxStats) Stats(ctx context.Context) (driver.Stats, error) {
	if err := ctx.Err(); err != nil {
		return driver.Stats{}, err
	}
	return s.Store.Stats(ctx)
}
