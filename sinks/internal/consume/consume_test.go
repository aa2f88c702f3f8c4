package consume_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/schema/jsonschema"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

type delivery struct{ ev core.Event }

func deliveryEvent(d *delivery) *core.Event { return &d.ev }

var errPanic = errors.New("test: handler panicked")

func TestDecide(t *testing.T) {
	t.Parallel()
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	boom := errors.New("boom")
	for _, c := range []struct {
		ctx  context.Context
		err  error
		want consume.Action
	}{
		{live, nil, consume.Ack},
		{done, nil, consume.Ack}, // committed before the shutdown: acknowledge it
		{live, boom, consume.Retry},
		{live, fmt.Errorf("%w: x", errPanic), consume.Retry},
		{live, fmt.Errorf("x: %w", core.ErrVersionGap), consume.Retry},
		{live, consume.Poison(boom), consume.DeadLetter},
		{live, fmt.Errorf("wrapped: %w", consume.Poison(boom)), consume.DeadLetter},
		{live, &core.MessageError{Field: "EventID", Reason: "required"}, consume.DeadLetter},
		{live, &core.BatchError{Index: 2, Err: fmt.Errorf("%w: e", core.ErrDigestMismatch)}, consume.DeadLetter},
		{live, fmt.Errorf("%w: e", core.ErrBeyondRetention), consume.DeadLetter},
		{live, &core.SchemaError{EventID: "e", Type: "t", SchemaID: "v1", Err: boom}, consume.DeadLetter},
		{live, &core.BatchError{Index: 1, Err: &core.SchemaError{Index: 1, Err: boom}}, consume.DeadLetter},
		{done, &core.SchemaError{Err: boom}, consume.Release},
		{done, boom, consume.Release},
		{done, consume.Poison(boom), consume.Release},
		{done, context.Canceled, consume.Release},
	} {
		require.Equal(t, c.want, consume.Decide(c.ctx, c.err), "ctx done %v, err %v", c.ctx.Err() != nil, c.err)
	}
	require.Nil(t, consume.Poison(nil))
	p := consume.Poison(boom)
	require.ErrorIs(t, p, boom)
	require.Equal(t, "boom", p.Error())
	require.Equal(t, "dead-letter", consume.DeadLetter.String())
}

func TestMessageAndVersionGate(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)
	ev := core.Event{ID: "e1", AggregateType: "order", AggregateID: "42", AggregateVersion: 7, Payload: []byte("p")}
	require.Equal(t, core.InboxMessage{EventID: "e1", Payload: []byte("p"), Entity: "order/42", Version: 7,
		OccurredAt: at, SourcePosition: "q/1"}, consume.Message(&ev, at, nil, "q/1"))
	m := consume.Message(&ev, at, consume.NoVersionGate, "q/1")
	require.Equal(t, "", m.Entity)
	require.Zero(t, m.Version)

	// Without an AggregateVersion there is no gate, and so no entity for the inbox to check
	// (an aggregate longer than an entity may be is no reason to refuse the message).
	long := core.Event{ID: "e2", AggregateType: "order", AggregateID: strings.Repeat("x", 300)}
	m = consume.Message(&long, time.Time{}, nil, "")
	require.Equal(t, "", m.Entity)
	require.Zero(t, m.Version)
}

func newInbox(t *testing.T) (*memory.Store, *core.Inbox[*memory.Tx]) {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	return store, inbox
}

func TestNewProcessorRefusesWhatTheInboxWould(t *testing.T) {
	t.Parallel()
	_, inbox := newInbox(t)
	h := func(context.Context, *memory.Tx, *delivery) error { return nil }
	for field, build := range map[string]func() error{
		"inbox":    func() error { _, err := consume.NewProcessor(nil, "c", h, deliveryEvent, errPanic); return err },
		"consumer": func() error { _, err := consume.NewProcessor(inbox, "a\nb", h, deliveryEvent, errPanic); return err },
		"handler": func() error {
			_, err := consume.NewProcessor[*memory.Tx, delivery](inbox, "c", nil, deliveryEvent, errPanic)
			return err
		},
		"event": func() error {
			_, err := consume.NewProcessor[*memory.Tx, delivery](inbox, "c", h, nil, errPanic)
			return err
		},
	} {
		var oe *core.OptionError
		require.ErrorAs(t, build(), &oe, field)
		require.Equal(t, field, oe.Field)
	}
	_, err := consume.NewProcessor(inbox, strings.Repeat("n", 300), h, deliveryEvent, errPanic)
	require.ErrorContains(t, err, "longer than")
}

// A panicking handler fails its attempt with the broker's error: nothing is recorded, and the
// next attempt applies the message once.
func TestProcessorTurnsAPanicIntoARetry(t *testing.T) {
	t.Parallel()
	store, inbox := newInbox(t)
	calls := 0
	p, err := consume.NewProcessor(inbox, "c", func(ctx context.Context, tx *memory.Tx, d *delivery) error {
		calls++
		if calls == 1 {
			panic("handler bug")
		}
		return tx.Incr(d.ev.ID)
	}, deliveryEvent, errPanic)
	require.NoError(t, err)
	d := &delivery{ev: core.Event{ID: "e1", AggregateType: "a", AggregateID: "1", Payload: []byte("x")}}
	msg := consume.Message(&d.ev, time.Time{}, nil, "test")
	ctx := context.Background()
	_, err = p.Process(ctx, d, msg)
	require.ErrorIs(t, err, errPanic)
	require.Equal(t, consume.Retry, consume.Decide(ctx, err))
	require.Zero(t, store.Counter("e1"))
	res, err := p.Process(ctx, d, msg)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	res, err = p.Process(ctx, d, msg)
	require.NoError(t, err)
	require.Equal(t, core.Duplicate, res.Outcome)
	require.Equal(t, 1, store.Counter("e1"))

	// The same event ID with another payload: no attempt can pass.
	other := *d
	other.ev.Payload = []byte("y")
	_, err = p.Process(ctx, &other, consume.Message(&other.ev, time.Time{}, nil, "test"))
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))

	var o consume.Outcomes
	require.Equal(t, "applied", o.Add(core.Applied))
	require.Equal(t, "stale", o.Add(core.Stale))
	require.Equal(t, "", o.Add(0))
	require.Equal(t, uint64(1), o.Applied.Load())
	require.Equal(t, uint64(1), o.Stale.Load())
}

func TestProcessBatchHandsEachMessageItsDelivery(t *testing.T) {
	t.Parallel()
	store, inbox := newInbox(t)
	var seen []string
	p, err := consume.NewProcessor(inbox, "c", func(ctx context.Context, tx *memory.Tx, d *delivery) error {
		seen = append(seen, d.ev.ID)
		return tx.Incr(d.ev.ID)
	}, deliveryEvent, errPanic)
	require.NoError(t, err)
	var ds []*delivery
	var msgs []core.InboxMessage
	for _, id := range []string{"a", "b", "a"} {
		d := &delivery{ev: core.Event{ID: id, Payload: []byte(id)}}
		ds = append(ds, d)
		msgs = append(msgs, consume.Message(&d.ev, time.Time{}, nil, ""))
	}
	res, err := p.ProcessBatch(context.Background(), ds, msgs)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, seen)
	require.Equal(t, core.Duplicate, res[2].Outcome)
	require.Equal(t, 1, store.Counter("a"))
}

// A message whose payload the inbox's schema check rejects is dead-lettered at once, with
// nothing recorded and the handler not run; it is never retried. A good one is unaffected.
func TestProcessorDeadLettersASchemaRejection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := jsonschema.New(nil)
	require.NoError(t, reg.Add("order.created", "v1", []byte(`{"type": "object", "required": ["order"]}`)))
	store, p, calls := countingProcessor(t, &core.InboxOptions{Schemas: reg})
	ev := func(id, payload string) *delivery {
		return &delivery{ev: core.Event{ID: id, AggregateType: "order", AggregateID: "1", Type: "order.created", SchemaID: "v1", Payload: []byte(payload)}}
	}
	bad, good := ev("bad", `{}`), ev("good", `{"order": "1"}`)
	_, err := p.Process(ctx, bad, consume.Message(&bad.ev, time.Time{}, nil, "q/1"))
	require.ErrorIs(t, err, core.ErrSchemaRejected)
	require.ErrorIs(t, err, jsonschema.ErrInvalidPayload)
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))
	require.Zero(t, *calls)
	recs, err := store.InboxRecords(ctx, "c", []string{"bad"})
	require.NoError(t, err)
	require.Empty(t, recs)

	_, err = p.ProcessBatch(ctx, []*delivery{good, bad}, []core.InboxMessage{
		consume.Message(&good.ev, time.Time{}, nil, "q/2"), consume.Message(&bad.ev, time.Time{}, nil, "q/3")})
	var be *core.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, 1, be.Index)
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))
	require.Zero(t, *calls)

	res, err := p.Process(ctx, good, consume.Message(&good.ev, time.Time{}, nil, "q/2"))
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	require.Equal(t, consume.Ack, consume.Decide(ctx, err))
	require.Equal(t, 1, store.Counter("good"))
}

// A message of a tenant the inbox does not accept (core.InboxOptions.Tenants) is dead-lettered
// at once, nothing recorded, the handler not run; a listed tenant's message is applied.
func TestProcessorDeadLettersARefusedTenant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, p, calls := countingProcessor(t, &core.InboxOptions{Source: "queue-a", Tenants: []string{"acme"}})
	other := &delivery{ev: core.Event{ID: "e1", Tenant: "globex", Payload: []byte("p")}}
	_, err := p.Process(ctx, other, consume.Message(&other.ev, time.Time{}, nil, "q/1"))
	var te *core.TenantError
	require.ErrorAs(t, err, &te)
	require.Equal(t, "globex", te.Tenant)
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))
	require.Zero(t, *calls)
	recs, err := store.InboxRecords(ctx, "c", []string{"e1"})
	require.NoError(t, err)
	require.Empty(t, recs)

	mine := &delivery{ev: core.Event{ID: "e1", Tenant: "acme", Payload: []byte("p")}}
	res, err := p.Process(ctx, mine, consume.Message(&mine.ev, time.Time{}, nil, "q/2"))
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	recs, err = store.InboxRecords(ctx, "c", []string{"e1"})
	require.NoError(t, err)
	require.Equal(t, "acme", recs["e1"].Tenant)
	require.Equal(t, "queue-a", recs["e1"].Source)
}

// countingProcessor is a Processor of consumer "c" on a memory inbox with opts whose handler
// counts its calls in *calls and increments the event ID's counter.
func countingProcessor(t *testing.T, opts *core.InboxOptions) (*memory.Store, *consume.Processor[*memory.Tx, delivery], *int) {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, opts)
	require.NoError(t, err)
	calls := new(int)
	p, err := consume.NewProcessor(inbox, "c", func(ctx context.Context, tx *memory.Tx, d *delivery) error {
		*calls++
		return tx.Incr(d.ev.ID)
	}, deliveryEvent, errPanic)
	require.NoError(t, err)
	return store, p, calls
}
