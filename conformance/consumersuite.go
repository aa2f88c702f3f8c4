package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// ConsumerHarness gives RunConsumer a broker with its consumer, and an inbox store for the
// consumer to record into. Like Harness, it builds fresh fixtures for each subtest.
type ConsumerHarness[TTx any] struct {
	// Inbox returns a fresh, empty inbox store, isolated from every other subtest (subtests run
	// in parallel). Release resources with t.Cleanup. Required.
	Inbox func(t *testing.T) driver.InboxStore[TTx]
	// Effect applies a domain change in tx: it adds 1 to the counter named key (creating it at
	// 1), in the database of the store Inbox returned. Required.
	Effect func(ctx context.Context, tx TTx, key string) error
	// EffectCount returns the committed value of the counter named key (0 when absent) in the
	// database of s, a store Inbox returned. Required.
	EffectCount func(ctx context.Context, s driver.InboxStore[TTx], key string) (int, error)
	// Broker returns a fresh destination of the broker (a queue, a topic) and its consumer,
	// for one subtest. Required.
	Broker func(t *testing.T) ConsumerBroker[TTx]
	// AckLatency is the longest the consumer takes to acknowledge a message once its inbox
	// transaction committed, as ConsumerBroker.Pending sees it (SQS: the delete; Kafka: the
	// next offset commit). The suite watches this long that a message whose transaction is
	// still open, or that can never be processed, stays unacknowledged. Default 2s.
	AckLatency time.Duration
	// Wait bounds each wait for an outcome (a message applied, redelivered, acknowledged,
	// dead-lettered): past it the subtest fails. Default 60s.
	Wait time.Duration
	// Timeout bounds each subtest (the watchdog). Default 2 minutes.
	Timeout time.Duration
}

// ConsumerHandler is the effect the suite's consumer applies for a decoded event, in tx, the
// transaction of the inbox that records the event. The harness wraps it into its consumer's
// handler (for package sinks/sqs: func(ctx, tx, d *sqs.Delivery) error { return
// handler(ctx, tx, &d.Event) }) and passes the inbox transaction's ctx on.
type ConsumerHandler[TTx any] func(ctx context.Context, tx TTx, ev *core.Event) error

// ConsumerBroker is one destination of a broker, and its consumer, for one subtest.
type ConsumerBroker[TTx any] struct {
	// Destination is the core.Message.Destination of the suite's messages (the queue URL, the
	// topic). Required.
	Destination string
	// Sink publishes to Destination: the broker's own sink, as a relay would use it.
	// Required.
	Sink core.Sink
	// PublishUndecodable puts a message on Destination that is not an outbox message (a bare
	// body without the sink's attributes or headers). Required.
	PublishUndecodable func(ctx context.Context) error
	// Start runs the consumer of Destination until the subtest ends (stop it with
	// t.Cleanup), processing every message through inbox as consumer (the inbox's consumer
	// name) with handler in the inbox's transaction. The consumer keeps its default version
	// gate, and redelivers a failed message within ConsumerHarness.Wait: give it a short
	// visibility timeout or retry backoff. A failure to start is t.Fatal. Required.
	Start func(t *testing.T, inbox *core.Inbox[TTx], consumer string, handler ConsumerHandler[TTx])
	// Pending returns how many messages on Destination the consumer has not acknowledged yet:
	// published and neither acknowledged nor moved to the dead-letter path (SQS: the queue's
	// visible and in-flight messages; Kafka: the end offsets minus the group's committed
	// offsets). Required.
	Pending func(ctx context.Context) (int, error)
	// DeadLetters returns how many messages of Destination reached the consumer's dead-letter
	// path (SQS: the messages of the queue's redrive-policy dead-letter queue; Kafka: the
	// records of the dead-letter topic). Nil when the consumer has none: the poison cases then
	// log that the path is not offered and check only that a poison message is never
	// acknowledged and never applied.
	DeadLetters func(ctx context.Context) (int, error)
}

// RunConsumer runs the consumer suite against the broker consumer that h builds: it drives the
// consumer through a real core.Inbox on h's inbox store, publishing with the broker's own sink
// and watching the broker's state. Its subtests, "consumer/case", each on a fresh destination
// and inbox, run in parallel under a watchdog (h.Timeout):
//
//   - apply-and-ack: every message is applied once with the event the producer wrote (ID,
//     type, aggregate and version, partition key, tenant, causation and correlation IDs,
//     schema, payload, headers) and acknowledged; the inbox holds it under its event ID and
//     payload digest (a later Process of them is a Duplicate).
//   - ack-after-commit: while the handler blocks, its inbox transaction open, the message is
//     not acknowledged (for h.AckLatency) and its effect not visible; once the handler
//     returns, the message is applied and acknowledged.
//   - commit-failure: the commit of the transaction that ran the handler fails (the suite's
//     inbox store rolls it back): the message is redelivered, stays unacknowledged until the
//     redelivery's transaction commits (its handler call is held for h.AckLatency), and is
//     applied once.
//   - redelivery-noop: the same message published three times (a relay's resends, two of them
//     before the consumer starts) is applied once; every copy is acknowledged.
//   - handler-error: a handler error leaves the message for redelivery: it stays
//     unacknowledged until the redelivery's transaction commits (held as in commit-failure),
//     is applied once, and nothing is dead-lettered.
//   - version-gate: with the consumer's default version gate, version 1 of an aggregate after
//     version 2 is acknowledged as stale without running the handler.
//   - retention: after Inbox.Prune raised the consumer's retention horizon, a message whose
//     outbox CreatedAt is older is poison (core.ErrBeyondRetention) and reaches the dead-letter
//     path unapplied, while a newer one is applied (the consumer maps CreatedAt to
//     InboxMessage.OccurredAt).
//   - poison-undecodable: a message that is not an outbox message reaches the dead-letter path
//     and does not keep the next message from being applied.
//   - poison-digest-conflict: a message whose event ID was applied with another payload
//     (core.ErrDigestMismatch) reaches the dead-letter path without running the handler; the
//     first payload's effect stays applied once.
//
// Without ConsumerBroker.DeadLetters the poison cases (retention, poison-undecodable,
// poison-digest-conflict) log that the dead-letter path is not offered and check that the
// poison message is neither applied nor acknowledged for h.AckLatency.
//
// The inbox store the consumer gets is h.Inbox's behind a wrapper that can fail a commit; it
// offers only driver.InboxStore (a driver.InboxBatchStore underneath is not used). Event IDs
// and effect counter names are unique per run.
func RunConsumer[TTx any](t *testing.T, h ConsumerHarness[TTx]) {
	t.Helper()
	if h.Inbox == nil || h.Effect == nil || h.EffectCount == nil || h.Broker == nil {
		t.Fatal("conformance: ConsumerHarness.Inbox, Effect, EffectCount and Broker are required")
	}
	if h.AckLatency <= 0 {
		h.AckLatency = 2 * time.Second
	}
	if h.Wait <= 0 {
		h.Wait = time.Minute
	}
	t.Run("consumer", func(t *testing.T) {
		for _, c := range consumerCases[TTx]() {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx := watchdog(t, h.Timeout, nil)
				c.run(newConsumerEnv(t, ctx, h))
			})
		}
	})
}

// consumerCase is one case of the consumer suite.
type consumerCase[TTx any] struct {
	name string
	run  func(e *consumerEnv[TTx])
}

func consumerCases[TTx any]() []consumerCase[TTx] {
	return []consumerCase[TTx]{
		{"apply-and-ack", testConsumerApplyAndAck[TTx]},
		{"ack-after-commit", testConsumerAckAfterCommit[TTx]},
		{"commit-failure", testConsumerCommitFailure[TTx]},
		{"redelivery-noop", testConsumerRedelivery[TTx]},
		{"handler-error", testConsumerHandlerError[TTx]},
		{"version-gate", testConsumerVersionGate[TTx]},
		{"retention", testConsumerRetention[TTx]},
		{"poison-undecodable", testConsumerPoisonUndecodable[TTx]},
		{"poison-digest-conflict", testConsumerPoisonDigest[TTx]},
	}
}

// consumerName is the inbox consumer name of the suite's consumers.
const consumerName = "conformance-consumer"

// errConsumerHandler is the handler error of handler-error.
var errConsumerHandler = errors.New("conformance: injected handler failure")

// errConsumerCommit is the commit failure commit-failure injects.
var errConsumerCommit = errors.New("conformance: injected commit failure")

// consumerEnv is the fixture of one consumer subtest: a fresh inbox store (behind the
// fault-injecting wrapper) and destination, and a record of the handler's calls.
type consumerEnv[TTx any] struct {
	t      *testing.T
	ctx    context.Context
	h      ConsumerHarness[TTx]
	inner  driver.InboxStore[TTx]
	store  *consumerStore[TTx]
	inbox  *core.Inbox[TTx]
	b      ConsumerBroker[TTx]
	prefix string
	seq    atomic.Int64

	// hook, set before start, runs at the top of every handler call; an error fails the call.
	hook func(ctx context.Context, ev *core.Event) error

	mu    sync.Mutex
	calls map[string][]core.Event // handler calls by event ID, failed ones included
}

func newConsumerEnv[TTx any](t *testing.T, ctx context.Context, h ConsumerHarness[TTx]) *consumerEnv[TTx] {
	inner := h.Inbox(t)
	if inner == nil {
		t.Fatal("conformance: ConsumerHarness.Inbox returned nil")
	}
	store := &consumerStore[TTx]{InboxStore: inner}
	inbox, err := core.NewInbox[TTx](ctx, store, nil)
	if err != nil {
		t.Fatalf("conformance: NewInbox: %v", err)
	}
	b := h.Broker(t)
	if b.Destination == "" || b.Sink == nil || b.PublishUndecodable == nil || b.Start == nil || b.Pending == nil {
		t.Fatal("conformance: ConsumerBroker.Destination, Sink, PublishUndecodable, Start and Pending are required")
	}
	return &consumerEnv[TTx]{t: t, ctx: ctx, h: h, inner: inner, store: store, inbox: inbox, b: b,
		prefix: "cc" + strconv.FormatInt(time.Now().UnixNano(), 36), calls: map[string][]core.Event{}}
}

func (e *consumerEnv[TTx]) fatalf(format string, args ...any) {
	e.t.Helper()
	if e.ctx.Err() != nil {
		e.t.Fatalf("(after the watchdog fired) "+format, args...)
	}
	e.t.Fatalf(format, args...)
}

// start runs the consumer with the suite's handler: it records the call, marks the inbox
// transaction as one that ran the handler (consumerStore), runs e.hook, then applies the
// effect named by the event ID.
func (e *consumerEnv[TTx]) start() {
	e.t.Helper()
	e.b.Start(e.t, e.inbox, consumerName, func(ctx context.Context, tx TTx, ev *core.Event) error {
		c := *ev
		c.Payload = bytes.Clone(ev.Payload)
		e.mu.Lock()
		e.calls[ev.ID] = append(e.calls[ev.ID], c)
		e.mu.Unlock()
		if ran, ok := ctx.Value(handlerRanKey{}).(*atomic.Bool); ok {
			ran.Store(true)
		}
		if e.hook != nil {
			if err := e.hook(ctx, ev); err != nil {
				return err
			}
		}
		return e.h.Effect(ctx, tx, ev.ID)
	})
}

// message returns a message of a new event of aggregate agg at version (0: none), created at
// createdAt (zero: now).
func (e *consumerEnv[TTx]) message(agg string, version int64, payload string, createdAt time.Time) core.Message {
	id := fmt.Sprintf("%s-%d", e.prefix, e.seq.Add(1))
	if createdAt.IsZero() {
		createdAt = time.Now()
	}
	pk := "order/" + agg
	return core.Message{
		Record: driver.Record{Event: core.Event{
			ID: id, Type: "order.updated", AggregateType: "order", AggregateID: agg, AggregateVersion: version,
			PartitionKey: pk, SchemaID: "order.v1", Tenant: "acme", CausationID: "cause-" + id, CorrelationID: "corr-" + e.prefix,
			Payload: []byte(payload), Headers: map[string]string{"x-conformance": "consumer"},
		}, CreatedAt: createdAt.UTC().Truncate(time.Microsecond)},
		Destination: e.b.Destination, DedupID: id, GroupID: pk,
	}
}

// publish sends msgs with the broker's sink, one Send each, in order.
func (e *consumerEnv[TTx]) publish(msgs ...core.Message) {
	e.t.Helper()
	for _, m := range msgs {
		out := e.b.Sink.Send(e.ctx, []core.Message{m})
		if len(out) != 1 || out[0] != nil {
			e.fatalf("publishing event %s: %v", m.ID, out)
		}
	}
}

func (e *consumerEnv[TTx]) pending() int {
	e.t.Helper()
	n, err := e.b.Pending(e.ctx)
	if err != nil {
		e.fatalf("Pending: %v", err)
	}
	return n
}

func (e *consumerEnv[TTx]) deadLetters() int {
	e.t.Helper()
	n, err := e.b.DeadLetters(e.ctx)
	if err != nil {
		e.fatalf("DeadLetters: %v", err)
	}
	return n
}

func (e *consumerEnv[TTx]) effect(id string) int {
	e.t.Helper()
	n, err := e.h.EffectCount(e.ctx, e.inner, id)
	if err != nil {
		e.fatalf("EffectCount(%s): %v", id, err)
	}
	return n
}

// callsOf returns the handler calls for event id so far.
func (e *consumerEnv[TTx]) callsOf(id string) []core.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]core.Event(nil), e.calls[id]...)
}

// waitFor polls cond every 20ms for at most h.Wait.
func (e *consumerEnv[TTx]) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(e.h.Wait)
	for !cond() {
		if time.Now().After(deadline) {
			e.fatalf("gave up after %v waiting until %s (pending %d, dead letters %s)", e.h.Wait, what, e.pending(), e.deadLetterText())
		}
		select {
		case <-e.ctx.Done():
			e.fatalf("gave up waiting until %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (e *consumerEnv[TTx]) deadLetterText() string {
	if e.b.DeadLetters == nil {
		return "not offered"
	}
	n, err := e.b.DeadLetters(e.ctx)
	if err != nil {
		return err.Error()
	}
	return strconv.Itoa(n)
}

// holds checks, for h.AckLatency, that cond stays true.
func (e *consumerEnv[TTx]) holds(what string, cond func() bool) {
	e.t.Helper()
	until := time.Now().Add(e.h.AckLatency)
	for time.Now().Before(until) {
		if !cond() {
			e.fatalf("%s did not hold (pending %d)", what, e.pending())
		}
		select {
		case <-e.ctx.Done():
			e.fatalf("interrupted while checking that %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settled waits until every message of ids was applied once and nothing is pending.
func (e *consumerEnv[TTx]) settled(ids ...string) {
	e.t.Helper()
	e.waitFor(fmt.Sprintf("events %v applied and every message acknowledged", ids), func() bool {
		for _, id := range ids {
			if e.effect(id) != 1 {
				return false
			}
		}
		return e.pending() == 0
	})
}

// noDeadLetters checks that nothing reached the dead-letter path (when there is one).
func (e *consumerEnv[TTx]) noDeadLetters() {
	e.t.Helper()
	if e.b.DeadLetters != nil {
		if n := e.deadLetters(); n != 0 {
			e.fatalf("%d messages reached the dead-letter path; want none", n)
		}
	}
}

// poisoned checks what becomes of one poison message published (with good messages, goodIDs)
// to a fresh destination: it reaches the dead-letter path, the good ones are applied and
// nothing is left pending; without a dead-letter path, it is never acknowledged.
func (e *consumerEnv[TTx]) poisoned(goodIDs ...string) {
	e.t.Helper()
	if e.b.DeadLetters == nil {
		e.t.Logf("the consumer offers no dead-letter path (ConsumerBroker.DeadLetters is nil): checking only that the poison message is never acknowledged")
		e.waitFor(fmt.Sprintf("events %v applied", goodIDs), func() bool {
			for _, id := range goodIDs {
				if e.effect(id) != 1 {
					return false
				}
			}
			return true
		})
		e.holds("the poison message stays unacknowledged", func() bool { return e.pending() >= 1 })
		return
	}
	e.waitFor("the poison message on the dead-letter path", func() bool { return e.deadLetters() == 1 })
	e.settled(goodIDs...)
	if n := e.deadLetters(); n != 1 {
		e.fatalf("%d messages on the dead-letter path; want the poison message only", n)
	}
}

// checkEvent compares the event the handler got with the one published.
func (e *consumerEnv[TTx]) checkEvent(got, want *core.Event) {
	e.t.Helper()
	type fields struct {
		ID, Type, AggregateType, AggregateID, PartitionKey, SchemaID, Tenant, CausationID, CorrelationID string
		AggregateVersion                                                                                 int64
	}
	of := func(ev *core.Event) fields {
		return fields{ev.ID, ev.Type, ev.AggregateType, ev.AggregateID, ev.PartitionKey, ev.SchemaID, ev.Tenant,
			ev.CausationID, ev.CorrelationID, ev.AggregateVersion}
	}
	if of(got) != of(want) {
		e.fatalf("the handler got event %+v; want %+v", of(got), of(want))
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		e.fatalf("event %s: the handler got payload %q; want %q", want.ID, got.Payload, want.Payload)
	}
	for k, v := range want.Headers {
		if got.Headers[k] != v {
			e.fatalf("event %s: header %q is %q; want %q", want.ID, k, got.Headers[k], v)
		}
	}
}

func testConsumerApplyAndAck[TTx any](e *consumerEnv[TTx]) {
	msgs := []core.Message{e.message("a", 1, `{"n":1}`, time.Time{}), e.message("b", 3, `{"n":2}`, time.Time{}),
		e.message("c", 0, "", time.Time{})}
	e.publish(msgs...)
	e.start()
	var ids []string
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	e.settled(ids...)
	for _, m := range msgs {
		calls := e.callsOf(m.ID)
		if len(calls) != 1 {
			e.fatalf("event %s: %d handler calls; want 1", m.ID, len(calls))
		}
		e.checkEvent(&calls[0], &m.Event)
		// The consumer recorded it under its tenant, event ID and payload digest.
		res, err := e.inbox.Process(e.ctx, consumerName, core.InboxMessage{EventID: m.ID, Tenant: m.Tenant, Payload: m.Payload},
			func(context.Context, TTx, core.InboxMessage) error { return errors.New("the handler ran again") })
		if err != nil || res.Outcome != core.Duplicate || res.Prior != core.Applied {
			e.fatalf("event %s processed again: %+v, %v; want Duplicate of Applied", m.ID, res, err)
		}
	}
	e.noDeadLetters()
}

// blocker holds the nth handler call of one event, its inbox transaction open, until released.
type blocker struct {
	id       string
	nth      int32
	calls    atomic.Int32
	entered  chan struct{}
	release  chan struct{}
	released sync.Once
}

// newBlocker returns a blocker of the nth call of event id, released at the latest when the
// subtest ends.
func (e *consumerEnv[TTx]) newBlocker(id string, nth int) *blocker {
	b := &blocker{id: id, nth: int32(nth), entered: make(chan struct{}), release: make(chan struct{})}
	e.t.Cleanup(b.open)
	return b
}

func (b *blocker) open() { b.released.Do(func() { close(b.release) }) }

// call counts a handler call of ev and holds it when it is the nth of b's event. It returns
// the call's number (0 for another event).
func (b *blocker) call(ctx context.Context, ev *core.Event) (int, error) {
	if ev.ID != b.id {
		return 0, nil
	}
	n := b.calls.Add(1)
	if n != b.nth {
		return int(n), nil
	}
	close(b.entered)
	select {
	case <-b.release:
		return int(n), nil
	case <-ctx.Done():
		return int(n), ctx.Err()
	}
}

// heldUnacknowledged waits until b holds its call, checks for h.AckLatency that the message
// (the only one published) stays unacknowledged and unapplied, then releases the call.
func (e *consumerEnv[TTx]) heldUnacknowledged(b *blocker, what string) {
	e.t.Helper()
	select {
	case <-b.entered:
	case <-time.After(e.h.Wait):
		e.fatalf("handler call %d of event %s did not come within %v (%d calls so far)", b.nth, b.id, e.h.Wait, b.calls.Load())
	case <-e.ctx.Done():
		e.fatalf("handler call %d of event %s did not come", b.nth, b.id)
	}
	e.holds(what, func() bool { return e.pending() == 1 && e.effect(b.id) == 0 })
	b.open()
}

func testConsumerAckAfterCommit[TTx any](e *consumerEnv[TTx]) {
	m := e.message("a", 1, "held", time.Time{})
	b := e.newBlocker(m.ID, 1)
	e.hook = func(ctx context.Context, ev *core.Event) error {
		_, err := b.call(ctx, ev)
		return err
	}
	e.start()
	e.publish(m)
	e.heldUnacknowledged(b, "the message stays unacknowledged while its inbox transaction is open")
	e.settled(m.ID)
}

// testConsumerCommitFailure: the first transaction fails its commit; the redelivery's handler
// call is held to check that the message was not acknowledged meanwhile (a consumer that
// retries in process, as the Kafka consumer does, would apply it even after acknowledging it).
func testConsumerCommitFailure[TTx any](e *consumerEnv[TTx]) {
	m := e.message("a", 1, "fails to commit once", time.Time{})
	b := e.newBlocker(m.ID, 2)
	e.hook = func(ctx context.Context, ev *core.Event) error {
		_, err := b.call(ctx, ev)
		return err
	}
	e.store.failCommits(1)
	e.start()
	e.publish(m)
	e.heldUnacknowledged(b, "the message stays unacknowledged after its commit failed, until the redelivery commits")
	e.settled(m.ID)
	if n := e.store.injected.Load(); n != 1 {
		e.fatalf("%d commit failures injected; want 1 (the handler did not run with the context of its inbox transaction)", n)
	}
	e.noDeadLetters()
}

func testConsumerRedelivery[TTx any](e *consumerEnv[TTx]) {
	m := e.message("a", 1, "sent three times", time.Time{})
	e.publish(m, m)
	e.start()
	e.settled(m.ID)
	e.publish(m)
	e.waitFor("the resent message acknowledged", func() bool { return e.pending() == 0 })
	if n := e.effect(m.ID); n != 1 {
		e.fatalf("effect applied %d times; want 1", n)
	}
	if n := len(e.callsOf(m.ID)); n != 1 {
		e.fatalf("%d handler calls; want 1 (a redelivery must not run the handler)", n)
	}
	e.noDeadLetters()
}

// testConsumerHandlerError: the first handler call fails; the redelivery's call is held to
// check that the message was not acknowledged meanwhile.
func testConsumerHandlerError[TTx any](e *consumerEnv[TTx]) {
	m := e.message("a", 1, "fails once", time.Time{})
	b := e.newBlocker(m.ID, 2)
	e.hook = func(ctx context.Context, ev *core.Event) error {
		n, err := b.call(ctx, ev)
		if n == 1 {
			return errConsumerHandler
		}
		return err
	}
	e.start()
	e.publish(m)
	e.heldUnacknowledged(b, "the message stays unacknowledged after its handler failed, until the redelivery commits")
	e.settled(m.ID)
	e.noDeadLetters()
}

func testConsumerVersionGate[TTx any](e *consumerEnv[TTx]) {
	v2 := e.message("a", 2, "version 2", time.Time{})
	v1 := e.message("a", 1, "version 1", time.Time{})
	e.start()
	e.publish(v2)
	e.settled(v2.ID)
	e.publish(v1)
	e.waitFor("version 1 acknowledged", func() bool { return e.pending() == 0 })
	if n := e.effect(v1.ID); n != 0 {
		e.fatalf("version 1 after version 2 applied %d times; want 0 (stale)", n)
	}
	if n := len(e.callsOf(v1.ID)); n != 0 {
		e.fatalf("the handler ran %d times for the stale version 1; want 0", n)
	}
	e.noDeadLetters()
}

func testConsumerRetention[TTx any](e *consumerEnv[TTx]) {
	now := time.Now()
	if _, err := e.inbox.Prune(e.ctx, consumerName, now.Add(-time.Hour), 0); err != nil {
		e.fatalf("Prune: %v", err)
	}
	old := e.message("a", 1, "older than the horizon", now.Add(-2*time.Hour))
	fresh := e.message("b", 1, "newer than the horizon", now)
	e.start()
	e.publish(old, fresh)
	e.poisoned(fresh.ID)
	if n := e.effect(old.ID); n != 0 {
		e.fatalf("the message older than the retention horizon applied %d times; want 0", n)
	}
}

func testConsumerPoisonUndecodable[TTx any](e *consumerEnv[TTx]) {
	good := e.message("a", 1, "after the poison", time.Time{})
	e.start()
	if err := e.b.PublishUndecodable(e.ctx); err != nil {
		e.fatalf("PublishUndecodable: %v", err)
	}
	e.publish(good)
	e.poisoned(good.ID)
}

func testConsumerPoisonDigest[TTx any](e *consumerEnv[TTx]) {
	m := e.message("a", 0, "first payload", time.Time{})
	conflict := m
	conflict.Event.Payload = []byte("other payload")
	good := e.message("b", 1, "after the poison", time.Time{})
	e.start()
	e.publish(m)
	e.settled(m.ID)
	e.publish(conflict, good)
	e.poisoned(good.ID)
	if n := e.effect(m.ID); n != 1 {
		e.fatalf("event %s applied %d times; want 1", m.ID, n)
	}
	for _, c := range e.callsOf(m.ID) {
		if bytes.Equal(c.Payload, conflict.Payload) {
			e.fatalf("the handler ran for the conflicting payload of event %s", m.ID)
		}
	}
}

// handlerRanKey is the context key under which consumerStore.InTx puts the flag the suite's
// handler sets.
type handlerRanKey struct{}

// consumerStore is the inbox store the suite gives the consumer: the harness's, with commits
// that can be made to fail. A transaction fails its commit (fn's work is rolled back and InTx
// returns errConsumerCommit) when fn succeeded, ran the suite's handler and a failure is armed.
type consumerStore[TTx any] struct {
	driver.InboxStore[TTx]

	mu       sync.Mutex
	armed    int
	injected atomic.Int64
}

// failCommits arms n commit failures.
func (s *consumerStore[TTx]) failCommits(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = n
}

func (s *consumerStore[TTx]) take() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.armed == 0 {
		return false
	}
	s.armed--
	return true
}

func (s *consumerStore[TTx]) InTx(ctx context.Context, fn func(ctx context.Context, tx TTx) error) error {
	ran := new(atomic.Bool)
	return s.InboxStore.InTx(context.WithValue(ctx, handlerRanKey{}, ran), func(ctx context.Context, tx TTx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		if ran.Load() && s.take() {
			s.injected.Add(1)
			return errConsumerCommit
		}
		return nil
	})
}
