package kafka

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// TestTxGroupHeadersTravel: the transaction group headers that Outbox.Write adds travel as
// record headers (HeaderPrefix + key) and decode back unchanged.
func TestTxGroupHeadersTravel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, store, nil)
	require.NoError(t, err)
	gctx, err := core.WithTxGroup(ctx)
	require.NoError(t, err)
	var evs []core.Event
	require.NoError(t, store.InTx(gctx, func(ctx context.Context, tx *memory.Tx) error {
		for _, id := range []string{"1", "2"} {
			got, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: id, Type: "t"})
			if err != nil {
				return err
			}
			evs = append(evs, got...)
		}
		return nil
	}))
	for i, ev := range evs {
		m := &core.Message{Record: driver.Record{Event: ev}, GroupID: ev.PartitionKey}
		hs := encodeHeaders(m, "outboxkit", "")
		require.Contains(t, hs, kgo.RecordHeader{Key: HeaderPrefix + core.HeaderTxID, Value: []byte(evs[0].Headers[core.HeaderTxID])})
		got, _, err := decodeRecord(&kgo.Record{Key: []byte(ev.PartitionKey), Headers: hs})
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(i), got.Headers[core.HeaderTxIndex])
		require.NotContains(t, got.Headers, core.HeaderTxCount)
		require.Equal(t, ev.Headers, got.Headers)
	}
}
