package core_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func msg(id, group string) core.Message {
	return core.Message{Record: driver.Record{Event: core.Event{ID: id}}, GroupID: group}
}

func TestCheckOutcomes(t *testing.T) {
	t.Parallel()
	ms := []core.Message{msg("1", "a"), msg("2", "b"), msg("3", "a"), msg("4", "b")}
	boom := errors.New("boom")
	require.NoError(t, core.CheckOutcomes(ms, []error{nil, nil, nil, nil}))
	require.NoError(t, core.CheckOutcomes(ms, []error{nil, boom, nil, core.ErrNotAcknowledged}))
	require.Error(t, core.CheckOutcomes(ms, []error{boom, nil, nil, nil}), "an ack after a failure of the same group")
	require.Error(t, core.CheckOutcomes(ms, []error{nil, nil, nil}), "one outcome per message")
}

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	require.False(t, core.IsPermanent(nil))
	require.False(t, core.IsPermanent(errors.New("timeout")))
	require.True(t, core.IsPermanent(core.Permanent(errors.New("bad schema"))))
	require.True(t, core.IsPermanent(core.ErrUnknownDestination))
	require.True(t, core.IsPermanent(permErr{}))
	wrapped := core.Permanent(errTarget)
	require.ErrorIs(t, wrapped, errTarget, "Permanent keeps the cause visible to errors.Is")
	require.Nil(t, core.Permanent(nil))
}

var errTarget = errors.New("target")

type permErr struct{}

func (permErr) Error() string   { return "perm" }
func (permErr) Permanent() bool { return true }

func TestStaticRouter(t *testing.T) {
	t.Parallel()
	r := core.StaticRouter{
		ByDestination: map[string]string{"orders": "queue-orders"},
		ByType:        map[string]string{"user.created": "queue-users"},
	}
	d, err := r.Route(&core.Event{Destination: "orders", Type: "x"})
	require.NoError(t, err)
	require.Equal(t, "queue-orders", d)
	d, err = r.Route(&core.Event{Type: "user.created"})
	require.NoError(t, err)
	require.Equal(t, "queue-users", d)
	_, err = r.Route(&core.Event{Destination: "unknown", Type: "user.created"})
	require.ErrorIs(t, err, core.ErrUnknownDestination)
	require.True(t, core.IsPermanent(err))
	r.Default = "fallback"
	d, err = r.Route(&core.Event{Type: "other"})
	require.NoError(t, err)
	require.Equal(t, "fallback", d)
}

func TestRetryPolicy(t *testing.T) {
	t.Parallel()
	p := core.RetryPolicy{Initial: time.Second, Max: 8 * time.Second, Multiplier: 2, Jitter: -1, Deadline: 20 * time.Second}
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		require.Equal(t, want*time.Second, p.Delay(i+1), "attempt %d", i+1)
	}
	// Scheduled delays 1+2+4+8 = 15s < 20s after 4 failures; +8 = 23s >= 20s after 5.
	require.False(t, p.Exhausted(1))
	require.False(t, p.Exhausted(5))
	require.True(t, p.Exhausted(6))

	j := core.RetryPolicy{Initial: time.Second, Jitter: 0.5}
	for i := 0; i < 100; i++ {
		d := j.Delay(1)
		require.True(t, d >= 500*time.Millisecond && d <= 1500*time.Millisecond, "jittered delay %v", d)
	}
}
