package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/pgtest"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// pgSchema creates a migrated outbox/inbox schema with an effects table, dropped at the end.
func pgSchema(t testing.TB) (schema string, store *postgres.Store[pgx.Tx]) {
	t.Helper()
	s := pgtest.New(t, "redis_")
	return s.Name, s.Store
}

// BenchmarkConsumerToPostgresInbox publishes 10,000 entries (1 KiB, 64 keys, a new stream per
// run) with the sink, then consumes them with a fresh consumer group and applies each through
// the PostgreSQL inbox (per entry: horizon, version gate, inbox row, one INSERT of effect), and
// reports entries/s from the consumer's start until the last one is applied: inbox_msgs/s
// with the default options (the up to 100 entries of a read in one inbox transaction, one
// XACK), unbatched_inbox_msgs/s with MaxBatch 1 (one transaction and one XACK per entry). The
// two ways are interleaved.
//
//	go test -run '^$' -bench ConsumerToPostgresInbox -benchtime 2x -count 3 ./sinks/redis/
func BenchmarkConsumerToPostgresInbox(b *testing.B) {
	const n, keys, sendBatch = 10000, 64, 500
	ctx := context.Background()
	schema, store := pgSchema(b)
	inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
	require.NoError(b, err)
	cl := newClient(b)
	sink, err := redissink.New(cl, &redissink.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	handler := func(ctx context.Context, tx pgx.Tx, d *redissink.Delivery) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
			d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion, os.Getpid())
		return err
	}
	consumer := func(i, maxBatch int) time.Duration {
		stream := newStream(b)
		msgs := make([]core.Message, n)
		for j := range msgs {
			k := fmt.Sprint(j % keys)
			ev := core.Event{ID: fmt.Sprintf("%s-%d", stream, j), AggregateType: "order", AggregateID: k,
				AggregateVersion: int64(j/keys + 1), Type: "order.changed", Payload: payload}
			msgs[j] = core.Message{Record: driver.Record{Event: ev, CreatedAt: time.Now()}, Destination: stream,
				DedupID: ev.ID, GroupID: "order/" + k}
		}
		for j := 0; j < n; j += sendBatch {
			for _, err := range sink.Send(ctx, msgs[j:j+sendBatch]) {
				require.NoError(b, err)
			}
		}
		b.Cleanup(func() { _ = cl.Del(context.Background(), stream).Err() })
		c, err := redissink.NewConsumer(cl, stream, "g", inbox, fmt.Sprintf("bench-consumer-%d", i), handler,
			&redissink.ConsumerOptions{Name: "c", MaxBatch: maxBatch, Block: 50 * time.Millisecond,
				Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		d := pgtest.TimeRun(b, uint64(n), c.Run, func() uint64 { return c.Stats().Applied })
		st := c.Stats()
		require.Zero(b, st.Failed)
		require.Equal(b, uint64(n), st.Applied)
		return d
	}
	pgtest.ConsumerBench(b, n, consumer)
}
