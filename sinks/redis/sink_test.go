package redis_test

import (
	"context"
	"log/slog"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// MaxLen trims the stream approximately (XADD MAXLEN ~): it holds at least MaxLen entries and
// far fewer than were written.
func TestMaxLenTrims(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream := newStream(t)
	sink, err := redissink.New(cl, &redissink.Options{MaxLen: 10, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	var msgs []core.Message
	for i := range 500 {
		msgs = append(msgs, message(stream, "a", i))
	}
	for _, err := range sink.Send(context.Background(), msgs) {
		require.NoError(t, err)
	}
	n, err := cl.XLen(context.Background(), stream).Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(10))
	require.Less(t, n, int64(300), "MAXLEN ~ 10 left %d of 500 entries", n)
	_, evs := readStream(t, cl, stream)
	require.Equal(t, msgs[499].ID, evs[len(evs)-1].ID, "the newest entries are kept")
}

// Without the option the stream keeps every entry; fields and payload round-trip, nil payload
// as an empty field.
func TestEntryFields(t *testing.T) {
	t.Parallel()
	cl := newClient(t)
	stream := newStream(t)
	sink, err := redissink.New(cl, &redissink.Options{ContentType: "application/json"})
	require.NoError(t, err)
	m := message(stream, "a", 0)
	m.Payload = nil
	for _, err := range sink.Send(context.Background(), []core.Message{m}) {
		require.NoError(t, err)
	}
	raw, evs := readStream(t, cl, stream)
	require.Len(t, raw, 1)
	v := raw[0].Values
	require.Equal(t, "", v[redissink.FieldPayload])
	require.Equal(t, "1.0", v[redissink.FieldSpecVersion])
	require.Equal(t, m.ID, v[redissink.FieldID])
	require.Equal(t, "order.updated", v[redissink.FieldType])
	require.Equal(t, "application/json", v[redissink.FieldContentType])
	require.Equal(t, "outboxkit", v["ce_source"])
	require.Equal(t, "order/a", v["ce_partitionkey"])
	require.Equal(t, "test", v[redissink.FieldHeaderPrefix+"origin"])
	require.Equal(t, "2026-12-01T06:00:00.123456Z", v["ce_time"])
	require.Equal(t, m.ID, evs[0].ID)
	require.Equal(t, "order/a", evs[0].PartitionKey)
}

// An unreachable server fails every message retryably (never permanent: the relay retries).
func TestUnreachableIsRetryable(t *testing.T) {
	t.Parallel()
	cl := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer cl.Close()
	sink, err := redissink.New(cl, &redissink.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	msgs := []core.Message{message("orders-x", "a", 0), message("orders-x", "a", 1), message("orders-y", "b", 0)}
	res := sink.Send(context.Background(), msgs)
	require.Len(t, res, 3)
	for _, err := range res {
		require.Error(t, err)
		require.False(t, core.IsPermanent(err), "%v", err)
	}
	require.NoError(t, core.CheckOutcomes(msgs, res))
}
