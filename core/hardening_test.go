package core_test

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Text that no sink's wire format carries (or that the docs promise to refuse) must be refused
// by Write in every text field, not parked later by the sink.
func TestNormalizeRefusesTextSinksRefuse(t *testing.T) {
	t.Parallel()
	bad := map[string]string{
		"U+FFFE": "a\uFFFEb", "U+FFFF": "a\uFFFFb", "C1 U+0085": "a\u0085b", "C1 U+009F": "a\u009fb",
		"DEL": "a\x7fb", "NUL": "a\x00b", "U+FDD0": "a\uFDD0b", "U+1FFFF": "a\U0001FFFFb",
		"U+10FFFE": "a\U0010FFFEb", "invalid UTF-8": "a\xffb", "lone surrogate bytes": "a\xed\xa0\x80b",
	}
	fields := map[string]func(*core.Event, string){
		"AggregateID":   func(e *core.Event, s string) { e.AggregateID = s },
		"PartitionKey":  func(e *core.Event, s string) { e.PartitionKey = s },
		"Tenant":        func(e *core.Event, s string) { e.Tenant = s },
		"CausationID":   func(e *core.Event, s string) { e.CausationID = s },
		"CorrelationID": func(e *core.Event, s string) { e.CorrelationID = s },
		"Headers":       func(e *core.Event, s string) { e.Headers = map[string]string{"k": s} },
	}
	for name, s := range bad {
		for field, set := range fields {
			ev := valid()
			set(&ev, s)
			_, err := driver.Normalize(3, ev, core.Limits{})
			var ve *core.ValidationError
			require.ErrorAs(t, err, &ve, "%s in %s", name, field)
			require.Equal(t, field, ve.Field)
			require.ErrorIs(t, err, core.ErrInvalidEvent)
		}
	}
	// The replacement character itself, other scripts and emoji are text.
	ev := valid()
	ev.AggregateID = "\uFFFD-ü-日本-\U0001F600-\uFFFD"
	_, err := driver.Normalize(0, ev, core.Limits{})
	require.NoError(t, err)
}

func TestNewOutboxBoundsLimits(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	for _, l := range []core.Limits{
		{MaxPayloadBytes: core.MaxLimitPayloadBytes + 1}, {MaxPayloadBytes: -1},
		{MaxHeaders: core.MaxLimitHeaders + 1}, {MaxHeaderBytes: core.MaxLimitHeaderBytes + 1},
		{MaxPayloadBytes: 1 << 40},
	} {
		_, err := core.NewOutbox(context.Background(), store, &core.OutboxOptions{Limits: l})
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%+v", l)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
	_, err = core.NewOutbox(context.Background(), store, &core.OutboxOptions{Limits: core.Limits{MaxPayloadBytes: core.MaxLimitPayloadBytes}})
	require.NoError(t, err)
}

// A caller's value for a group header is replaced, so it is neither validated nor counted
// towards Limits (txgroup.go's promise): with MaxHeaders 1, {a, outbox.tx_id} is one header,
// and a value no sink could carry is dropped, not refused. The caller's map is not modified.
func TestCallerTxHeadersAreReplacedNotValidated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox(ctx, store, &core.OutboxOptions{Limits: core.Limits{MaxHeaders: 1}})
	require.NoError(t, err)
	h := map[string]string{"a": "1", core.HeaderTxID: "mine", core.HeaderTxIndex: "not\x00text", core.HeaderTxCount: "9"}
	var written []core.Event
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		written, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t", Headers: h})
		return err
	}))
	recs, err := store.List(ctx, driver.ListParams{})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	got := recs[0].Headers
	require.Equal(t, written[0].Headers, got)
	require.Equal(t, "1", got["a"])
	require.NotEqual(t, "mine", got[core.HeaderTxID])
	require.Equal(t, "0", got[core.HeaderTxIndex])
	require.Equal(t, "1", got[core.HeaderTxCount])
	require.Equal(t, "mine", h[core.HeaderTxID], "the caller's map is kept")

	// A second caller header still counts.
	h["b"] = "2"
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "2", Type: "t", Headers: h})
		var ve *core.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "Headers", ve.Field)
		return nil
	}))
}

func TestBatchSizesAreBounded(t *testing.T) {
	t.Parallel()
	store, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	sink := core.SinkFunc(func(_ context.Context, m []core.Message) []error { return make([]error, len(m)) })
	for _, n := range []int{core.MaxBatchSize + 1, 1 << 40, -1} {
		_, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{BatchSize: n})
		require.ErrorIs(t, err, core.ErrInvalidOptions, "relay %d", n)
		_, err = core.NewCDCRelay(store, store.ChangeSource(), sink, core.StaticRouter{Default: "x"}, &core.CDCOptions{BatchSize: n})
		require.ErrorIs(t, err, core.ErrInvalidOptions, "cdc %d", n)
		_, err = core.CleanupOutbox(context.Background(), store, &core.CleanupOptions{BatchSize: n})
		require.ErrorIs(t, err, core.ErrInvalidOptions, "cleanup %d", n)
	}
	_, err = core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{BatchSize: core.MaxBatchSize})
	require.NoError(t, err)
}

func TestRetryPolicySaturates(t *testing.T) {
	t.Parallel()
	huge := time.Duration(math.MaxInt64)
	for _, p := range []core.RetryPolicy{
		{Initial: huge, Max: huge, Deadline: huge},
		{Initial: huge / 2, Max: huge, Jitter: 1, Deadline: huge},
		{Initial: time.Hour, Max: huge, Multiplier: 1e6, Deadline: huge},
	} {
		for attempt := 1; attempt < 200; attempt++ {
			require.GreaterOrEqual(t, p.Delay(attempt), time.Duration(0), "%+v attempt %d", p, attempt)
		}
		// The budget sum saturates instead of wrapping below Deadline: it is used up eventually.
		require.True(t, p.Exhausted(200), "%+v", p)
	}
}

// The documented order, case by case: a set Destination never falls through to ByType.
func TestStaticRouterFollowsItsDoc(t *testing.T) {
	t.Parallel()
	r := core.StaticRouter{ByDestination: map[string]string{"ledger": "L"}, ByType: map[string]string{"order.created": "T"}, Default: "D"}
	for _, c := range []struct{ dest, typ, want string }{
		{"ledger", "order.created", "L"},
		{"unmapped", "order.created", "D"},
		{"", "order.created", "T"},
		{"", "other", "D"},
		{"unmapped", "other", "D"},
	} {
		got, err := r.Route(&core.Event{Destination: c.dest, Type: c.typ})
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%+v", c)
	}
	_, err := core.StaticRouter{ByType: map[string]string{"t": "T"}}.Route(&core.Event{Destination: "x", Type: "t"})
	require.ErrorIs(t, err, core.ErrUnknownDestination)
}

type inboxBundle struct {
	store *memory.Store
	inbox *core.Inbox[*memory.Tx]
}

func setupInbox(t *testing.T, opts *core.InboxOptions) inboxBundle {
	t.Helper()
	store, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	in, err := core.NewInbox[*memory.Tx](t.Context(), store, opts)
	require.NoError(t, err)
	return inboxBundle{store: store, inbox: in}
}

func apply(ctx context.Context, tx *memory.Tx, msg core.InboxMessage) error {
	return tx.Incr(msg.EventID)
}

func TestInboxRefusesInvalidMessageFields(t *testing.T) {
	t.Parallel()
	b := setupInbox(t, nil)
	ctx := context.Background()
	now := time.Now()
	cases := map[string]core.InboxMessage{
		"Entity":         {EventID: "e", Entity: strings.Repeat("x", 1<<20), Version: 1, OccurredAt: now},
		"Entity NUL":     {EventID: "e", Entity: "a\x00b", Version: 1, OccurredAt: now},
		"Entity UTF-8":   {EventID: "e", Entity: "a\xffb", OccurredAt: now},
		"SourcePosition": {EventID: "e", SourcePosition: strings.Repeat("x", 1<<20), OccurredAt: now},
		"SourcePos NUL":  {EventID: "e", SourcePosition: "q\x00", OccurredAt: now},
		"OccurredAt":     {EventID: "e", OccurredAt: time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"OccurredAt old": {EventID: "e", OccurredAt: time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC)},
		"EventID":        {EventID: "", OccurredAt: now},
		"Version":        {EventID: "e", Version: -1, OccurredAt: now},
	}
	for name, msg := range cases {
		_, err := b.inbox.Process(ctx, "c", msg, apply)
		var me *core.MessageError
		require.ErrorAs(t, err, &me, name)
		require.ErrorIs(t, err, core.ErrInvalidMessage, name)
		require.Equal(t, 0, b.store.Counter("e"), name)
	}
	for _, name := range []string{"a\nb", strings.Repeat("c", 300), "a\u0085"} {
		_, err := b.inbox.Process(ctx, name, core.InboxMessage{EventID: "e", OccurredAt: now}, apply)
		require.ErrorIs(t, err, core.ErrInvalidMessage)
		require.ErrorIs(t, driver.CheckConsumer(name), core.ErrInvalidMessage)
	}
}

// A far-future OccurredAt is refused, so it can neither overflow an adapter's time encoding nor
// survive a Prune that deletes its record and then apply the message a second time.
func TestInboxFarFutureOccurredAtNeverAppliesTwice(t *testing.T) {
	t.Parallel()
	b := setupInbox(t, nil)
	ctx := context.Background()
	msg := core.InboxMessage{EventID: "e", OccurredAt: time.Date(294247, 1, 11, 0, 0, 0, 0, time.UTC)}
	for range 2 {
		_, _ = b.inbox.Process(ctx, "c", msg, apply)
		_, err := b.inbox.Prune(ctx, "c", time.Now(), 0)
		require.NoError(t, err)
	}
	require.Equal(t, 0, b.store.Counter("e"))
}

func TestInboxZeroOccurredAtRefusedOncePruning(t *testing.T) {
	t.Parallel()
	b := setupInbox(t, nil)
	ctx := context.Background()
	res, err := b.inbox.Process(ctx, "c", core.InboxMessage{EventID: "a"}, apply)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	_, err = b.inbox.Prune(ctx, "c", time.Now().Add(-time.Hour), 0)
	require.NoError(t, err)
	_, err = b.inbox.Process(ctx, "c", core.InboxMessage{EventID: "b"}, apply)
	var me *core.MessageError
	require.ErrorAs(t, err, &me)
	require.Equal(t, "OccurredAt", me.Field)
	require.NotErrorIs(t, err, core.ErrBeyondRetention)
}

func TestInboxPruneRefusesFutureHorizon(t *testing.T) {
	t.Parallel()
	b := setupInbox(t, nil)
	ctx := context.Background()
	for _, h := range []time.Time{time.Now().Add(time.Hour), time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC), {}} {
		_, err := b.inbox.Prune(ctx, "c", h, 0)
		require.ErrorIs(t, err, core.ErrInvalidHorizon, "%v", h)
	}
	// Nothing was raised: a message of now is still applied.
	res, err := b.inbox.Process(ctx, "c", core.InboxMessage{EventID: "e", OccurredAt: time.Now()}, apply)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	_, err = b.inbox.Prune(ctx, "c", time.Now().Add(core.MaxClockSkew/2), 0)
	require.NoError(t, err)
	_, err = b.inbox.Prune(ctx, "c", time.Now(), core.MaxPruneLimit+1)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}

func TestInboxFirstVersion(t *testing.T) {
	t.Parallel()
	_, err := core.NewInbox[*memory.Tx](t.Context(), setupInbox(t, nil).store, &core.InboxOptions{FirstVersion: -1})
	require.ErrorIs(t, err, core.ErrInvalidOptions)

	b := setupInbox(t, &core.InboxOptions{Gap: core.GapReject, FirstVersion: 1})
	ctx := context.Background()
	msg := func(id string, v int64) core.InboxMessage {
		return core.InboxMessage{EventID: id, Entity: "order/1", Version: v, OccurredAt: time.Now()}
	}
	_, err = b.inbox.Process(ctx, "c", msg("v2", 2), apply)
	require.ErrorIs(t, err, core.ErrVersionGap)
	require.Equal(t, 0, b.store.Counter("v2"))
	for _, m := range []core.InboxMessage{msg("v1", 1), msg("v2", 2)} {
		res, err := b.inbox.Process(ctx, "c", m, apply)
		require.NoError(t, err)
		require.Equal(t, core.Applied, res.Outcome)
	}
}

func TestInboxPanickingHandlerRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	b := setupInbox(t, nil)
	ctx := context.Background()
	msg := core.InboxMessage{EventID: "e", OccurredAt: time.Now()}
	require.PanicsWithValue(t, "boom", func() {
		_, _ = b.inbox.Process(ctx, "c", msg, func(ctx context.Context, tx *memory.Tx, m core.InboxMessage) error {
			_ = tx.Incr("e")
			panic("boom")
		})
	})
	require.Equal(t, 0, b.store.Counter("e"))
	res, err := b.inbox.Process(ctx, "c", msg, apply)
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
}

// timeOf returns the UTC time unix seconds (with a fixed sub-second part), saturating far out
// of range instead of overflowing.
func timeOf(unix int64) time.Time {
	const bound = 1 << 40
	unix = min(max(unix, -bound), bound)
	return time.Unix(unix, 123456000).UTC()
}

// An invalid retry policy or breaker option is refused by both relays with an *OptionError
// naming the field, instead of being adjusted silently; zero values take the defaults.
func TestRelaysRefuseInvalidRetryPolicies(t *testing.T) {
	t.Parallel()
	store, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	sink := core.SinkFunc(func(_ context.Context, m []core.Message) []error { return make([]error, len(m)) })
	router := core.StaticRouter{Default: "x"}
	for _, c := range []struct {
		p     core.RetryPolicy
		field string
	}{
		{core.RetryPolicy{Multiplier: 0.5}, "Retry.Multiplier"},
		{core.RetryPolicy{Multiplier: -2}, "Retry.Multiplier"},
		{core.RetryPolicy{Multiplier: math.NaN()}, "Retry.Multiplier"},
		{core.RetryPolicy{Jitter: 1.5}, "Retry.Jitter"},
		{core.RetryPolicy{Jitter: math.Inf(1)}, "Retry.Jitter"},
		{core.RetryPolicy{Initial: -time.Second}, "Retry.Initial"},
		{core.RetryPolicy{Initial: time.Minute, Max: time.Second}, "Retry.Initial"},
		{core.RetryPolicy{Max: -time.Second}, "Retry.Max"},
		{core.RetryPolicy{Deadline: -time.Hour}, "Retry.Deadline"},
	} {
		var oe *core.OptionError
		require.ErrorAs(t, c.p.Check(), &oe, "%+v", c.p)
		require.Equal(t, c.field, oe.Field)
		_, err := core.NewRelay(store, sink, router, &core.RelayOptions{Retry: c.p})
		require.ErrorAs(t, err, &oe, "relay %+v", c.p)
		require.Equal(t, c.field, oe.Field)
		_, err = core.NewCDCRelay(store, store.ChangeSource(), sink, router, &core.CDCOptions{Retry: c.p})
		require.ErrorAs(t, err, &oe, "cdc %+v", c.p)
		require.Equal(t, c.field, oe.Field)
	}
	for _, p := range []core.RetryPolicy{{}, {Jitter: -1}, {Multiplier: 1, Jitter: 1}, {Initial: time.Hour}} {
		require.NoError(t, p.Check(), "%+v", p)
		_, err := core.NewRelay(store, sink, router, &core.RelayOptions{Retry: p})
		require.NoError(t, err, "%+v", p)
	}
	// Initial above the default Max (only Initial set): Max follows Initial, as documented.
	require.Equal(t, time.Hour, core.RetryPolicy{Initial: time.Hour, Jitter: -1}.Delay(5))
	for _, o := range []core.RelayOptions{{BreakerThreshold: -1}, {BreakerMaxDelay: -time.Second}} {
		_, err := core.NewRelay(store, sink, router, &o)
		require.ErrorIs(t, err, core.ErrInvalidOptions, "%+v", o)
	}
}
