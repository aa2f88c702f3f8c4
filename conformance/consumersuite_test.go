package conformance_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The consumer suite proves itself as the adapter suite does (selftest_test.go): it must pass a
// correct reference consumer of an in-process queue, and fail, observed from a child process,
// consumers that break one rule each: acknowledging a message before its inbox transaction
// committed, acknowledging a message whose processing failed, and acknowledging it before
// retrying it in process.

const consumerVariantEnv = "OUTBOXKIT_CONSUMER_SELFTEST_VARIANT"

// consumerFault is how a reference consumer is broken.
type consumerFault string

const (
	consumerHealthy         consumerFault = ""
	consumerAckBeforeCommit consumerFault = "ack-before-commit" // acknowledges on receipt, then processes
	consumerAckOnError      consumerFault = "ack-on-error"      // acknowledges a message whose processing failed
	// acknowledges a message whose processing failed, then tries it again in process (as a
	// Kafka consumer that commits a failed record's offset before its retries would)
	consumerAckThenRetry consumerFault = "ack-then-retry"
)

// TestConsumerSuite runs the consumer suite against the reference consumer, or, in a child
// process of TestConsumerSuiteProvesItself, against the broken variant named by the environment.
func TestConsumerSuite(t *testing.T) {
	fault := consumerFault(os.Getenv(consumerVariantEnv))
	switch fault {
	case consumerHealthy, consumerAckBeforeCommit, consumerAckOnError, consumerAckThenRetry:
	default:
		t.Fatalf("unknown variant %q", fault)
	}
	conformance.RunConsumer(t, refConsumerHarness(fault, true))
}

// TestConsumerSuiteWithoutDeadLetter: a consumer that offers no dead-letter path passes the
// poison cases by never acknowledging (nor applying) the poison message.
func TestConsumerSuiteWithoutDeadLetter(t *testing.T) {
	conformance.RunConsumer(t, refConsumerHarness(consumerHealthy, false))
}

func refConsumerHarness(fault consumerFault, deadLetter bool) conformance.ConsumerHarness[*memory.Tx] {
	h := conformance.ConsumerHarness[*memory.Tx]{
		Inbox: func(t *testing.T) driver.InboxStore[*memory.Tx] {
			s, err := memory.New(nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Effect: func(ctx context.Context, tx *memory.Tx, key string) error { return tx.Incr(key) },
		EffectCount: func(ctx context.Context, s driver.InboxStore[*memory.Tx], key string) (int, error) {
			return s.(*memory.Store).Counter(key), nil
		},
		Broker: func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
			q := &refQueue{}
			if deadLetter {
				q.maxReceives = 3
			}
			b := conformance.ConsumerBroker[*memory.Tx]{
				Destination:        "ref-queue",
				Sink:               q,
				PublishUndecodable: func(context.Context) error { q.put(nil); return nil },
				Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
					ctx, cancel := context.WithCancel(context.Background())
					done := make(chan struct{})
					go func() {
						defer close(done)
						(&refConsumer{q: q, inbox: inbox, name: consumer, handler: h, fault: fault}).run(ctx)
					}()
					t.Cleanup(func() { cancel(); <-done })
				},
				Pending: func(context.Context) (int, error) { return q.pending(), nil },
			}
			if deadLetter {
				b.DeadLetters = func(context.Context) (int, error) { return q.deadLetters(), nil }
			}
			return b
		},
		AckLatency: 300 * time.Millisecond,
	}
	if fault != consumerHealthy {
		// A broken consumer makes waits end without the outcome: fail them early.
		h.Wait = 5 * time.Second
	}
	return h
}

// refQueue is an in-process queue with the semantics of an SQS queue: a received message is
// invisible until it is acknowledged (deleted) or handed back; with a redrive policy
// (maxReceives > 0), a message received maxReceives times moves to the dead-letter queue
// instead of being received again.
type refQueue struct {
	maxReceives int

	mu   sync.Mutex
	msgs []*refMessage // not deleted, not dead-lettered
	dead int
}

type refMessage struct {
	m         *core.Message // nil: not an outbox message
	receives  int
	inFlight  bool
	visibleAt time.Time
}

// Send implements core.Sink.
func (q *refQueue) Send(_ context.Context, msgs []core.Message) []error {
	for i := range msgs {
		m := msgs[i]
		m.Payload = append([]byte(nil), m.Payload...)
		q.put(&m)
	}
	return make([]error, len(msgs))
}

func (q *refQueue) put(m *core.Message) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, &refMessage{m: m})
}

// receive returns the first visible message, moving those received too often to the
// dead-letter queue; nil when none is visible.
func (q *refQueue) receive() *refMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for i := 0; i < len(q.msgs); i++ {
		rm := q.msgs[i]
		if rm.inFlight || now.Before(rm.visibleAt) {
			continue
		}
		if q.maxReceives > 0 && rm.receives >= q.maxReceives {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			q.dead++
			i--
			continue
		}
		rm.receives++
		rm.inFlight = true
		return rm
	}
	return nil
}

func (q *refQueue) ack(rm *refMessage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.msgs {
		if x == rm {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return
		}
	}
}

// handBack makes rm visible again after d.
func (q *refQueue) handBack(rm *refMessage, d time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rm.inFlight, rm.visibleAt = false, time.Now().Add(d)
}

func (q *refQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.msgs)
}

func (q *refQueue) deadLetters() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.dead
}

// refConsumer is the reference consumer: one message at a time, through the inbox, acknowledged
// only after its transaction committed; a failed one is handed back for redelivery (and so
// reaches the dead-letter queue through the queue's redrive policy, when it has one).
type refConsumer struct {
	q       *refQueue
	inbox   *core.Inbox[*memory.Tx]
	name    string
	handler conformance.ConsumerHandler[*memory.Tx]
	fault   consumerFault
}

func (c *refConsumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		rm := c.q.receive()
		if rm == nil {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		if c.fault == consumerAckBeforeCommit {
			c.q.ack(rm)
		}
		err := c.process(ctx, rm)
		if err != nil && c.fault == consumerAckThenRetry {
			c.q.ack(rm)
			for attempt := 2; err != nil && attempt <= 3 && ctx.Err() == nil; attempt++ {
				time.Sleep(20 * time.Millisecond)
				err = c.process(ctx, rm)
			}
			continue
		}
		switch {
		case err == nil, c.fault == consumerAckOnError:
			c.q.ack(rm)
		default:
			c.q.handBack(rm, 50*time.Millisecond)
		}
	}
}

var errRefUndecodable = errors.New("reference consumer: not an outbox message")

func (c *refConsumer) process(ctx context.Context, rm *refMessage) error {
	if rm.m == nil {
		return errRefUndecodable
	}
	ev := rm.m.Event
	msg := core.InboxMessageOf(&ev, rm.m.CreatedAt, "ref-queue")
	_, err := c.inbox.Process(ctx, c.name, msg, func(ctx context.Context, tx *memory.Tx, _ core.InboxMessage) error {
		return c.handler(ctx, tx, &ev)
	})
	return err
}

func TestConsumerSuiteProvesItself(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the consumer suite three times in child processes")
	}
	for _, c := range []struct {
		variant consumerFault
		fail    []string // subtests ("consumer/case") that must fail
	}{
		{consumerAckBeforeCommit, []string{"consumer/ack-after-commit", "consumer/commit-failure", "consumer/handler-error"}},
		{consumerAckOnError, []string{"consumer/commit-failure", "consumer/handler-error", "consumer/retention",
			"consumer/poison-undecodable", "consumer/poison-digest-conflict"}},
		{consumerAckThenRetry, []string{"consumer/commit-failure", "consumer/handler-error"}},
	} {
		t.Run(string(c.variant), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestConsumerSuite$", "-test.v", "-test.count=1", "-test.timeout=5m")
			cmd.Env = append(os.Environ(), consumerVariantEnv+"="+string(c.variant))
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("could not run the child: %v", err)
			}
			if err == nil {
				t.Fatalf("the consumer suite PASSED a consumer that does %s; output:\n%s", c.variant, tail(out))
			}
			for _, sub := range c.fail {
				if !regexp.MustCompile(`--- FAIL: TestConsumerSuite/` + regexp.QuoteMeta(sub) + ` `).Match(out) {
					t.Errorf("the suite failed the %s consumer, but not in subtest %s; output:\n%s", c.variant, sub, tail(out))
				}
			}
			if regexp.MustCompile(`--- FAIL: TestConsumerSuite/consumer/(apply-and-ack|version-gate) `).Match(out) {
				t.Errorf("the %s consumer failed a case its fault does not touch; output:\n%s", c.variant, tail(out))
			}
			t.Logf("%s: failing subtests: %s", c.variant, regexp.MustCompile(`--- FAIL: TestConsumerSuite/\S+/\S+`).FindAll(out, -1))
		})
	}
}
