package webhook

import (
	"time"
)

// DecodeRequest is decodeRequest, for the tests.
var DecodeRequest = decodeRequest

// SetClock sets the clock of a Receiver, for the tolerance tests.
func (rc *Receiver[TTx]) SetClock(now func() time.Time) { rc.now = now }
