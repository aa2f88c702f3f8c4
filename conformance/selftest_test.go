package conformance_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
)

// The suite proves itself: it must pass the in-memory reference adapter and fail adapters
// that break one guarantee each (the wrappers of faulty_test.go, in variable broken).
// TestSuite runs the suite against the healthy adapter; TestSuiteProvesItself re-executes this
// test binary once per broken variant, with -test.run=^TestSuite$ and the variant in an
// environment variable, so that a failing suite is observed from outside, exactly as CI would
// see it. Nothing is skipped.

const variantEnv = "OUTBOXKIT_CONFORMANCE_SELFTEST_VARIANT"

// declarations are the variants whose adapter is healthy but whose harness declares its
// capabilities wrongly (Harness.Capabilities): the "capabilities" subtest must fail them.
var declarations = map[string]conformance.Capability{
	// The store implements driver.OperatorStore, which the harness leaves out: the operator
	// area would pass with nothing checked.
	"undeclared-capability": memoryCapabilities &^ conformance.OperatorStore,
	// The harness declares driver.PartitionPruner, which the store does not implement.
	"declared-missing-capability": memoryCapabilities | conformance.PartitionPruner,
}

// TestSuite runs the suite against the healthy memory adapter, or, in a child process of
// TestSuiteProvesItself, against the broken variant named by the environment.
func TestSuite(t *testing.T) {
	name := os.Getenv(variantEnv)
	if caps, ok := declarations[name]; ok {
		h := harness(nil)
		h.Capabilities = caps
		conformance.Run(t, h)
		return
	}
	wrap, ok := broken[name]
	if !ok && name != "" {
		t.Fatalf("unknown variant %q", name)
	}
	conformance.Run(t, harness(wrap))
}

// memoryCapabilities are the optional capabilities of the memory store.
const memoryCapabilities = conformance.Notifier | conformance.Waker | conformance.OperatorStore | conformance.LaneResizer |
	conformance.SingleWriter | conformance.LaneInserter | conformance.CheckpointStore |
	conformance.LogReleaser | conformance.InboxBatchStore | conformance.InboxReader |
	conformance.CheckpointReleaser | conformance.AuditWriter | conformance.IngressCounter

// harness is the memory adapter's harness; wrap, when not nil, wraps each store New returns
// as one of the broken variants.
func harness(wrap func(*memory.Store) conformance.Adapter[*memory.Tx]) conformance.Harness[*memory.Tx] {
	h := conformance.Harness[*memory.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*memory.Tx] {
			s, err := memory.New(&memory.Options{Lanes: lanes, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if wrap != nil {
				return wrap(s)
			}
			return s
		},
		Effect:       func(ctx context.Context, tx *memory.Tx, key string) error { return tx.Incr(key) },
		Capabilities: memoryCapabilities,
		NewForeign: func(t *testing.T, _ conformance.Adapter[*memory.Tx]) conformance.Adapter[*memory.Tx] {
			s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		CDC: &conformance.CDCHarness[*memory.Tx]{
			Source: func(t *testing.T, a conformance.Adapter[*memory.Tx], name string) driver.ChangeSource {
				// A wrapper may override ChangeSource (resume-at-head, position-ahead).
				return a.(interface{ ChangeSource() driver.ChangeSource }).ChangeSource()
			},
			LosePosition: func(t *testing.T, a conformance.Adapter[*memory.Tx], src driver.ChangeSource) {
				a.(interface{ PurgeLog() }).PurgeLog()
			},
		},
		EffectCount: func(ctx context.Context, a conformance.Adapter[*memory.Tx], key string) (int, error) {
			return a.(interface{ Counter(key string) int }).Counter(key), nil
		},
	}
	if wrap != nil {
		// A broken adapter may make a test wait for something that never happens.
		h.Timeout = 10 * time.Second
	}
	return h
}

func TestSuiteProvesItself(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite ten times in child processes")
	}
	for _, c := range []struct {
		variant string
		fail    []string // subtests ("area/case") that must fail
		say     string   // a line the output must hold, when not empty
	}{
		{"unfenced-settle", []string{"fencing/stale-settle", "fencing/expired", "fencing/race"}, ""},
		{"shared-lanes", []string{"lanes/exclusive"}, ""},
		{"no-inbox-key", []string{"inbox/concurrent-once"}, ""},
		{"unscoped-inbox-key", []string{"inbox/tenants"}, ""},
		{"prune-unpublished", []string{"cleanup/retention"}, ""},
		// Memory's PruneInbox waits for open transactions, and a wrapper cannot make it not
		// wait, so the broken horizon is a stale one across transactions: the subtest fails at
		// "redelivery after the prune" (the old message is applied again), not in its
		// transaction.
		{"stale-horizon", []string{"inbox/horizon-after-insert"}, ""},
		{"racy-settle", []string{"fencing/race"}, ""},
		{"no-key-blocking", []string{"retry/fetch-blocking", "delivery/order"}, ""},
		{"unfenced-generation", []string{"publisher/stale-claim-and-renew", "publisher/checkpoint-fenced", "publisher/polling-relay-fenced", "cdc/cutover"}, ""},
		{"resume-at-head", []string{"cdc/lost-position-backfill"}, ""},
		{"position-ahead", []string{"cdc/crash-points"}, ""},
		{"undeclared-capability", []string{"capabilities"}, "implements driver.OperatorStore but Harness.Capabilities does not declare it: add conformance.OperatorStore to Harness.Capabilities"},
		{"declared-missing-capability", []string{"capabilities"}, "declares driver.PartitionPruner but *memory.Store does not implement it"},
	} {
		t.Run(c.variant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuite$", "-test.v", "-test.count=1", "-test.timeout=5m", "-test.parallel=8")
			cmd.Env = append(os.Environ(), variantEnv+"="+c.variant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("could not run the child: %v", err)
			}
			if err == nil {
				t.Fatalf("the suite PASSED an adapter with %s; output:\n%s", c.variant, tail(out))
			}
			for _, sub := range c.fail {
				if !regexp.MustCompile(`--- FAIL: TestSuite/` + regexp.QuoteMeta(sub) + ` `).Match(out) {
					t.Errorf("the suite failed the %s adapter, but not in subtest %s; output:\n%s", c.variant, sub, tail(out))
				}
			}
			if c.say != "" && !strings.Contains(string(out), c.say) {
				t.Errorf("the output for %s does not say %q; output:\n%s", c.variant, c.say, tail(out))
			}
			failed := regexp.MustCompile(`--- FAIL: TestSuite/\S+`).FindAll(out, -1)
			t.Logf("%s: failing subtests: %s", c.variant, failed)
		})
	}
}

// tail returns the end of a child's output, enough for a failure message.
func tail(out []byte) string {
	const max = 32 << 10
	if len(out) > max {
		return "...\n" + string(out[len(out)-max:])
	}
	return string(out)
}
