// Package testhook holds the module's test hooks, kept out of the public API (as River keeps
// its test signals private): the clock of core's relays, shadow and cleanup. The package that
// owns the hooked code installs the function below when it is initialised; only tests call it.
// (The broken adapters of the conformance self-test are test-only wrappers of the memory
// adapter, in conformance/faulty_test.go, not hooks.)
package testhook

import "time"

// SetClock makes opts (a *core.RelayOptions, *core.CDCOptions, *core.ShadowOptions or
// *core.CleanupOptions) use now as the time of every store call and cut-off that would
// otherwise use the database clock (or, for the shadow, time.Now). Package core installs it.
var SetClock func(opts any, now func() time.Time)
