package core

import (
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/testhook"
)

// The clock is a test hook, not an option: tests set it through internal/testhook.SetClock.
func init() {
	testhook.SetClock = func(opts any, now func() time.Time) {
		switch o := opts.(type) {
		case *RelayOptions:
			o.now = now
		case *CDCOptions:
			o.now = now
		case *ShadowOptions:
			o.now = now
		case *CleanupOptions:
			o.now = now
		default:
			panic(fmt.Sprintf("testhook.SetClock: %T has no clock", opts))
		}
	}
}

// storeNow is the Now of a store call: now() when a test set a clock, else zero (the
// database clock).
func storeNow(now func() time.Time) time.Time {
	if now != nil {
		return now()
	}
	return time.Time{}
}
