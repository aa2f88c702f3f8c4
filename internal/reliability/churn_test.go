package reliability_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// envSeconds reads a duration in whole seconds from the environment variable name, or def.
func envSeconds(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s must be a whole number of seconds", name)
	require.Positive(t, n, "%s must be positive", name)
	return time.Duration(n) * time.Second
}

// databases lists every database the cross-adapter tests run on.
func databases() []struct {
	name string
	open func(t *testing.T, lanes int) db
} {
	return []struct {
		name string
		open func(t *testing.T, lanes int) db
	}{
		{"memory", memoryDB},
		{"sqlite", sqliteDB},
		{"postgres/skip_locked", func(t *testing.T, l int) db { return postgresDB(t, l, postgres.ClaimSkipLocked) }},
		{"postgres/advisory_lock", func(t *testing.T, l int) db { return postgresDB(t, l, postgres.ClaimAdvisoryLock) }},
		{"postgres/pgbouncer_tx", pgbouncerDB},
		{"mariadb/skip_locked", func(t *testing.T, l int) db { return mysqlDB(t, l, mysql.ClaimSkipLocked) }},
		{"mariadb/get_lock", func(t *testing.T, l int) db { return mysqlDB(t, l, mysql.ClaimGetLock) }},
	}
}

// TestChurn is the hand-over test of issue 14: six polling relays on one store, each started
// and gracefully stopped (Relay.Shutdown) after a random 0.2–1 s and started again under a new
// owner, while a producer commits steadily. Every stop and start moves lanes (a stop releases
// them, the others rebalance on join and leave) with batches in flight, so a hand-over that
// released a lane before its batch in flight was settled shows here as duplicates and as older
// versions of a key delivered after newer ones: with the lines of core/relay.go that defer a
// busy lane's release (Relay.busy / Relay.releasing) removed, this test fails with duplicates
// and regressions (RELIABILITY.md). Nothing expires a lease here (LeaseTTL 30 s), so nothing
// may be resent at all: lost, duplicates, regressions and lease expiries must all be 0, and
// the last relay must drain the rest at once: a stopped relay that left a lane leased (a claim
// cancelled halfway that committed unseen) stalls that lane for LeaseTTL.
//
// Every database churns at once (goroutines, not parallel subtests, which -parallel would
// queue two at a time on two cores); a subtest per database then checks its result.
// OUTBOXKIT_CHURN_SECONDS sets the churn duration (default 10 s; the long run is 40).
func TestChurn(t *testing.T) {
	t.Parallel()
	duration := envSeconds(t, "OUTBOXKIT_CHURN_SECONDS", 10*time.Second)
	dbs := databases()
	results := make([]churnResult, len(dbs))
	var wg sync.WaitGroup
	for i, d := range dbs {
		x := d.open(t, 16)
		store := x.relayStore(t, "")
		wg.Go(func() { results[i] = churn(t.Context(), x, store, duration) })
	}
	wg.Wait()
	for i, d := range dbs {
		t.Run(d.name, func(t *testing.T) {
			res := results[i]
			rep := res.report
			t.Logf("%v churn: %d relay starts, %d graceful stops; %s; claim lost %d, resent %d, lease expiries %d; the final relay drained the rest in %v",
				duration, res.starts, res.stops, rep, res.claimLost, res.resent, res.expiries, res.drain.Round(time.Millisecond))
			require.Empty(t, res.errs)
			require.True(t, res.drained, "not every event was delivered within %v after the churn: a lane stayed leased to a stopped relay (it waits for LeaseTTL, 30 s)", churnDrain)
			require.Greater(t, res.starts, int64(2*churnWorkers), "the relays churned")
			require.Zero(t, rep.Lost, "lost")
			require.Zero(t, rep.Unknown, "delivered but never committed")
			require.Zero(t, rep.Duplicates, "a graceful hand-over resends nothing")
			require.Zero(t, rep.Regressions, "no older version of a key after a newer one")
			require.Zero(t, rep.OrderBreaks, "first deliveries in write order per key")
			require.Zero(t, res.resent+res.expiries, "no lease expired or was lost")
		})
	}
}

const (
	churnWorkers = 6
	// churnDrain bounds the final relay's drain: well under LeaseTTL (30 s), so that a lane
	// left leased by a stopped relay fails the test (under load the drain took at most 0.6 s).
	churnDrain = 15 * time.Second
)

// churnResult is what one database's churn saw.
type churnResult struct {
	report                      report
	starts, stops               int64
	claimLost, resent, expiries uint64
	drain                       time.Duration // the final relay's drain
	drained                     bool
	errs                        []string
}

// churn runs the churn on one database; it does not touch a *testing.T (it runs beside the
// others in a goroutine) and returns what it saw.
func churn(ctx context.Context, d db, store driver.RelayStore, duration time.Duration) churnResult {
	var (
		res                         churnResult
		mu                          sync.Mutex
		starts, stops               atomic.Int64
		claimLost, resent, expiries atomic.Uint64
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errs = append(res.errs, fmt.Sprintf(format, args...))
	}
	sink := newRecorder(50 * time.Millisecond)
	router := core.StaticRouter{Default: "churn"}
	// run starts a relay under a new owner and returns its graceful stop.
	run := func(owner string) func() {
		r, err := core.NewRelay(store, sink, router, &core.RelayOptions{
			Owner: owner, PollInterval: 10 * time.Millisecond, BatchSize: 20, Logger: quiet,
		})
		if err != nil {
			fail("new relay: %v", err)
			return func() {}
		}
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		starts.Add(1)
		return func() {
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Shutdown(sctx); err != nil {
				fail("relay %s: shutdown: %v", owner, err)
			}
			if err := <-done; err != nil {
				fail("relay %s: run: %v", owner, err)
			}
			st := r.Stats()
			claimLost.Add(st.ClaimLost)
			resent.Add(st.Resent)
			expiries.Add(st.LeaseExpiries)
			stops.Add(1)
		}
	}

	prod := produce(ctx, d, 32, 10*time.Millisecond, fail)
	end := time.Now().Add(duration)
	var wg sync.WaitGroup
	for w := range churnWorkers {
		wg.Go(func() {
			for gen := 0; time.Now().Before(end) && ctx.Err() == nil; gen++ {
				stop := run(fmt.Sprintf("w%d-%d", w, gen))
				time.Sleep(200*time.Millisecond + rand.N(800*time.Millisecond))
				stop()
				time.Sleep(rand.N(100 * time.Millisecond))
			}
		})
	}
	wg.Wait()
	prod.stop()
	// One relay delivers what is left.
	stop := run("final")
	evs := prod.committed()
	res.drain, res.drained = waitDelivered(ctx, sink, evs, churnDrain)
	stop()
	res.report = sink.check(evs)
	res.starts, res.stops = starts.Load(), stops.Load()
	res.claimLost, res.resent, res.expiries = claimLost.Load(), resent.Load(), expiries.Load()
	return res
}
