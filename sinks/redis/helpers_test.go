package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

func addr(t testing.TB) string {
	t.Helper()
	return testkit.Need(t, testkit.RedisAddr)
}

// newClient returns a client of the test server, closed when the test ends.
func newClient(t testing.TB) *goredis.Client {
	t.Helper()
	cl := goredis.NewClient(&goredis.Options{Addr: addr(t)})
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

var streamSeq atomic.Int64

// newStream returns a stream key unique to this test run (the stream does not exist yet).
func newStream(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("s%d-%d-%s", time.Now().UnixNano(), streamSeq.Add(1), strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	if len(name) > 200 {
		name = name[:200]
	}
	return name
}

// readStream returns the entries of stream after id ("-" for all), decoded.
func readStream(t testing.TB, cl *goredis.Client, stream string) ([]goredis.XMessage, []core.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msgs, err := cl.XRange(ctx, stream, "-", "+").Result()
	require.NoError(t, err)
	evs := make([]core.Event, len(msgs))
	for i, m := range msgs {
		evs[i], _, err = redissink.DecodeEntry(stream, m.ID, m.Values)
		require.NoError(t, err)
	}
	return msgs, evs
}

// message builds a routed message of key k with sequence number i.
func message(stream, k string, i int) core.Message {
	ev := core.Event{
		ID: fmt.Sprintf("%s-%s-%04d", stream[:8], k, i), AggregateType: "order", AggregateID: k,
		AggregateVersion: int64(i + 1), Type: "order.updated", SchemaID: "order.v1",
		Payload: []byte(fmt.Sprintf(`{"key":%q,"n":%d}`, k, i)), Tenant: "acme",
		Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "origin": "test"},
	}
	return core.Message{
		Record:      driver.Record{Event: ev, CreatedAt: time.Date(2026, 12, 1, 6, 0, 0, 123456000, time.UTC)},
		Destination: stream, DedupID: ev.ID, GroupID: "order/" + k,
	}
}
