package conformance

import (
	"context"
	"errors"
	"github.com/outboxkit/outbox/core/driver"
	"sync/atomic"
)

// ErrCrashed is what every call of a CrashStore returns after Crash.
var ErrCrashed = errors.New("conformance: relay process crashed")

// CrashStore is the store of a relay process that can die at any point: it passes every call to
// the wrapped store until Crash, and from then on fails every call with ErrCrashed, as if the
// process had died between two statements. The dead relay neither marks, nor releases its
// leases, nor deregisters, nor saves a checkpoint; its leases expire and other relays take over.
// It implements driver.CDCStore (the checkpoint calls need a wrapped driver.CheckpointStore) and
// driver.Waker (forwarded when the wrapped store has it), and hides the other capabilities.
// The suite's crash tests, the demo's chaos and the SQS deployment test use it.
type CrashStore struct {
	inner   driver.RelayStore
	crashed atomic.Bool
	// AfterCheckpoint, when set, is called after each checkpoint the wrapped store saved: a
	// test that crashes the process right after a checkpoint calls Crash there.
	AfterCheckpoint func()
}

// NewCrashStore returns a CrashStore around inner.
func NewCrashStore(inner driver.RelayStore) *CrashStore { return &CrashStore{inner: inner} }

// Crash makes every later call fail with ErrCrashed.
func (c *CrashStore) Crash() { c.crashed.Store(true) }

// Crashed reports whether Crash was called.
func (c *CrashStore) Crashed() bool { return c.crashed.Load() }

// Interface checks.
var (
	_ driver.CDCStore = (*CrashStore)(nil)
	_ driver.Waker    = (*CrashStore)(nil)
)

// call runs fn unless the process crashed.
func call[T any](c *CrashStore, fn func() (T, error)) (T, error) {
	if c.crashed.Load() {
		var zero T
		return zero, ErrCrashed
	}
	return fn()
}

// LaneCount implements driver.RelayStore.
func (c *CrashStore) LaneCount(ctx context.Context) (int, error) {
	return call(c, func() (int, error) { return c.inner.LaneCount(ctx) })
}

// AcquireGeneration implements driver.RelayStore.
func (c *CrashStore) AcquireGeneration(ctx context.Context, p driver.AcquireParams) (driver.Publisher, error) {
	return call(c, func() (driver.Publisher, error) { return c.inner.AcquireGeneration(ctx, p) })
}

// Heartbeat implements driver.RelayStore.
func (c *CrashStore) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
	return call(c, func() (int, error) { return c.inner.Heartbeat(ctx, p) })
}

// ClaimLanes implements driver.RelayStore.
func (c *CrashStore) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	return call(c, func() ([]driver.Lease, error) { return c.inner.ClaimLanes(ctx, p) })
}

// RenewLanes implements driver.RelayStore.
func (c *CrashStore) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	return call(c, func() ([]driver.Lease, error) { return c.inner.RenewLanes(ctx, p) })
}

// ReleaseLanes implements driver.RelayStore.
func (c *CrashStore) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	_, err := call(c, func() (struct{}, error) { return struct{}{}, c.inner.ReleaseLanes(ctx, leases) })
	return err
}

// Fetch implements driver.RelayStore.
func (c *CrashStore) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	return call(c, func() ([]driver.Record, error) { return c.inner.Fetch(ctx, p) })
}

// Settle implements driver.RelayStore.
func (c *CrashStore) Settle(ctx context.Context, p driver.SettleParams) error {
	_, err := call(c, func() (struct{}, error) { return struct{}{}, c.inner.Settle(ctx, p) })
	return err
}

var errNoCheckpoints = errors.New("conformance: the wrapped store has no checkpoint")

// LoadCheckpoint implements driver.CheckpointStore.
func (c *CrashStore) LoadCheckpoint(ctx context.Context) (driver.Checkpoint, bool, error) {
	cs, ok := c.inner.(driver.CheckpointStore)
	if !ok {
		return driver.Checkpoint{}, false, errNoCheckpoints
	}
	if c.crashed.Load() {
		return driver.Checkpoint{}, false, ErrCrashed
	}
	return cs.LoadCheckpoint(ctx)
}

// SaveCheckpoint implements driver.CheckpointStore; AfterCheckpoint runs after a successful save.
func (c *CrashStore) SaveCheckpoint(ctx context.Context, cp driver.Checkpoint) error {
	cs, ok := c.inner.(driver.CheckpointStore)
	if !ok {
		return errNoCheckpoints
	}
	_, err := call(c, func() (struct{}, error) { return struct{}{}, cs.SaveCheckpoint(ctx, cp) })
	if err == nil && c.AfterCheckpoint != nil {
		c.AfterCheckpoint()
	}
	return err
}

// Wakeups implements driver.Waker when the wrapped store does.
func (c *CrashStore) Wakeups(ctx context.Context) (<-chan struct{}, error) {
	w, ok := c.inner.(driver.Waker)
	if !ok {
		return nil, errors.New("conformance: the wrapped store has no wake-ups")
	}
	return call(c, func() (<-chan struct{}, error) { return w.Wakeups(ctx) })
}
