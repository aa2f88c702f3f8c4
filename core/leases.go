package core

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core/driver"
)

// leaseKeeper makes a relay's lane calls to its store: it takes the publisher generation that
// fences them and claims, renews and releases leases with the relay's owner, lease length and
// clock. Both relays use it; each keeps the leases it holds and decides how many lanes it wants
// (the polling relay its fair share, the CDC relay every lane) and what a lost lease means.
type leaseKeeper struct {
	store driver.RelayStore
	owner string
	ttl   time.Duration
	clock func() time.Time // a test's clock (internal/testhook.SetClock); nil: the database's
	inst  *relayInstruments
	gen   atomic.Int64 // the publisher generation Run acquired; 0 before
}

// now is the Now of a store call: the test's clock when one is set, else zero (the database
// clock).
func (k *leaseKeeper) now() time.Time { return storeNow(k.clock) }

// acquire takes the outbox's publisher generation for kind: a polling relay joins the current
// polling generation (its fleet shares one); a CDC relay always takes a new one, which fences
// every earlier publisher.
func (k *leaseKeeper) acquire(ctx context.Context, kind string) (driver.Publisher, error) {
	pub, err := k.store.AcquireGeneration(ctx, driver.AcquireParams{Kind: kind, Holder: k.owner, Join: kind == driver.KindPolling, Now: k.now()})
	if err == nil {
		k.gen.Store(pub.Generation)
	}
	return pub, err
}

// claim takes up to max free or expired lanes and counts them in the instruments. It returns
// the leases and how many of them were taken over from an expired lease.
func (k *leaseKeeper) claim(ctx context.Context, max int) ([]driver.Lease, int, error) {
	got, err := k.store.ClaimLanes(ctx, driver.ClaimParams{Generation: k.gen.Load(), Owner: k.owner, Max: max, TTL: k.ttl, Now: k.now()})
	if err != nil {
		return nil, 0, err
	}
	return got, k.inst.claimed(ctx, got), nil
}

// renew extends the given leases and returns those still held; the others are lost.
func (k *leaseKeeper) renew(ctx context.Context, held []driver.Lease) ([]driver.Lease, error) {
	return k.store.RenewLanes(ctx, driver.RenewParams{Generation: k.gen.Load(), Leases: held, TTL: k.ttl, Now: k.now()})
}

// release frees the given leases that are still held, so that another relay may claim them at
// once.
func (k *leaseKeeper) release(ctx context.Context, leases []driver.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	return k.store.ReleaseLanes(ctx, leases)
}

// heartbeat registers the owner as live for ttl (ttl <= 0 deregisters it) and returns the
// number of live workers.
func (k *leaseKeeper) heartbeat(ctx context.Context, ttl time.Duration) (int, error) {
	return k.store.Heartbeat(ctx, driver.HeartbeatParams{Owner: k.owner, TTL: ttl, Now: k.now()})
}
