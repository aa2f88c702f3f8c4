package kafka_test

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/kafka"
)

func TestSinkKeepsEachKeyInOnePartitionInOrder(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 6)
	sink, err := kafka.New(newClient(t, kgo.ProducerBatchCompression(kgo.ZstdCompression())), &kafka.Options{ContentType: "application/json"})
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 20; i++ {
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			msgs = append(msgs, message(topic, k, i))
		}
	}
	out := sink.Send(context.Background(), msgs)
	require.Len(t, out, len(msgs))
	for i, err := range out {
		require.NoError(t, err, "message %d", i)
	}
	recs := consume(t, topic, len(msgs))
	partOf := map[string]int32{}
	next := map[string]int{}
	for _, r := range recs {
		k := string(r.Key)
		if p, ok := partOf[k]; ok {
			require.Equal(t, p, r.Partition, "key %s in two partitions", k)
		}
		partOf[k] = r.Partition
		want := message(topic, strings.TrimPrefix(k, "order/"), next[k])
		require.Equal(t, want.ID, header(r, kafka.HeaderID), "key %s out of order", k)
		require.Equal(t, want.Payload, r.Value)
		next[k]++
	}
	r := recs[0]
	require.Equal(t, "1.0", header(r, kafka.HeaderSpecVersion))
	require.Equal(t, "order.updated", header(r, kafka.HeaderType))
	require.Equal(t, "2026-12-01T06:00:00.123456Z", header(r, kafka.HeaderTime))
	require.Equal(t, "application/json", header(r, kafka.HeaderContentType))
	require.Equal(t, "test", header(r, kafka.HeaderPrefix+"origin"))
}

func TestNewRefusesNonIdempotentClient(t *testing.T) {
	t.Parallel()
	_, err := kafka.New(nil, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.DisableIdempotentWrite())
	require.NoError(t, err)
	defer cl.Close()
	_, err = kafka.New(cl, nil)
	var oe *core.OptionError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.Equal(t, "client", oe.Field)
	cl2, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer cl2.Close()
	_, err = kafka.New(cl2, &kafka.Options{Concurrency: -1})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}

// TestSinkBrokerTooLargeIsRetryable: a topic whose max.message.bytes is below the client's
// batch size refuses the whole batch holding a large record: every record of it gets a
// retryable ErrMessageTooLarge (the small ones must not be parked for their neighbour).
func TestSinkBrokerTooLargeIsRetryable(t *testing.T) {
	t.Parallel()
	topic := newTopic(t, 1)
	adm := kadm.NewClient(newClient(t))
	_, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("2048")}}, topic)
	require.NoError(t, err)
	sink, err := kafka.New(newClient(t), nil)
	require.NoError(t, err)
	big := message(topic, "a", 0)
	big.Payload = make([]byte, 8192)
	_, _ = crand.Read(big.Payload) // incompressible
	msgs := []core.Message{big, message(topic, "a", 1)}
	out := sink.Send(context.Background(), msgs)
	require.ErrorIs(t, out[0], kafka.ErrMessageTooLarge)
	require.False(t, core.IsPermanent(out[0]))
	require.Error(t, out[1])
	require.False(t, core.IsPermanent(out[1]))
}

// Concurrent Sends (a relay's InFlight loops) share produce requests: while one round of
// requests is at the brokers, the Sends that arrive meanwhile wait and go out together in the
// next round, instead of queueing one request each behind it on the brokers' connections,
// which answer in order. 8 Sends started 5 ms apart against a broker that answers each produce
// request after 60 ms: at most 2 rounds, so at most 2 produce requests (one partition, one
// leader), and every record acknowledged in order.
func TestSinkConcurrentSendsShareRounds(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	var produces atomic.Int64
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produces.Add(1)
		c.SleepControl(func() { time.Sleep(60 * time.Millisecond) })
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	sink, err := kafka.New(cl, nil)
	require.NoError(t, err)
	const topic = "sink-rounds"
	_, err = kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, nil, topic)
	require.NoError(t, err)
	require.Empty(t, sink.Send(t.Context(), []core.Message{message(topic, "warm", 0)})[0]) // metadata, producer id
	produces.Store(0)

	var wg sync.WaitGroup
	outs := make([][]error, 8)
	for i := range outs {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 5 * time.Millisecond)
			outs[i] = sink.Send(t.Context(), []core.Message{message(topic, fmt.Sprint("k", i), 0), message(topic, fmt.Sprint("k", i), 1)})
		})
	}
	wg.Wait()
	for i, out := range outs {
		require.Len(t, out, 2)
		for j, err := range out {
			require.NoError(t, err, "send %d, message %d", i, j)
		}
	}
	require.LessOrEqual(t, produces.Load(), int64(2), "produce requests for 8 concurrent Sends")
}

// A Send whose context ends while its records wait for the round in flight gives them up at
// once (retryable errors), without waiting for that round.
func TestSinkQueuedSendGivesUpOnCancel(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	const topic = "sink-queued"
	_, err = kadm.NewClient(cl).CreateTopic(t.Context(), 1, 1, nil, topic)
	require.NoError(t, err)
	sink, err := kafka.New(cl, nil)
	require.NoError(t, err)
	require.Empty(t, sink.Send(t.Context(), []core.Message{message(topic, "warm", 0)})[0])
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(500 * time.Millisecond) })
		return nil, nil, false
	})

	first := make(chan []error, 1)
	go func() { first <- sink.Send(t.Context(), []core.Message{message(topic, "a", 0)}) }()
	time.Sleep(50 * time.Millisecond) // the first round is at the broker
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	out := sink.Send(ctx, []core.Message{message(topic, "b", 0)})
	require.Less(t, time.Since(began), 300*time.Millisecond, "a queued Send returned only after the round in flight")
	require.Len(t, out, 1)
	require.ErrorIs(t, out[0], context.DeadlineExceeded)
	require.False(t, core.IsPermanent(out[0]))
	require.NoError(t, (<-first)[0])
}
