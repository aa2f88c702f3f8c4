package reliability_test

// Consumer kill points of the crash matrix for the RabbitMQ, NATS JetStream and Redis Streams
// consumers and the webhook receiver: consumer processes (this test binary run again, see
// TestMain) killed in the handler with the inbox transaction open, or as an inbox transaction
// returns committed, before the broker's acknowledgement (basic.ack, the JetStream ack, XACK)
// or the webhook's 2xx answer.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
	natssink "github.com/outboxkit/outbox/sinks/nats"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
	redissink "github.com/outboxkit/outbox/sinks/redis"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// pointBeforeAck is the kill point between a consumer's two commits: SIGKILL as the Nth inbox
// transaction returns committed (commitSignal), before the consumer acknowledges its messages
// to the broker or answers the webhook request. Every consumer here acknowledges a batch only
// after its inbox transaction returned, so nothing of that transaction is acknowledged then.
// The other kill point is pointBeforeCommit: SIGKILL in the Nth handler call.
const pointBeforeAck = "before_ack"

// crashAckWait is the NATS consumer processes' ack wait: a killed process's messages are
// delivered again after it.
const crashAckWait = 2 * time.Second

// crashWebhookSecret signs the webhook requests of the crash tests.
const crashWebhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// crashHandler is a consumer process's handler: it inserts one effects row per message in the
// inbox transaction, and at pointBeforeCommit SIGKILLs the process in its Nth call, that
// transaction open.
func crashHandler[D any](sp crashSpec, event func(*D) *core.Event) func(ctx context.Context, tx *sql.Tx, d *D) error {
	var handled atomic.Int64
	return func(ctx context.Context, tx *sql.Tx, d *D) error {
		ev := event(d)
		_, err := tx.ExecContext(ctx, "INSERT INTO effects (id, key, version) VALUES (?, ?, ?)",
			ev.ID, ev.PartitionKey, ev.AggregateVersion)
		if sp.Point == pointBeforeCommit && handled.Add(1) == int64(sp.N) {
			testkit.SignalSelf(syscall.SIGKILL)
		}
		return err
	}
}

// logStats appends, every 50 ms, a "stats" line of what the consumer process did so far
// (consumerStats reads the last one after the kill): received, applied, duplicate, failed,
// acknowledged (or what the consumer counts in their place).
func logStats(path string, stats func() [5]uint64) error {
	logf, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	go func() {
		for range time.Tick(50 * time.Millisecond) {
			st := stats()
			_, _ = fmt.Fprintf(logf, "stats %d %d %d %d %d\n", st[0], st[1], st[2], st[3], st[4])
		}
	}()
	return nil
}

// brokerConsumerChild runs a RabbitMQ, NATS or Redis consumer process, or a webhook receiver
// process, until it is killed: its inbox and its effects table are in the SQLite file
// sp.DB.Name. Small batches make each kill cut into the middle of the stream.
func brokerConsumerChild(ctx context.Context, sp crashSpec) error {
	h, err := sqlite.OpenDB(ctx, sp.DB.Name)
	if err != nil {
		return err
	}
	s, err := sqlite.New(h, &sqlite.Options{Logger: quiet})
	if err != nil {
		return err
	}
	var store driver.InboxStore[*sql.Tx] = s
	switch sp.Point {
	case pointNone, pointBeforeCommit:
	case pointBeforeAck:
		store = &commitSignal{Store: s, n: int64(sp.N)}
	default:
		return fmt.Errorf("unknown kill point %q", sp.Point)
	}
	var opts *core.InboxOptions
	if sp.Broker == "nats" {
		// The messages a killed NATS consumer process held come back only after the ack
		// wait, while the next process is handed the ones behind them at once: per key,
		// order holds across the kill only through the version gate, with gaps rejected
		// (under the default GapAllow the later version applies and the earlier one is
		// Stale, its effect never applied: seen here as "lost 1, first-delivery order
		// breaks 1"). Every key of the test starts at version 1.
		opts = &core.InboxOptions{Gap: core.GapReject, FirstVersion: 1}
	}
	inbox, err := core.NewInbox(ctx, store, opts)
	if err != nil {
		return err
	}
	switch sp.Broker {
	case "rabbitmq":
		c, err := rabbitmq.NewConsumer(sp.Addr, sp.Dest, inbox, "crash",
			crashHandler(sp, func(d *rabbitmq.Delivery) *core.Event { return &d.Event }),
			&rabbitmq.ConsumerOptions{Prefetch: 10, MaxBatch: 5, Logger: quiet})
		if err != nil {
			return err
		}
		if err := logStats(sp.Log, func() [5]uint64 {
			st := c.Stats()
			return [5]uint64{st.Received, st.Applied, st.Duplicate, st.Failed, st.Released}
		}); err != nil {
			return err
		}
		return c.Run(ctx)
	case "nats":
		nc, err := nats.Connect(sp.Addr, nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		c, err := natssink.NewConsumer(js, sp.Dest, "crash", inbox, "crash",
			crashHandler(sp, func(d *natssink.Delivery) *core.Event { return &d.Event }),
			&natssink.ConsumerOptions{AckWait: crashAckWait, MaxBatch: 5, MaxDeliver: 50, FetchWait: 200 * time.Millisecond, Logger: quiet})
		if err != nil {
			return err
		}
		if err := logStats(sp.Log, func() [5]uint64 {
			st := c.Stats()
			return [5]uint64{st.Received, st.Applied, st.Duplicate, st.Failed, st.AckFailed}
		}); err != nil {
			return err
		}
		return c.Run(ctx)
	case "redis":
		// Every process is the group's consumer "crash": the next one reads the pending
		// entries the killed one left at once (own pending re-read), not after MinIdle.
		client := goredis.NewClient(&goredis.Options{Addr: sp.Addr})
		c, err := redissink.NewConsumer(client, sp.Dest, "crash-g", inbox, "crash",
			crashHandler(sp, func(d *redissink.Delivery) *core.Event { return &d.Event }),
			&redissink.ConsumerOptions{Name: "crash", Count: 10, MaxBatch: 5, Block: 200 * time.Millisecond, Logger: quiet})
		if err != nil {
			return err
		}
		if err := logStats(sp.Log, func() [5]uint64 {
			st := c.Stats()
			return [5]uint64{st.Received, st.Applied, st.Duplicate, st.Failed, st.Acked}
		}); err != nil {
			return err
		}
		return c.Run(ctx)
	case "webhook":
		rc, err := webhook.NewHandler(inbox, "crash",
			crashHandler(sp, func(d *webhook.Delivery) *core.Event { return &d.Event }),
			&webhook.HandlerOptions{Secrets: []string{crashWebhookSecret}, Logger: quiet})
		if err != nil {
			return err
		}
		if err := logStats(sp.Log, func() [5]uint64 {
			st := rc.Stats()
			return [5]uint64{st.Applied + st.Duplicate + st.Stale + st.Refused + st.Failed, st.Applied, st.Duplicate,
				st.Refused + st.Failed, st.Applied + st.Duplicate + st.Stale}
		}); err != nil {
			return err
		}
		l, err := net.Listen("tcp", sp.Addr)
		if err != nil {
			return err
		}
		return http.Serve(l, rc)
	}
	return fmt.Errorf("unknown consumer %q", sp.Broker)
}

// brokerCase is one broker of TestBrokerConsumerCrash: its sink, destination and child spec,
// how to wait until everything was acknowledged (settle) and a last check once every process
// ended (acked).
type brokerCase struct {
	name   string
	sink   core.Sink
	dest   string
	spec   crashSpec
	settle func(ctx context.Context) bool
	acked  func(ctx context.Context) error
}

// rabbitCase: a durable queue of its own on the shared RabbitMQ; the relay publishes to it
// through the default exchange.
func rabbitCase(t *testing.T) brokerCase {
	url := testkit.Need(t, testkit.RabbitMQURL)
	conn, err := amqp.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := randomName("okc-")
	_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	sink, err := rabbitmq.New(url, &rabbitmq.Options{Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	ready := func() (int, error) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return q.Messages, err
	}
	return brokerCase{
		name: "rabbitmq", sink: sink, dest: queue,
		spec: crashSpec{Broker: "rabbitmq", Addr: url, Dest: queue},
		settle: func(ctx context.Context) bool {
			// Nothing left ready; the redelivered messages of the kill came back long ago
			// (the broker requeues a closed connection's unacknowledged messages at once).
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
				if n, err := ready(); err == nil && n == 0 {
					time.Sleep(time.Second) // the last batch's acks, its last stats line
					return true
				}
			}
			return false
		},
		acked: func(ctx context.Context) error {
			// Every process is dead now: a message any of them left unacknowledged is back
			// in the queue, ready.
			time.Sleep(time.Second)
			n, err := ready()
			if err == nil && n != 0 {
				err = fmt.Errorf("%d messages never acknowledged", n)
			}
			return err
		},
	}
}

// natsCase: a stream of its own on the shared NATS server, read through the durable pull
// consumer "crash".
func natsCase(t *testing.T) brokerCase {
	url := testkit.Need(t, testkit.NATSURL)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	name := randomName("okc")
	subject := name + ".events"
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	sink, err := natssink.New(nc, &natssink.Options{Logger: quiet})
	require.NoError(t, err)
	drained := func(ctx context.Context) error {
		c, err := js.Consumer(ctx, name, "crash")
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("%d messages not delivered, %d not acknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	}
	return brokerCase{
		name: "nats", sink: sink, dest: subject,
		spec: crashSpec{Broker: "nats", Addr: url, Dest: name},
		settle: func(ctx context.Context) bool {
			// The killed process's messages come back after the ack wait and are
			// acknowledged as duplicates.
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
				if drained(ctx) == nil {
					time.Sleep(200 * time.Millisecond) // its last stats line
					return true
				}
			}
			return false
		},
		acked: drained,
	}
}

// redisCase: a stream of its own on the shared Redis, read in the group "crash-g".
func redisCase(t *testing.T) brokerCase {
	addr := testkit.Need(t, testkit.RedisAddr)
	client := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() { _ = client.Close() })
	stream := randomName("okc-")
	t.Cleanup(func() { _ = client.Del(context.Background(), stream).Err() })
	sink, err := redissink.New(client, &redissink.Options{Logger: quiet})
	require.NoError(t, err)
	drained := func(ctx context.Context) error {
		groups, err := client.XInfoGroups(ctx, stream).Result()
		if err != nil {
			return err
		}
		for _, g := range groups {
			if g.Name == "crash-g" {
				if g.Pending != 0 || g.Lag != 0 {
					return fmt.Errorf("%d entries not acknowledged, %d not read", g.Pending, g.Lag)
				}
				return nil
			}
		}
		return errors.New("no group crash-g")
	}
	return brokerCase{
		name: "redis", sink: sink, dest: stream,
		spec: crashSpec{Broker: "redis", Addr: addr, Dest: stream},
		settle: func(ctx context.Context) bool {
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
				if drained(ctx) == nil {
					time.Sleep(200 * time.Millisecond) // its last stats line
					return true
				}
			}
			return false
		},
		acked: drained,
	}
}

// TestBrokerConsumerCrash kills RabbitMQ, NATS JetStream and Redis Streams consumer processes
// at their kill points: in the handler with the inbox transaction open (pointBeforeCommit),
// and as an inbox transaction returns committed, before the broker acknowledgement of its
// messages (pointBeforeAck). Each run publishes events through a relay and the broker's sink,
// runs a consumer process to its kill point, then one that must apply everything
// (consumerCrashRun, as TestConsumerCrash); the check, over every run: each committed event's
// effect applied exactly once (lost = 0, no second apply of a redelivered message: the
// inbox), first applies in version order per key, the messages of a kill before the ack seen
// again by the next process as duplicates, and at the end every message acknowledged (none
// ready, pending or unacknowledged in the broker). OUTBOXKIT_CRASH_RUNS=N runs each case N
// times (default 2).
func TestBrokerConsumerCrash(t *testing.T) {
	t.Parallel()
	runs := crashRuns(t)
	type crashCase struct {
		bc    brokerCase
		point string
	}
	var cases []crashCase
	for _, mk := range []func(*testing.T) brokerCase{rabbitCase, natsCase, redisCase} {
		for _, point := range []string{pointBeforeCommit, pointBeforeAck} {
			cases = append(cases, crashCase{mk(t), point})
		}
	}
	killAt := map[string]func(run, events int) int{
		pointBeforeCommit: func(run, events int) int { return 1 + run%3 + events/10 }, // handler call
		pointBeforeAck:    func(run, events int) int { return 2 + run%3 + events/20 }, // inbox transaction (of up to 5 messages)
	}
	results := make([]consumerCrashResult, len(cases))
	acked := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		ctx := t.Context()
		dir := t.TempDir()
		path, h := effectsDB(t, dir)
		out := memoryDB(t, 8)
		sp := c.bc.spec
		sp.DB, sp.Point = childDB{Kind: "sqlite", Name: path}, c.point
		wg.Go(func() {
			results[i] = consumerCrashRun(ctx, out, recording(c.bc.sink), h, dir, sp, runs, consumerCase{
				dest: c.bc.dest, killAt: killAt[c.point], settle: c.bc.settle,
			})
			acked[i] = c.bc.acked(ctx)
		})
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.bc.name+"/"+c.point, func(t *testing.T) {
			res := results[i]
			t.Logf("%d runs, %d SIGKILLs; %s (deliveries: effects applied); killed processes received %d, applied %d, duplicate %d, failed %d; the next ones received %d, applied %d, duplicate %d, failed %d; took %v",
				res.runs, res.kills, res.report, res.stats[0][0], res.stats[0][1], res.stats[0][2], res.stats[0][3],
				res.stats[1][0], res.stats[1][1], res.stats[1][2], res.stats[1][3], res.took.Round(time.Millisecond))
			require.Empty(t, res.errs)
			require.Equal(t, runs, res.runs)
			require.Zero(t, res.report.Lost, "lost: a committed event never applied")
			require.Zero(t, res.report.Unknown, "applied but never committed")
			require.Zero(t, res.report.Duplicates, "an effect applied twice")
			require.Zero(t, res.report.OrderBreaks, "first applies in version order per key")
			require.NoError(t, acked[i], "every message acknowledged in the end")
		})
	}
}
