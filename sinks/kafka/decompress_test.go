package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// A batch that would decompress beyond MaxDecompressedBytes (8 MiB of zeros, zstd: a few
// hundred bytes on the wire) stops Run with a *DecompressError before anything of it is
// applied: the records before it are applied and committed, the group's offset stays at the
// batch, and the consumer does not stall in silence on the partition.
func TestConsumerRefusesDecompressionBomb(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	e := newConsumerEnv(t)
	produce(t, topic, 1, 1, 3) // two records of key k0

	const group = "bomb"
	c, err := kafka.NewConsumer(group, []string{topic}, e.inbox, "kafka-test", func(ctx context.Context, tx *memory.Tx, d *kafka.Delivery) error {
		e.applied.add(d.Event.PartitionKey, d.Event.ID, d.Event.AggregateVersion)
		return tx.Incr("applied:" + d.Event.ID)
	}, &kafka.ConsumerOptions{MaxDecompressedBytes: 1 << 20, ClientOptions: []kgo.Opt{kgo.SeedBrokers(brokers(t)...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	eventually(t, "the two records applied", func() bool { return e.applied.count() == 2 })

	bomb := newClient(t, kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.ProducerBatchMaxBytes(16<<20))
	r := &kgo.Record{Topic: topic, Key: []byte("k0"), Value: bytes.Repeat([]byte{0}, 8<<20)}
	require.NoError(t, bomb.ProduceSync(ctx, r).FirstErr())

	var runErr error
	select {
	case runErr = <-done:
	case <-ctx.Done():
		t.Fatal("Run did not stop on the oversized batch")
	}
	var de *kafka.DecompressError
	require.ErrorAs(t, runErr, &de)
	require.ErrorIs(t, runErr, kafka.ErrDecompressedTooLarge)
	require.ErrorIs(t, runErr, kgo.ErrMaxDecompress)
	require.Equal(t, topic, de.Topic)
	require.Equal(t, r.Offset, de.Offset)
	require.Equal(t, r.Offset+1, de.NextOffset)
	require.Contains(t, runErr.Error(), "raise MaxDecompressedBytes or skip the batch")
	require.Equal(t, 2, e.applied.count(), "nothing of the batch applied")

	offs, err := kadm.NewClient(newClient(t)).FetchOffsets(context.Background(), group)
	require.NoError(t, err)
	got, ok := offs.Lookup(topic, 0)
	require.True(t, ok)
	require.Equal(t, r.Offset, got.At, "committed up to the batch, not past it")
	require.False(t, errors.Is(runErr, context.DeadlineExceeded))
}
