package core_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// An unrouted event's error says which rule of the StaticRouter applied and which key would
// route it.
func TestUnknownDestinationSaysWhichKey(t *testing.T) {
	t.Parallel()
	r := core.StaticRouter{ByType: map[string]string{"order.placed": "orders"}}
	_, err := r.Route(&core.Event{ID: "e1", Type: "order.placed", Destination: "billing"})
	require.ErrorIs(t, err, core.ErrUnknownDestination)
	require.True(t, core.IsPermanent(err))
	require.Contains(t, err.Error(), `ByDestination alone, never by its Type "order.placed"`)
	require.Contains(t, err.Error(), `add ByDestination["billing"]`)

	_, err = r.Route(&core.Event{ID: "e2", Type: "order.paid"})
	require.ErrorIs(t, err, core.ErrUnknownDestination)
	require.Contains(t, err.Error(), `add ByType["order.paid"]`)
}

// A StaticRouter that can route nothing is refused at construction instead of parking every
// event later.
func TestRelayRefusesRouterThatRoutesNothing(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	sink := core.SinkFunc(func(_ context.Context, m []core.Message) []error { return make([]error, len(m)) })
	for _, router := range []core.Router{core.StaticRouter{}, &core.StaticRouter{}, (*core.StaticRouter)(nil), nil} {
		_, err := core.NewRelay(store, sink, router, nil)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%#v", router)
		require.Equal(t, "router", oe.Field)
		_, err = core.NewCDCRelay(store, store.ChangeSource(), sink, router, nil)
		require.ErrorAs(t, err, &oe, "%#v", router)
		require.Equal(t, "router", oe.Field)
	}
	for _, router := range []core.Router{
		core.StaticRouter{Default: "q"},
		core.StaticRouter{ByType: map[string]string{"t": "q"}},
		&core.StaticRouter{ByDestination: map[string]string{"d": "q"}},
	} {
		_, err := core.NewRelay(store, sink, router, nil)
		require.NoError(t, err, "%#v", router)
	}
}

// An event over a limit names the size, the limit's value and the option that sets it.
func TestLimitErrorsNameTheOption(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(context.Background(), driver.OutboxStore[*memory.Tx](store), &core.OutboxOptions{
		Limits: core.Limits{MaxPayloadBytes: 10, MaxHeaders: 1, MaxHeaderBytes: 8}})
	require.NoError(t, err)
	cases := []struct {
		ev   core.Event
		want string
	}{
		{core.Event{Payload: []byte(strings.Repeat("x", 11))}, "11 bytes, over the limit of 10 (Limits.MaxPayloadBytes"},
		{core.Event{Headers: map[string]string{"a": "1", "b": "2"}}, "2 headers, over the limit of 1 (Limits.MaxHeaders"},
		{core.Event{Headers: map[string]string{"key": "value1"}}, "9 bytes of keys and values, over the limit of 8 (Limits.MaxHeaderBytes"},
	}
	for _, c := range cases {
		c.ev.AggregateType, c.ev.AggregateID, c.ev.Type = "a", "1", "t"
		err := store.InTx(context.Background(), func(ctx context.Context, tx *memory.Tx) error {
			_, err := ob.Write(ctx, tx, c.ev)
			return err
		})
		require.ErrorIs(t, err, core.ErrInvalidEvent)
		require.Contains(t, err.Error(), c.want)
	}
}

// The one mapping of a delivered event to an inbox message.
func TestInboxMessageOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)
	ev := core.Event{ID: "e1", AggregateType: "order", AggregateID: "42", AggregateVersion: 7, Payload: []byte("p"),
		Type: "order.created", SchemaID: "v1"}
	require.Equal(t, core.InboxMessage{EventID: "e1", Payload: []byte("p"), Entity: "order/42", Version: 7,
		OccurredAt: at, SourcePosition: "q/1", Type: "order.created", SchemaID: "v1"}, core.InboxMessageOf(&ev, at, "q/1"))
	// Without an AggregateVersion there is no version gate, and so no entity.
	ev.AggregateVersion, ev.SchemaID = 0, ""
	require.Equal(t, core.InboxMessage{EventID: "e1", Payload: []byte("p"), Type: "order.created"}, core.InboxMessageOf(&ev, time.Time{}, ""))
}
