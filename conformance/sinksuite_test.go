package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
	"github.com/outboxkit/outbox/sinks/memory"
)

// The sink suite proves itself as the adapter suite does (selftest_test.go): it must pass a
// correct in-memory sink and fail sinks that break one rule each. TestSinkSuite runs RunSink
// against the healthy sink; TestSinkSuiteProvesItself re-executes this test binary once per
// broken variant, with -test.run=^TestSinkSuite$ and the variant in an environment variable,
// and checks which subtests failed.

const sinkVariantEnv = "OUTBOXKIT_CONFORMANCE_SINK_VARIANT"

// maxBytes is the size limit of the healthy sink.
const maxBytes = 16 << 10

var errTooLarge = errors.New("selftest sink: message too large")

// limited is the healthy sink: the in-memory broker (package sinks/memory) behind a size limit,
// which package sinks/batcher applies with the per-key prefix rule.
type limited struct{ b *memory.Broker }

func (s limited) Send(ctx context.Context, msgs []core.Message) []error {
	items := make([]batcher.Item, len(msgs))
	for i, m := range msgs {
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		if len(m.Payload) > maxBytes {
			items[i].Err = core.Permanent(fmt.Errorf("event %s: %w", m.ID, errTooLarge))
		}
	}
	return batcher.Run(ctx, items, batcher.Options{}, func(ctx context.Context, _ string, idx []int) []error {
		part := make([]core.Message, len(idx))
		for k, i := range idx {
			part[k] = msgs[i]
		}
		return s.b.Send(ctx, part)
	})
}

// A variant wraps the healthy sink into one that breaks one rule.
var sinkVariants = map[string]func(base core.Sink) core.Sink{
	"": func(base core.Sink) core.Sink { return base },
	// One outcome short.
	"drop-outcome": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			out := base.Send(ctx, msgs)
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			return out
		})
	},
	// Sends each call's messages in reverse order.
	"reorder-key": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			rev := slices.Clone(msgs)
			slices.Reverse(rev)
			out := base.Send(ctx, rev)
			slices.Reverse(out)
			return out
		})
	},
	// Reports permanent refusals as retryable ones.
	"swallow-permanent": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			out := base.Send(ctx, msgs)
			for i, err := range out {
				if core.IsPermanent(err) {
					out[i] = errors.New(err.Error())
				}
			}
			return out
		})
	},
	// Sends each message on its own, so that a message is sent and acknowledged after a
	// failed one of its key.
	"ack-after-failure": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			out := make([]error, len(msgs))
			for i := range msgs {
				out[i] = base.Send(ctx, msgs[i:i+1])[0]
			}
			return out
		})
	},
	// Acknowledges every message of a call whose context is cancelled, without sending.
	"ack-on-cancel": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			if ctx.Err() != nil {
				return core.Outcomes(len(msgs), nil)
			}
			return base.Send(ctx, msgs)
		})
	},
	// Notices a cancelled context only after a while.
	"slow-cancel": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			if ctx.Err() != nil {
				time.Sleep(2 * slowCancel)
			}
			return base.Send(ctx, msgs)
		})
	},
	// Loses the event headers.
	"drop-headers": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			msgs = slices.Clone(msgs)
			for i := range msgs {
				msgs[i].Headers = nil
			}
			return base.Send(ctx, msgs)
		})
	},
	// Gives the broker the sequence number as the deduplication id.
	"dedup-seq": func(base core.Sink) core.Sink {
		return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
			msgs = slices.Clone(msgs)
			for i := range msgs {
				msgs[i].DedupID = fmt.Sprint("seq-", msgs[i].Seq)
			}
			return base.Send(ctx, msgs)
		})
	},
	// Numbers its requests with an unsynchronized counter; the broker drops (and
	// acknowledges) a request whose number it has seen, as a deduplicated retry.
	"racy": func(base core.Sink) core.Sink { return &racy{base: base, seen: map[int]bool{}} },
}

// slowCancel is the CancelTimeout of the broken variants.
const slowCancel = time.Second

type racy struct {
	base core.Sink
	next int // shared by every Send, without a lock: the bug

	mu   sync.Mutex // the broker's side
	seen map[int]bool
}

func (s *racy) Send(ctx context.Context, msgs []core.Message) []error {
	id := s.next
	runtime.Gosched()
	s.next = id + 1
	s.mu.Lock()
	dup := s.seen[id]
	s.seen[id] = true
	s.mu.Unlock()
	if dup {
		return core.Outcomes(len(msgs), nil)
	}
	return s.base.Send(ctx, msgs)
}

// memoryFixture returns the in-memory broker as a fixture: Received drains its delivery
// channel; the Reject hooks use Broker.Reject.
func memoryFixture(t *testing.T, wrap func(*memory.Broker) core.Sink) conformance.SinkFixture {
	b, err := memory.NewBroker(&memory.Options{Buffer: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	var got []conformance.ReceivedMessage
	return conformance.SinkFixture{
		Sink:        wrap(b),
		Destination: "selftest",
		Received: func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
			for len(got) < atLeast {
				select {
				case m := <-b.Deliveries():
					got = append(got, conformance.ReceivedMessage{EventID: m.ID, Payload: m.Payload, Headers: m.Headers, Key: m.GroupID, DedupID: m.DedupID})
				case <-ctx.Done():
					return slices.Clone(got), nil
				}
			}
			return slices.Clone(got), nil
		},
		RejectPermanent: func(m *core.Message) { b.Reject(m.ID, core.Permanent(errors.New("selftest: refused"))) },
		RejectRetryable: func(m *core.Message) { b.Reject(m.ID, errors.New("selftest: busy")) },
	}
}

// TestSinkSuite runs RunSink against the healthy sink, or, in a child process of
// TestSinkSuiteProvesItself, against the broken variant named by the environment.
func TestSinkSuite(t *testing.T) {
	name := os.Getenv(sinkVariantEnv)
	variant, ok := sinkVariants[name]
	if !ok {
		t.Fatalf("unknown sink variant %q", name)
	}
	h := conformance.SinkHarness{
		New: func(t *testing.T) conformance.SinkFixture {
			return memoryFixture(t, func(b *memory.Broker) core.Sink { return variant(limited{b}) })
		},
		Ordered:         true,
		DedupID:         true, // a delivery carries the core.Message the broker was given
		MaxMessageBytes: maxBytes,
		ErrTooLarge:     errTooLarge,
	}
	if name != "" {
		h.Timeout, h.ReadTimeout, h.CancelTimeout = 20*time.Second, 2*time.Second, slowCancel
	}
	conformance.RunSink(t, h)
}

func TestSinkSuiteProvesItself(t *testing.T) {
	for _, c := range []struct {
		variant string
		fail    []string // subtests ("area/case") that must fail
	}{
		{"drop-outcome", []string{"outcomes/count", "roundtrip/bytes", "prefix/permanent", "concurrent/sends", "order/per-key"}},
		{"reorder-key", []string{"order/per-key"}},
		{"swallow-permanent", []string{"classify/permanent", "classify/oversize"}},
		{"ack-after-failure", []string{"prefix/permanent", "prefix/retryable", "prefix/oversize"}},
		{"ack-on-cancel", []string{"cancel/before"}},
		{"slow-cancel", []string{"cancel/before"}},
		{"drop-headers", []string{"roundtrip/bytes"}},
		{"dedup-seq", []string{"dedup/event-id"}},
		{"racy", []string{"concurrent/sends"}},
	} {
		t.Run(c.variant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSinkSuite$", "-test.v", "-test.count=1", "-test.timeout=2m")
			cmd.Env = append(os.Environ(), sinkVariantEnv+"="+c.variant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("could not run the child: %v", err)
			}
			if err == nil {
				t.Fatalf("the sink suite PASSED the %s sink; output:\n%s", c.variant, tail(out))
			}
			for _, sub := range c.fail {
				if !regexp.MustCompile(`--- FAIL: TestSinkSuite/` + regexp.QuoteMeta(sub) + ` `).Match(out) {
					t.Errorf("the sink suite failed the %s sink, but not in subtest %s; output:\n%s", c.variant, sub, tail(out))
				}
			}
			failed := regexp.MustCompile(`--- FAIL: TestSinkSuite/\S+/\S+`).FindAll(out, -1)
			t.Logf("%s: failing subtests: %s", c.variant, failed)
		})
	}
}
