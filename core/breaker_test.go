package core_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// logRecorder is a slog.Handler that keeps every record's level, message and attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []loggedRecord
}

type loggedRecord struct {
	level slog.Level
	msg   string
	attrs map[string]slog.Value
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecorder) WithGroup(string) slog.Handler            { return h }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{level: r.Level, msg: r.Message, attrs: map[string]slog.Value{}}
	r.Attrs(func(a slog.Attr) bool { rec.attrs[a.Key] = a.Value; return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, rec)
	return nil
}

// named returns the records with message msg.
func (h *logRecorder) named(msg string) []loggedRecord {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []loggedRecord
	for _, r := range h.recs {
		if r.msg == msg {
			out = append(out, r)
		}
	}
	return out
}

// With a sink that keeps failing, the breaker logs one WARN when it opens and one INFO when it
// closes, and its pause starts at PollInterval and doubles (up to BreakerMaxDelay) for as long
// as it stays open, also across the cycles that fetch nothing because the failed events wait
// out their retry delay. Health reports ErrBreakerOpen from the moment it opens until it closes.
func TestRelayBreakerBacksOffAndLogsOnce(t *testing.T) {
	t.Parallel()
	store, err := memory.New(&memory.Options{Lanes: 1})
	require.NoError(t, err)
	ob, err := core.NewOutbox(context.Background(), driver.OutboxStore[*memory.Tx](store), nil)
	require.NoError(t, err)
	var failing sync.Map
	failing.Store("on", true)
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		if _, ok := failing.Load("on"); ok {
			return core.Outcomes(len(msgs), errors.New("broker down"))
		}
		return make([]error, len(msgs))
	})
	logs := &logRecorder{}
	const poll, maxPause = 5 * time.Millisecond, 160 * time.Millisecond
	r, err := core.NewRelay(store, sink, core.StaticRouter{Default: "x"}, &core.RelayOptions{
		PollInterval: poll, BreakerThreshold: 2, BreakerMaxDelay: maxPause,
		// Failed events wait 50 ms: most cycles of the open breaker fetch nothing.
		Retry:  core.RetryPolicy{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond, Jitter: -1},
		Logger: slog.New(logs),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()

	for i := range 2 { // two failed sends open the breaker
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: string(rune('1' + i)), Type: "t"})
			return err
		}))
	}
	waitFor(t, 30*time.Second, func() bool { return len(logs.named("relay_breaker_open")) > 0 }, "the breaker opens")
	require.ErrorIs(t, r.Health(), core.ErrBreakerOpen, "open from the moment it opened")
	// Six pauses of the open breaker (or, as before, a WARN at each of them).
	waitFor(t, 30*time.Second, func() bool {
		return len(logs.named("relay_breaker_pause")) >= 6 || len(logs.named("relay_breaker_open")) >= 6
	}, "six pauses")
	require.ErrorIs(t, r.Health(), core.ErrBreakerOpen, "open while sends keep failing")
	opened := logs.named("relay_breaker_open")
	require.Len(t, opened, 1, "one WARN when the breaker opens")
	require.Equal(t, slog.LevelWarn, opened[0].level)
	require.Equal(t, int64(2), opened[0].attrs["consecutive_failures"].Int64())
	require.Equal(t, poll, opened[0].attrs["pause"].Duration())
	pauses := logs.named("relay_breaker_pause")
	want := poll
	for i, p := range pauses[:6] {
		want = min(2*want, maxPause)
		require.Equal(t, want, p.attrs["pause"].Duration(), "pause %d doubles", i+1)
		require.Less(t, p.level, slog.LevelInfo)
	}

	failing.Delete("on")
	waitFor(t, 30*time.Second, func() bool { return r.Health() == nil }, "healthy once a send succeeds")
	closed := logs.named("relay_breaker_closed")
	require.Len(t, closed, 1, "one INFO when the breaker closes")
	require.Equal(t, slog.LevelInfo, closed[0].level)
	require.Len(t, logs.named("relay_breaker_open"), 1)
}
