package kafka_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

func brokers(t testing.TB) []string {
	t.Helper()
	return strings.Split(testkit.Need(t, testkit.KafkaBrokers), ",")
}

// newClient returns a client of the test cluster, closed when the test ends.
func newClient(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers(t)...)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

var topicSeq atomic.Int64

// newTopic creates a topic with a name unique to this test run.
func newTopic(t testing.TB, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%d-%s", time.Now().UnixNano(), topicSeq.Add(1), strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 200 {
		name = name[:200]
	}
	createTopic(t, name, partitions)
	return name
}

func createTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	adm := kadm.NewClient(newClient(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.CreateTopic(ctx, partitions, 1, nil, name)
	require.NoError(t, err)
	require.NoError(t, res.Err)
}

// consume reads n records of topic from the start with a fresh client (no group).
func consume(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := newClient(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "got %d of %d records", len(out), n)
		fs.EachError(func(_ string, _ int32, err error) { require.NoError(t, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// message builds a routed message of key k with sequence number i.
func message(topic, k string, i int) core.Message {
	ev := core.Event{
		ID: fmt.Sprintf("%s-%s-%04d", topic[:8], k, i), AggregateType: "order", AggregateID: k,
		AggregateVersion: int64(i + 1), Type: "order.updated", SchemaID: "order.v1",
		Payload: []byte(fmt.Sprintf(`{"key":%q,"n":%d}`, k, i)), Tenant: "acme",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "origin": "test"},
	}
	return core.Message{
		Record:      driver.Record{Event: ev, CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)},
		Destination: topic, DedupID: ev.ID, GroupID: "order/" + k,
	}
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}
