package nats_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/pgtest"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// BenchmarkConsumerToPostgresInbox publishes 10,000 messages (1 KiB, 64 keys, a new stream per
// run) with the sink, then consumes them with a fresh durable consumer and applies each through
// the PostgreSQL inbox (per message: horizon, version gate, inbox row, one INSERT of effect), and
// reports messages/s from the consumer's start until the last one is applied: inbox_msgs/s with
// the default options (the messages of a pull, up to MaxBatch 100, in one inbox transaction),
// unbatched_inbox_msgs/s with MaxBatch 1. The two ways are interleaved.
//
//	go test -run '^$' -bench ConsumerToPostgresInbox -benchtime 2x -count 3 ./sinks/nats/
func BenchmarkConsumerToPostgresInbox(b *testing.B) {
	const n, keys, sendBatch = 10000, 64, 500
	ctx := context.Background()
	pg := pgtest.New(b, "nats_")
	inbox, err := core.NewInbox[pgx.Tx](ctx, pg.Store, nil)
	require.NoError(b, err)
	nc := connect(b)
	js := newJS(b, nc)
	sink, err := natssink.New(nc, &natssink.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	effects := pgx.Identifier{pg.Name, "effects"}.Sanitize()
	handler := func(ctx context.Context, tx pgx.Tx, d *natssink.Delivery) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
			d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion, os.Getpid())
		return err
	}
	consumer := func(i, maxBatch int) time.Duration {
		subject := unique("bench") + ".events"
		stream := newStream(b, js, jetstream.StreamConfig{Subjects: []string{subject}})
		msgs := make([]core.Message, n)
		for j := range msgs {
			k := fmt.Sprint(j % keys)
			ev := core.Event{ID: fmt.Sprintf("%s-%d", subject, j), AggregateType: "order", AggregateID: k,
				AggregateVersion: int64(j/keys + 1), Type: "order.changed", Payload: payload}
			msgs[j] = core.Message{Record: driver.Record{Event: ev, CreatedAt: time.Now()}, Destination: subject,
				DedupID: ev.ID, GroupID: "order/" + k}
		}
		for j := 0; j < n; j += sendBatch {
			for _, err := range sink.Send(ctx, msgs[j:j+sendBatch]) {
				require.NoError(b, err)
			}
		}
		c, err := natssink.NewConsumer(js, stream.CachedInfo().Config.Name, "bench", inbox, fmt.Sprintf("bench-consumer-%d", i), handler,
			&natssink.ConsumerOptions{MaxBatch: maxBatch, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		d := pgtest.TimeRun(b, uint64(n), c.Run, func() uint64 { return c.Stats().Applied })
		st := c.Stats()
		require.Zero(b, st.Failed)
		require.Equal(b, uint64(n), st.Applied)
		return d
	}
	pgtest.ConsumerBench(b, n, consumer)
}
