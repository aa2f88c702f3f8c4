package sqsdeploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/examples/sqsdeploy"
	"github.com/outboxkit/outbox/sinks/sns"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// killingSink kills the relay right after its killAt-th Send (or the first later one) returned
// success for every message, i.e. after the broker acknowledged a batch and before the relay
// could record it in the outbox.
type killingSink struct {
	inner  core.Sink
	killAt int
	kill   func()

	mu     sync.Mutex
	sends  int
	killed []string // the event IDs of the batch acknowledged but never settled
}

func (k *killingSink) Send(ctx context.Context, msgs []core.Message) []error {
	out := k.inner.Send(ctx, msgs)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.sends++
	if k.killed == nil && k.sends >= k.killAt && !slices.ContainsFunc(out, func(err error) bool { return err != nil }) {
		for _, m := range msgs {
			k.killed = append(k.killed, m.ID)
		}
		k.kill()
	}
	return out
}

func (k *killingSink) killedIDs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.killed)
}

// lostDeletes loses the consumer's every-th DeleteMessageBatch request (at most max of them):
// the consumer's inbox transaction committed, but the messages stay on the queue and come back
// after the visibility timeout, as when a consumer dies between its commit and the delete.
type lostDeletes struct {
	base       http.RoundTripper
	every, max int64

	requests, lost, lostEntries atomic.Int64
}

func (d *lostDeletes) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".DeleteMessageBatch") {
		return d.base.RoundTrip(r)
	}
	if n := d.requests.Add(1); n%d.every != 0 || d.lost.Load() >= d.max {
		return d.base.RoundTrip(r)
	}
	var in struct{ Entries []json.RawMessage }
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, err
	}
	d.lost.Add(1)
	d.lostEntries.Add(int64(len(in.Entries)))
	// A client error (400) that the SDK does not retry.
	const msg = `{"__type":"com.amazonaws.sqs#InjectedFault","message":"test: delete lost"}`
	return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(msg)),
		ContentLength: int64(len(msg)), Request: r}, nil
}

// background runs run in a goroutine; the returned stop cancels it and returns run's error. It
// may be called more than once.
func background(ctx context.Context, run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return sync.OnceValue(func() error {
		cancel()
		return <-done
	})
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeploymentExactlyOnceThroughRelayKillAndRedeliveries runs the whole deployment on
// PostgreSQL and the AWS emulator: producer (orders row + outbox event per transaction) ->
// relay -> SNS FIFO topic -> SQS FIFO queue (raw delivery) -> consumer (inbox + order_views in
// one transaction). On the way:
//
//   - the first relay is killed right after the broker acknowledged a batch and before the
//     relay recorded it: those events stay unpublished in the outbox, and a second relay (which
//     takes the lanes over once the dead relay's leases expire) sends them again;
//   - the handler fails the first attempt of some events (rolled back, redelivered after the
//     visibility timeout);
//   - some of the consumer's deletes are lost after its transaction committed, so those
//     messages are delivered again and the inbox must absorb them.
//
// Every event must be applied exactly once, in version order per order.
func TestDeploymentExactlyOnceThroughRelayKillAndRedeliveries(t *testing.T) {
	t.Parallel()
	throughRelayKill(t, false)
}

// The same deployment, whose killed polling relay is replaced by a CDC relay: a cutover from
// polling to CDC in the middle of production, through SNS and SQS into the inbox.
func TestDeploymentExactlyOnceThroughCutoverToCDC(t *testing.T) {
	t.Parallel()
	throughRelayKill(t, true)
}

// throughRelayKill runs the deployment: a polling relay killed after its third acknowledged
// batch, then the deployment's relay (polling, or CDC when cdc is true), a consumer whose
// handler fails first attempts and whose deletes get lost, and checks exactly-once effects.
func throughRelayKill(t *testing.T, cdc bool) {
	ep := awsEndpoint(t)
	admin := pool(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	log := testLogger(t)
	sn, sq := snsClient(ep), sqsClient(ep, nil)
	topicARN, queueURL := fifoTopicToQueue(t, sq, sn)
	cfg := sqsdeploy.Config{
		OutboxSchema: schema(t, admin, "sqsd_orders_"),
		InboxSchema:  schema(t, admin, "sqsd_views_"),
		Topics:       map[string]string{sqsdeploy.EventStatusChanged: topicARN},
		QueueURL:     queueURL,
		// fauxqs 2.4.1 handles the entries of a PublishBatch in the text order of their ids
		// (1, 10, 2, ...): nine entries per request keep each group's order.
		SNS: &sns.Options{MaxBatchEntries: 9, Logger: log},
		SQS: &sqs.ConsumerOptions{VisibilityTimeout: 2 * time.Second, WaitTime: time.Second, Pollers: 2, Concurrency: 4, Logger: log},
	}
	producerDB, consumerDB := pool(t, 8), pool(t, 8)
	require.NoError(t, sqsdeploy.MigrateProducer(ctx, producerDB, cfg))
	require.NoError(t, sqsdeploy.MigrateConsumer(ctx, consumerDB, cfg))
	logTable := pgx.Identifier{cfg.InboxSchema, "applied_log"}.Sanitize()
	_, err := consumerDB.Exec(ctx, `CREATE TABLE `+logTable+` (seq bigserial PRIMARY KEY, order_id text NOT NULL, version bigint NOT NULL, event_id text NOT NULL)`)
	require.NoError(t, err)

	// The consumer: the deployment's projection behind a handler that fails the first attempt
	// of every event whose version ends in 4 and logs what it applied (in the same transaction).
	var attempted sync.Map
	var injected atomic.Int64
	project := sqsdeploy.ProjectOrders(cfg)
	handler := func(ctx context.Context, tx pgx.Tx, d *sqs.Delivery) error {
		if _, again := attempted.LoadOrStore(d.Event.ID, true); !again && d.Event.AggregateVersion%10 == 4 {
			injected.Add(1)
			return fmt.Errorf("test: first attempt of %s fails", d.Event.ID)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+logTable+` (order_id, version, event_id) VALUES ($1, $2, $3)`,
			d.Event.AggregateID, d.Event.AggregateVersion, d.Event.ID); err != nil {
			return err
		}
		return project(ctx, tx, d)
	}
	deletes := &lostDeletes{base: http.DefaultTransport, every: 5, max: 4}
	consumer, err := sqsdeploy.NewConsumer(t.Context(), consumerDB, sqsClient(ep, deletes), cfg, handler)
	require.NoError(t, err)
	stopConsumer := background(ctx, consumer.Run)
	defer func() { _ = stopConsumer() }() // checked below; this covers early failures

	// The producer writes concurrently with the relays.
	const orders, versions = 8, 24
	producer, err := sqsdeploy.NewProducer(ctx, producerDB, cfg)
	require.NoError(t, err)
	produced := make(chan error, 1)
	go func() {
		for v := 1; v <= versions; v++ {
			for o := range orders {
				got, err := producer.SetStatus(ctx, fmt.Sprint("o", o), fmt.Sprint("status-", v))
				if err == nil && got != int64(v) {
					err = fmt.Errorf("order o%d: version %d, want %d", o, got, v)
				}
				if err != nil {
					produced <- err
					return
				}
			}
		}
		produced <- nil
	}()

	// Relay 1: small batches, killed after its third acknowledged batch.
	relayOpts := func(owner string) *core.RelayOptions {
		return &core.RelayOptions{Owner: owner, BatchSize: 20, PollInterval: 20 * time.Millisecond,
			LeaseTTL: 2 * time.Second, RenewInterval: 500 * time.Millisecond, Logger: log}
	}
	store, err := sqsdeploy.OutboxStore(producerDB, cfg)
	require.NoError(t, err)
	sink, err := sqsdeploy.NewSink(sn, cfg)
	require.NoError(t, err)
	dying := conformance.NewCrashStore(store)
	r1ctx, kill := context.WithCancel(ctx)
	ks := &killingSink{inner: sink, killAt: 3, kill: func() { dying.Crash(); kill() }}
	relay1, err := core.NewRelay(dying, ks, cfg.Router(), relayOpts("relay-1"))
	require.NoError(t, err)
	require.NoError(t, relay1.Run(r1ctx)) // returns once killed

	killed := ks.killedIDs()
	require.NotEmpty(t, killed, "relay 1 was killed after an acknowledged batch")
	pending, err := store.List(ctx, driver.ListParams{State: driver.StatePending, Limit: orders * versions})
	require.NoError(t, err)
	pendingIDs := map[string]bool{}
	for _, r := range pending {
		pendingIDs[r.ID] = true
	}
	for _, id := range killed {
		require.True(t, pendingIDs[id], "event %s was acknowledged by SNS but is still pending in the outbox", id)
	}

	// Relay 2: the deployment's relay; it takes the lanes over when relay 1's leases expire.
	cfg2 := cfg
	cfg2.Relay = relayOpts("relay-2")
	if cdc {
		cfg2.CDC = &sqsdeploy.CDC{ // the default slot, named after the outbox's schema
			Relay: &core.CDCOptions{Owner: "relay-2-cdc", BatchSize: 20, LeaseTTL: 2 * time.Second,
				RenewInterval: 500 * time.Millisecond, Logger: log},
		}
		_, src, err := sqsdeploy.NewCDCRelay(producerDB, sn, cfg2)
		require.NoError(t, err)
		t.Cleanup(func() { _ = src.DropSlot(context.Background()) })
	}
	stopRelay := background(ctx, func(ctx context.Context) error { return sqsdeploy.RunRelay(ctx, producerDB, sn, cfg2) })
	defer func() { _ = stopRelay() }()

	require.NoError(t, <-produced)
	const total = orders * versions
	inboxTable := pgx.Identifier{cfg.InboxSchema, "inbox"}.Sanitize()
	countInbox := func() int {
		var n int
		require.NoError(t, consumerDB.QueryRow(ctx, `SELECT count(*) FROM `+inboxTable+` WHERE consumer = $1`, "order-views").Scan(&n))
		return n
	}
	eventually(t, 60*time.Second, "every event recorded in the inbox", func() bool { return countInbox() == total })
	eventually(t, 30*time.Second, "the outbox fully published", func() bool {
		st, err := store.Stats(ctx)
		require.NoError(t, err)
		return st.Pending == 0
	})
	// The lost deletes' messages come back after the visibility timeout: wait for them.
	eventually(t, 30*time.Second, "redelivered messages absorbed", func() bool {
		st := consumer.Stats()
		return st.Duplicate >= uint64(deletes.lostEntries.Load()) && deletes.lost.Load() > 0
	})
	require.NoError(t, stopRelay())
	require.NoError(t, stopConsumer())
	if cdc { // the CDC relay, not a polling one, published after the kill
		pub, err := store.Generation(ctx)
		require.NoError(t, err)
		require.Equal(t, driver.KindCDC, pub.Kind)
		_, ok, err := store.LoadCheckpoint(ctx)
		require.NoError(t, err)
		require.True(t, ok, "the CDC relay checkpointed")
	}

	// Outbox: everything published once the relay settled it, nothing parked.
	st, err := store.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Published: total}, driver.Stats{Pending: st.Pending, Parked: st.Parked, Published: st.Published})

	// Exactly once, in order per order: the applied log holds versions 1..N of each order in
	// commit order, each event once.
	rows, err := consumerDB.Query(ctx, `SELECT order_id, version, event_id FROM `+logTable+` ORDER BY seq`)
	require.NoError(t, err)
	last := map[string]int64{}
	events := map[string]bool{}
	for rows.Next() {
		var order, id string
		var v int64
		require.NoError(t, rows.Scan(&order, &v, &id))
		require.Equal(t, last[order]+1, v, "order %s applied in version order", order)
		last[order] = v
		require.False(t, events[id], "event %s applied twice", id)
		events[id] = true
	}
	require.NoError(t, rows.Err())
	require.Len(t, events, total)
	require.Len(t, last, orders)
	for o := range orders {
		id := fmt.Sprint("o", o)
		view, err := sqsdeploy.ReadView(ctx, consumerDB, cfg, id)
		require.NoError(t, err)
		require.Equal(t, sqsdeploy.View{Status: fmt.Sprint("status-", versions), Version: versions, Changes: versions}, view, "order %s", id)
	}
	require.Equal(t, total, countInbox())

	// Redeliveries happened and were absorbed: the injected handler failures were retried, and
	// messages whose delete was lost came back as inbox duplicates.
	cs := consumer.Stats()
	t.Logf("relay 1 killed after acknowledging %d events; consumer %+v; injected handler failures %d; lost deletes %d (%d messages)",
		len(killed), cs, injected.Load(), deletes.lost.Load(), deletes.lostEntries.Load())
	require.EqualValues(t, total, cs.Applied)
	require.Zero(t, cs.Stale, "nothing arrived behind a newer version")
	require.Positive(t, injected.Load())
	require.EqualValues(t, injected.Load(), cs.Failed, "the only failures are the injected ones")
	require.Positive(t, deletes.lostEntries.Load())
	require.GreaterOrEqual(t, cs.Duplicate, uint64(deletes.lostEntries.Load()))
	require.Greater(t, cs.Received, uint64(total))
}
