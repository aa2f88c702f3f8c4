package rabbitmq_test

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
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// pgSchema creates a migrated outbox/inbox schema with an effects table, dropped at the end
// (sinks/kafka's, reduced to what the benchmark needs).
func pgSchema(t testing.TB) (schema string, store *postgres.Store[pgx.Tx]) {
	t.Helper()
	s := pgtest.New(t, "rabbitmq_")
	return s.Name, s.Store
}

const benchMessages, benchKeys, benchSend = 10000, 64, 500

// BenchmarkConsumerToPostgresInbox publishes 10,000 messages (1 KiB, 64 keys) with the sink to a
// new queue per way and iteration, then consumes them and applies each through the PostgreSQL
// inbox (per message: horizon, version gate, inbox row, one INSERT of effect), and reports
// messages/s from the consumer's start (dial included) until the last one is applied:
// inbox_msgs/s with the default options (Prefetch 32, so up to 32 received deliveries per
// inbox transaction), unbatched_inbox_msgs/s with MaxBatch 1 (one transaction per message).
// The two ways are interleaved.
//
//	go test -run '^$' -bench ConsumerToPostgres -benchtime 2x -count 3 ./sinks/rabbitmq/
func BenchmarkConsumerToPostgresInbox(b *testing.B) {
	ctx := context.Background()
	schema, store := pgSchema(b)
	inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
	require.NoError(b, err)
	quiet := slog.New(slog.DiscardHandler)
	sink := newSink(b, &rabbitmq.Options{Logger: quiet})
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	effects := pgx.Identifier{schema, "effects"}.Sanitize()
	consumer := func(i, maxBatch int) time.Duration {
		q := newQueue(b, nil)
		msgs := make([]core.Message, benchMessages)
		for j := range msgs {
			k := fmt.Sprint(j % benchKeys)
			ev := core.Event{ID: fmt.Sprintf("%d-%d-%d", i, time.Now().UnixNano(), j), AggregateType: "order", AggregateID: k,
				AggregateVersion: int64(j/benchKeys + 1), Type: "order.changed", Payload: payload}
			msgs[j] = core.Message{Record: driver.Record{Event: ev, CreatedAt: time.Now()}, Destination: q, DedupID: ev.ID, GroupID: "order/" + k}
		}
		for j := 0; j < len(msgs); j += benchSend {
			for _, err := range sink.Send(ctx, msgs[j:min(j+benchSend, len(msgs))]) {
				require.NoError(b, err)
			}
		}
		c, err := rabbitmq.NewConsumer(brokerURL(b), q, inbox, fmt.Sprintf("bench-%d-%d", i, time.Now().UnixNano()),
			func(ctx context.Context, tx pgx.Tx, d *rabbitmq.Delivery) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
					d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion, os.Getpid())
				return err
			}, &rabbitmq.ConsumerOptions{MaxBatch: maxBatch, Logger: quiet})
		require.NoError(b, err)
		d := pgtest.TimeRun(b, uint64(benchMessages), c.Run, func() uint64 { return c.Stats().Applied })
		st := c.Stats()
		require.Zero(b, st.Failed+st.DeadLettered+st.Stale+st.Duplicate, "%+v", st)
		return d
	}
	pgtest.ConsumerBench(b, benchMessages, consumer)
}
