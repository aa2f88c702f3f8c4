package testkit_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/internal/testkit"
)

// TestNeed runs a child test with the variable unset, with and without CI, and checks that it
// skips outside CI and fails under CI.
func TestNeed(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		testkit.Need(t, "OUTBOXKIT_TESTENV_UNSET")
		t.Log("reached after Need: the variable was set")
		return
	}
	t.Setenv("OUTBOXKIT_TESTENV_UNSET", "value")
	if got := testkit.Need(t, "OUTBOXKIT_TESTENV_UNSET"); got != "value" {
		t.Fatalf("Need = %q, want value", got)
	}
	requireSkipsOutsideCIFailsUnderCI(t, "TestNeed", "OUTBOXKIT_TESTENV_UNSET=")
}

// requireSkipsOutsideCIFailsUnderCI runs the test named test again as a child (TESTENV_CHILD=1,
// plus env) without and with CI, and checks that it skips, then fails.
func requireSkipsOutsideCIFailsUnderCI(t *testing.T, test string, env ...string) {
	t.Helper()
	for _, ci := range []string{"", "true"} {
		cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.v")
		cmd.Env = append(append(os.Environ(), "TESTENV_CHILD=1", "CI="+ci), env...)
		out, err := cmd.CombinedOutput()
		switch {
		case ci == "" && (err != nil || !strings.Contains(string(out), "--- SKIP")):
			t.Fatalf("without CI the child must skip; err=%v\n%s", err, out)
		case ci != "" && (err == nil || !strings.Contains(string(out), "--- FAIL")):
			t.Fatalf("under CI the child must fail; err=%v\n%s", err, out)
		}
	}
}

// TestNeedCommand: a present program's path is returned; a missing one skips the child test
// outside CI and fails it under CI.
func TestNeedCommand(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		testkit.NeedCommand(t, "outboxkit-no-such-program", "nothing installs it")
		t.Log("reached after NeedCommand")
		return
	}
	if got := testkit.NeedCommand(t, "sh", "it is everywhere"); !strings.HasSuffix(got, "/sh") {
		t.Fatalf("NeedCommand(sh) = %q", got)
	}
	requireSkipsOutsideCIFailsUnderCI(t, "TestNeedCommand")
}
