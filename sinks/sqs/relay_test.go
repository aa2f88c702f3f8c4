package sqs_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// TestRelayThroughFIFOQueueToInbox wires the whole path with the in-memory adapter on both
// ends: Outbox.Write -> Relay -> Sink -> SQS FIFO queue -> Consumer -> Inbox. Every event is
// applied exactly once and, per aggregate, in version order.
func TestRelayThroughFIFOQueueToInbox(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("relay")+".fifo", nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	producer, err := memory.New(nil)
	require.NoError(t, err)
	outbox, err := core.NewOutbox[*memory.Tx](ctx, producer, nil)
	require.NoError(t, err)
	const aggregates, versions = 5, 40
	for v := 1; v <= versions; v++ {
		require.NoError(t, producer.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			var evs []core.Event
			for a := 0; a < aggregates; a++ {
				evs = append(evs, core.Event{AggregateType: "order", AggregateID: fmt.Sprint(a), AggregateVersion: int64(v),
					Type: "order.updated", Payload: []byte(fmt.Sprintf(`{"a":%d,"v":%d}`, a, v))})
			}
			_, err := outbox.Write(ctx, tx, evs...)
			return err
		}))
	}
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	relay, err := core.NewRelay(producer, sink, core.StaticRouter{Default: url}, &core.RelayOptions{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(ctx) }()

	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{Concurrency: 4}, nil)
	eventually(t, "every event applied", func() bool { return cb.consumer.Stats().Applied == aggregates*versions })
	cancel()
	require.NoError(t, <-relayDone)

	last := map[string]int64{}
	for _, d := range cb.deliveries() {
		k := d.Event.AggregateID
		require.Equal(t, last[k]+1, d.Event.AggregateVersion, "aggregate %s in order", k)
		last[k] = d.Event.AggregateVersion
		require.Equal(t, 1, cb.store.Counter("applied:"+d.Event.ID))
	}
	require.Len(t, last, aggregates)
	require.Equal(t, uint64(0), cb.consumer.Stats().Stale)
}
