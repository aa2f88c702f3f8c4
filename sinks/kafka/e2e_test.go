package kafka_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/pgtest"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/kafka"
)

// e2eEnv names the environment variable that makes the test binary a relay or consumer process.
const e2eEnv = "OUTBOXKIT_KAFKA_E2E_CHILD"

func TestMain(m *testing.M) { testkit.KillMain(m, e2eEnv, e2eChild) }

// e2eSpec is what a child process of the end-to-end test runs.
type e2eSpec struct {
	Role    string // "relay" or "consumer"
	DSN     string
	Schema  string
	Topic   string
	Brokers []string
}

// e2eChild runs a relay or a consumer process until it is killed.
func e2eChild(raw string) error {
	var s e2eSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgtest.Pool(ctx, s.DSN, s.Schema)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Options{Schema: s.Schema})
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	switch s.Role {
	case "relay":
		cl, err := kgo.NewClient(kgo.SeedBrokers(s.Brokers...))
		if err != nil {
			return err
		}
		defer cl.Close()
		sink, err := kafka.New(cl, &kafka.Options{Logger: quiet})
		if err != nil {
			return err
		}
		// Hold each batch for a moment after Kafka acknowledged it and before the relay marks
		// it, so that a SIGKILL likely falls between the two: the next relay resends.
		held := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			out := sink.Send(ctx, msgs)
			time.Sleep(20 * time.Millisecond)
			return out
		})
		relay, err := core.NewRelay(store, held, core.StaticRouter{Default: s.Topic}, &core.RelayOptions{
			LeaseTTL: time.Second, BatchSize: 25, PollInterval: 20 * time.Millisecond, Logger: quiet,
		})
		if err != nil {
			return err
		}
		return relay.Run(ctx)
	case "consumer":
		inbox, err := core.NewInbox[pgx.Tx](ctx, store, nil)
		if err != nil {
			return err
		}
		effects := pgx.Identifier{s.Schema, "effects"}.Sanitize()
		c, err := kafka.NewConsumer(s.Topic+"-group", []string{s.Topic}, inbox, "e2e",
			func(ctx context.Context, tx pgx.Tx, d *kafka.Delivery) error {
				_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (id, key, version, pid) VALUES ($1, $2, $3, $4)",
					d.Event.ID, d.Event.AggregateID, d.Event.AggregateVersion, os.Getpid())
				return err
			}, &kafka.ConsumerOptions{
				ClientOptions: []kgo.Opt{kgo.SeedBrokers(s.Brokers...), kgo.FetchMaxWait(200 * time.Millisecond),
					// The broker's minimum: a killed member's partitions move on within 6 s.
					kgo.SessionTimeout(6 * time.Second), kgo.HeartbeatInterval(500 * time.Millisecond)},
				MaxPollRecords: 50, Logger: quiet,
			})
		if err != nil {
			return err
		}
		return c.Run(ctx)
	}
	return fmt.Errorf("unknown role %q", s.Role)
}

// pgSchema creates a migrated outbox/inbox schema with an effects table, dropped at the end.
func pgSchema(t testing.TB) (dsn, schema string, pool *pgxpool.Pool, store *postgres.Store[pgx.Tx]) {
	t.Helper()
	s := pgtest.New(t, "kafka_")
	return s.DSN, s.Name, s.Pool, s.Store
}

// TestEndToEndPostgresRelayKafkaInbox: a producer commits events in PostgreSQL; relay processes
// publish them to Kafka and are SIGKILLed mid-batch twice; a consumer group of two processes
// (the second joins mid-stream, then the first is SIGKILLed) applies them into a PostgreSQL inbox.
// Every event's effect is applied exactly once, in version order per key.
func TestEndToEndPostgresRelayKafkaInbox(t *testing.T) {
	t.Parallel()
	bs := brokers(t)
	ctx := t.Context()
	dsn, schema, pool, store := pgSchema(t)
	ob, err := core.NewOutbox(ctx, store, nil)
	require.NoError(t, err)
	topic := newTopic(t, 6)
	createTopic(t, topic+".dlt", 1)

	const keys, perKey = 12, 40
	spec := func(role string) string {
		b, err := json.Marshal(e2eSpec{Role: role, DSN: dsn, Schema: schema, Topic: topic, Brokers: bs})
		require.NoError(t, err)
		return string(b)
	}
	start := func(role string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), e2eEnv+"="+spec(role))
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			_ = cmd.Wait()
		})
		return cmd
	}
	produced := make(chan error, 1)
	go func() {
		for v := 1; v <= perKey; v++ {
			for k := 0; k < keys; k++ {
				err := store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: fmt.Sprint("k", k),
						AggregateVersion: int64(v), Type: "order.changed", Payload: []byte(fmt.Sprintf(`{"v":%d}`, v))})
					return err
				})
				if err != nil {
					produced <- err
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		produced <- nil
	}()
	adm := kadm.NewClient(newClient(t))
	records := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}
	effects := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM effects").Scan(&n))
		return n
	}

	consumerA := start("consumer")
	for kill := 0; kill < 2; kill++ {
		before := records()
		relay := start("relay")
		eventually(t, "the relay published", func() bool { return records() > before })
		time.Sleep(time.Duration(rand.IntN(15)) * time.Millisecond) // most likely inside the hold
		require.NoError(t, relay.Process.Signal(syscall.SIGKILL))
		_ = relay.Wait()
		if kill == 0 {
			eventually(t, "consumer A applied some", func() bool { return effects() > 0 })
			start("consumer") // B joins: a rebalance mid-stream
		}
	}
	start("relay")
	eventually(t, "a third of the events applied", func() bool { return effects() > keys*perKey/3 })
	// A is killed: what it applied but had not committed yet is consumed again by B after
	// A's session expires, and the inbox makes it a no-op.
	require.NoError(t, consumerA.Process.Signal(syscall.SIGKILL))
	_ = consumerA.Wait()
	require.NoError(t, <-produced)
	eventually(t, "every event applied", func() bool { return effects() >= keys*perKey })
	time.Sleep(300 * time.Millisecond) // let a wrong extra effect show

	rows, err := pool.Query(ctx, "SELECT id, key, version, pid FROM effects ORDER BY seq")
	require.NoError(t, err)
	seen := map[string]bool{}
	next := map[string]int64{}
	pids := map[int]int{}
	for rows.Next() {
		var id, key string
		var v int64
		var pid int
		require.NoError(t, rows.Scan(&id, &key, &v, &pid))
		require.False(t, seen[id], "event %s applied twice", id)
		seen[id] = true
		require.Equal(t, next[key]+1, v, "key %s applied out of order", key)
		next[key] = v
		pids[pid]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, seen, keys*perKey)
	require.Len(t, pids, 2, "both consumer processes applied events: %v", pids)
	t.Logf("%d events, %d records in Kafka (relay resends after kills), effects per consumer process %v",
		keys*perKey, records(), pids)
}
