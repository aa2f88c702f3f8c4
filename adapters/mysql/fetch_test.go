package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Per-key blocking with more blocked keys than Fetch inlines (the NOT EXISTS form), on a
// subset of lanes, with an injected clock.
func TestFetchManyBlockedKeys(t *testing.T) {
	t.Parallel()
	s := newStore(t, &mysql.Options{Lanes: 4})
	ctx := t.Context()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	require.NoError(t, err)
	const blocked, healthy = 80, 6
	var evs []core.Event
	for round := range 2 {
		for k := range blocked + healthy {
			evs = append(evs, core.Event{AggregateType: "k", AggregateID: fmt.Sprint(k), Type: "t", Payload: []byte(fmt.Sprint(round))})
		}
	}
	require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		evs, err = ob.Write(ctx, tx, evs...) // as stored: partition keys filled in
		return err
	}))
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	all, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 4, TTL: time.Hour, Now: t0})
	require.NoError(t, err)
	require.Len(t, all, 4)

	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: all, Limit: 1000, Now: t0})
	require.NoError(t, err)
	require.Len(t, recs, len(evs))
	// Fail the first record of the first 80 keys: 79 retry in an hour, one is parked.
	var fails []driver.Failure
	for _, r := range recs[:blocked] {
		fails = append(fails, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "boom", Delay: time.Hour, Park: r.AggregateID == "0"})
	}
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: all, Failed: fails, Now: t0}))

	isHealthy := func(r driver.Record) bool {
		var k int
		_, _ = fmt.Sscan(r.AggregateID, &k)
		return k >= blocked
	}
	check := func(leases []driver.Lease, now time.Time) {
		t.Helper()
		lanes := map[int]bool{}
		for _, l := range leases {
			lanes[l.Lane] = true
		}
		recs, err := s.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 1000, Now: now})
		require.NoError(t, err)
		want := 0
		for _, ev := range evs {
			if lanes[driver.LaneOf(ev.PartitionKey, 4)] {
				want++
			}
		}
		got := map[string]int{}
		for i, r := range recs {
			require.True(t, lanes[r.Lane], "record of a lane not leased")
			if i > 0 {
				require.Less(t, recs[i-1].Seq, r.Seq, "seq order")
			}
			got[r.PartitionKey]++
			if !isHealthy(r) && now.Before(t0.Add(time.Hour)) {
				t.Fatalf("record %d of blocked key %s fetched before it is due", r.Seq, r.PartitionKey)
			}
			require.NotEqual(t, "k/0", r.PartitionKey, "the parked key stays blocked")
		}
		for key, n := range got {
			require.Equal(t, 2, n, key)
		}
		if now.Before(t0.Add(time.Hour)) {
			wantHealthy := 0
			for _, ev := range evs {
				var k int
				_, _ = fmt.Sscan(ev.AggregateID, &k)
				if k >= blocked && lanes[driver.LaneOf(ev.PartitionKey, 4)] {
					wantHealthy++
				}
			}
			require.Equal(t, wantHealthy, len(recs), "only the healthy keys of the leased lanes")
		} else {
			// due again: everything of the leased lanes but the parked key.
			parkedHere := 0
			if lanes[driver.LaneOf("k/0", 4)] {
				parkedHere = 2
			}
			require.Equal(t, want-parkedHere, len(recs))
		}
	}
	check(all, t0.Add(time.Minute))
	check(all[:2], t0.Add(time.Minute))
	check(all, t0.Add(2*time.Hour))
	check(all[1:3], t0.Add(2*time.Hour))

	n, err := s.Unpark(ctx, "k/0")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	recs, err = s.Fetch(ctx, driver.FetchParams{Leases: all, Limit: 1000, Now: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.Len(t, recs, len(evs))
}
