package memory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/memory"
)

func msgs(groups, perGroup int) []core.Message {
	var out []core.Message
	for i := 0; i < perGroup; i++ {
		for g := 0; g < groups; g++ {
			id := fmt.Sprintf("g%d-%d", g, i)
			out = append(out, core.Message{Record: driver.Record{Event: core.Event{ID: id}}, GroupID: fmt.Sprintf("g%d", g), DedupID: id})
		}
	}
	return out
}

func TestBrokerKeepsPrefixRuleUnderFaults(t *testing.T) {
	t.Parallel()
	b, err := memory.NewBroker(&memory.Options{RejectRate: 0.2, AckLossRate: 0.1, DuplicateRate: 0.1, Seed: 7, Buffer: 100000})
	require.NoError(t, err)
	ctx := context.Background()
	var failures int
	for round := 0; round < 50; round++ {
		in := msgs(5, 8)
		out := b.Send(ctx, in)
		require.NoError(t, core.CheckOutcomes(in, out))
		for _, e := range out {
			if e != nil {
				failures++
			}
		}
	}
	require.Positive(t, failures, "fault injection must produce failures at these rates")
	st := b.Stats()
	require.Positive(t, st.HeldBack)
	require.Positive(t, st.Duplicated)
	require.Equal(t, int(st.Accepted+st.Duplicated), len(b.Deliveries()))
}

func TestBrokerRejectRuleIsPermanentWhenWrapped(t *testing.T) {
	t.Parallel()
	b, err := memory.NewBroker(nil)
	require.NoError(t, err)
	in := msgs(2, 3) // g0-0 g1-0 g0-1 g1-1 g0-2 g1-2
	b.Reject("g0-1", core.Permanent(errors.New("schema rejected")))
	out := b.Send(context.Background(), in)
	require.NoError(t, out[0])
	require.NoError(t, out[1])
	require.True(t, core.IsPermanent(out[2]))
	require.NoError(t, out[3])
	require.ErrorIs(t, out[4], core.ErrNotAcknowledged, "later message of the failed group must be held back")
	require.NoError(t, out[5])
	require.Len(t, b.Deliveries(), 4)

	b.Reject("g0-1", nil)
	out = b.Send(context.Background(), in[2:3])
	require.NoError(t, out[0])
}

func TestBrokerOptionsValidated(t *testing.T) {
	t.Parallel()
	_, err := memory.NewBroker(&memory.Options{RejectRate: 2})
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "RejectRate", oe.Field)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	// A buffer of 2^40 messages would be allocated at once.
	_, err = memory.NewBroker(&memory.Options{Buffer: 1 << 40})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "Buffer", oe.Field)
}

func TestBrokerSendStopsOnCancelledContext(t *testing.T) {
	t.Parallel()
	b, err := memory.NewBroker(&memory.Options{Buffer: 1})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := b.Send(ctx, msgs(1, 3))
	for _, e := range out {
		require.Error(t, e)
	}
	require.Empty(t, b.Deliveries())
}
