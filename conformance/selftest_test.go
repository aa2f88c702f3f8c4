package conformance_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
)

// The suite proves itself: it must pass the in-memory reference adapter and fail adapters
// that break one guarantee each. Each run happens in a child process (this test binary,
// re-executed with -test.run=^TestSuiteChild$ and the variant in an environment variable), so
// that a failing suite is observed from outside, exactly as CI would see it.

const variantEnv = "OUTBOXKIT_CONFORMANCE_SELFTEST_VARIANT"

var variants = map[string]memory.Fault{
	"healthy":             memory.NoFault,
	"unfenced-settle":     memory.FaultUnfencedSettle,
	"shared-lanes":        memory.FaultSharedLanes,
	"no-inbox-key":        memory.FaultNoInboxKey,
	"prune-unpublished":   memory.FaultPruneUnpublished,
	"unheld-horizon":      memory.FaultUnheldHorizon,
	"racy-settle":         memory.FaultRacySettle,
	"no-key-blocking":     memory.FaultNoKeyBlocking,
	"unfenced-generation": memory.FaultUnfencedGeneration,
	"resume-at-head":      memory.FaultResumeAtHead,
	"position-ahead":      memory.FaultPositionAhead,
}

func harness(fault memory.Fault) conformance.Harness[*memory.Tx] {
	h := conformance.Harness[*memory.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*memory.Tx] {
			s, err := memory.New(&memory.Options{Lanes: lanes, Fault: fault, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Effect: func(ctx context.Context, tx *memory.Tx, key string) error { return tx.Incr(key) },
		CDC: &conformance.CDCHarness[*memory.Tx]{
			Source: func(t *testing.T, a conformance.Adapter[*memory.Tx], name string) core.ChangeSource {
				return a.(*memory.Store).ChangeSource()
			},
			LosePosition: func(t *testing.T, a conformance.Adapter[*memory.Tx], src core.ChangeSource) {
				a.(*memory.Store).PurgeLog()
			},
		},
		EffectCount: func(ctx context.Context, a conformance.Adapter[*memory.Tx], key string) (int, error) {
			return a.(*memory.Store).Counter(key), nil
		},
	}
	if fault != memory.NoFault {
		// A broken adapter may make a test wait for something that never happens.
		h.Timeout = 10 * time.Second
	}
	return h
}

// TestSuiteChild runs the suite against the variant named by the environment; it only runs
// as the child process of TestSuiteProvesItself.
func TestSuiteChild(t *testing.T) {
	name := os.Getenv(variantEnv)
	if name == "" {
		t.Skip("helper of TestSuiteProvesItself; runs only in its child process")
	}
	fault, ok := variants[name]
	if !ok {
		t.Fatalf("unknown variant %q", name)
	}
	conformance.Run(t, harness(fault))
}

func TestSuiteProvesItself(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite eight times in child processes")
	}
	for _, c := range []struct {
		variant string
		fail    []string // subtests ("area/case") that must fail; none = the suite must pass
	}{
		{"healthy", nil},
		{"unfenced-settle", []string{"fencing/stale-settle", "fencing/expired", "fencing/race"}},
		{"shared-lanes", []string{"lanes/exclusive"}},
		{"no-inbox-key", []string{"inbox/concurrent-once"}},
		{"prune-unpublished", []string{"cleanup/retention"}},
		{"unheld-horizon", []string{"inbox/horizon-blocks-prune"}},
		{"racy-settle", []string{"fencing/race"}},
		{"no-key-blocking", []string{"retry/fetch-blocking", "delivery/order"}},
		{"unfenced-generation", []string{"publisher/stale-claim-and-renew", "publisher/checkpoint-fenced", "publisher/polling-relay-fenced", "cdc/cutover"}},
		{"resume-at-head", []string{"cdc/lost-position-backfill"}},
		{"position-ahead", []string{"cdc/crash-points"}},
	} {
		t.Run(c.variant, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestSuiteChild$", "-test.v", "-test.count=1", "-test.timeout=5m", "-test.parallel=8")
			cmd.Env = append(os.Environ(), variantEnv+"="+c.variant)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if err != nil && !errors.As(err, &exit) {
				t.Fatalf("could not run the child: %v", err)
			}
			if len(c.fail) == 0 {
				if err != nil || !regexp.MustCompile(`(?m)^--- PASS: TestSuiteChild`).Match(out) {
					t.Fatalf("the suite failed the healthy memory adapter (%v):\n%s", err, tail(out))
				}
				return
			}
			if err == nil {
				t.Fatalf("the suite PASSED an adapter with %s; output:\n%s", c.variant, tail(out))
			}
			for _, sub := range c.fail {
				if !regexp.MustCompile(`--- FAIL: TestSuiteChild/` + regexp.QuoteMeta(sub) + ` `).Match(out) {
					t.Errorf("the suite failed the %s adapter, but not in subtest %s; output:\n%s", c.variant, sub, tail(out))
				}
			}
			failed := regexp.MustCompile(`--- FAIL: TestSuiteChild/\S+/\S+`).FindAll(out, -1)
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
