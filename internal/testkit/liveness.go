package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/stretchr/testify/require"
)

// LivenessStore is a RelayStore with the driver.Liveness capability.
type LivenessStore interface {
	driver.RelayStore
	driver.Liveness
}

// LivenessTakeover checks driver.Liveness on two stores of one freshly migrated 4-lane outbox:
// the lanes of an owner holding a sign of life can be claimed as soon as its session ends, long
// before their leases expire; while the session lives (an owner alive but slow) they cannot;
// leases taken without a sign of life still wait for expiry; the old holder is fenced. kill ends
// the database session that holds the sign of life of the given lane's lease (the test's
// stand-in for a SIGKILLed process).
func LivenessTakeover(t *testing.T, holder, claimer LivenessStore, kill func(ctx context.Context, lane int) error) {
	t.Helper()
	ctx := t.Context()
	life, err := holder.HoldLiveness(ctx, "old")
	require.NoError(t, err)
	defer func() { require.NoError(t, life.Release()) }()
	old, err := holder.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, old, 2)
	require.NoError(t, life.Check(ctx))
	plain, err := holder.ClaimLanes(ctx, driver.ClaimParams{Owner: "plain", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, plain, 2)

	got, err := claimer.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, got, "the holders are alive")

	require.NoError(t, kill(ctx, old[0].Lane))
	require.Eventually(t, func() bool {
		got, err = claimer.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 4, TTL: time.Hour})
		return err == nil && len(got) > 0
	}, 10*time.Second, 20*time.Millisecond, "the dead session's lanes come free")
	require.Len(t, got, 2, "only the lanes of the dead session, not those leased without a sign of life")
	for i := range got {
		require.Equal(t, old[i].Lane, got[i].Lane)
		require.Equal(t, old[i].Generation+1, got[i].Generation)
	}
	require.Error(t, life.Check(ctx), "the sign of life is gone")
	renewed, err := holder.RenewLanes(ctx, driver.RenewParams{Leases: old, TTL: time.Hour})
	require.NoError(t, err)
	require.Empty(t, renewed, "the old holder is fenced")
	renewed, err = holder.RenewLanes(ctx, driver.RenewParams{Leases: plain, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, renewed, 2)
}
