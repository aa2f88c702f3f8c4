package redis_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// TestConformance runs the sink suite against the test server: a fresh stream per fixture,
// read back with XRANGE and decoded as the consumer does. A stream keeps the order of its
// entries, so each key's order (Ordered). The permanent failure: a destination key that holds
// a plain string (WRONGTYPE). No retryable failure is offered: Redis refuses one XADD but not
// its neighbours retryably only through server-wide states (OOM under maxmemory, LOADING,
// BUSY under a running script), which a shared test server cannot be put in for one message.
// Redis streams have no deduplication id, so the dedup case is not offered either.
func TestConformance(t *testing.T) {
	t.Parallel()
	const maxBytes = 64 << 10
	conformance.RunSink(t, conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			cl := newClient(t)
			stream := newStream(t)
			wrongType := stream + "-string"
			require.NoError(t, cl.Set(context.Background(), wrongType, "not a stream", time.Hour).Err())
			sink, err := redissink.New(cl, &redissink.Options{MaxMessageBytes: maxBytes, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			var got []conformance.ReceivedMessage
			last := "-"
			return conformance.SinkFixture{
				Sink:        sink,
				Destination: stream,
				Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
					for len(got) < atLeast && ctx.Err() == nil {
						msgs, err := cl.XRange(ctx, stream, last, "+").Result()
						if err != nil {
							if ctx.Err() != nil {
								break
							}
							return nil, err
						}
						for _, m := range msgs {
							ev, _, err := redissink.DecodeEntry(stream, m.ID, m.Values)
							if err != nil {
								return nil, err
							}
							got = append(got, conformance.ReceivedMessage{EventID: ev.ID, Payload: ev.Payload, Headers: ev.Headers, Key: ev.PartitionKey})
							last = "(" + m.ID
						}
						if len(got) < atLeast {
							select {
							case <-ctx.Done():
							case <-time.After(20 * time.Millisecond):
							}
						}
					}
					return slices.Clone(got), nil
				},
				RejectPermanent: func(m *core.Message) { m.Destination = wrongType },
			}
		},
		Ordered:         true,
		MaxMessageBytes: maxBytes,
		ErrTooLarge:     redissink.ErrMessageTooLarge,
	})
}

// The options are checked field by field.
func TestNewRefusesBadOptions(t *testing.T) {
	t.Parallel()
	cl := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer cl.Close()
	for field, o := range map[string]redissink.Options{
		"MaxLen":          {MaxLen: -1},
		"MaxMessageBytes": {MaxMessageBytes: redissink.MaxMessageBytesLimit + 1},
		"Concurrency":     {Concurrency: -1},
	} {
		_, err := redissink.New(cl, &o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, field)
		require.Equal(t, field, oe.Field)
	}
	_, err := redissink.New(nil, nil)
	var oe *core.OptionError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "client", oe.Field)
}
