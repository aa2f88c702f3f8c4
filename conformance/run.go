package conformance

import (
	"testing"
)

// Run runs the whole suite against the adapter that h builds. Each area is a subtest
// (write, lanes, fencing, delivery, retry, cleanup, inbox); each case in it has a stable name.
func Run[TTx any](t *testing.T, h Harness[TTx]) {
	t.Helper()
	if h.New == nil || h.Effect == nil || h.EffectCount == nil {
		t.Fatal("conformance: Harness.New, Effect and EffectCount are required")
	}
	// The areas are added by the files of this package, one file per area.
}
