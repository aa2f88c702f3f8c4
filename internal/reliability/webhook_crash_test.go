package reliability_test

// Kill points of the webhook receiver: receiver processes (brokerConsumerChild) killed with
// the inbox transaction of a request open, or after it committed and before the 2xx answer;
// the relay, through the webhook sink, sends again what was not answered.

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// webhookCrashRun runs one webhook case runs times; it does not touch a *testing.T. Unlike
// consumerCrashRun, the relay delivers into the process under test: it runs throughout, and
// each run starts a receiver process with the kill point, publishes while it is up, and once
// it is dead starts a plain one on the same address, which must take every message the
// relay sends again.
func webhookCrashRun(ctx context.Context, out db, inbox *sql.DB, dir string, sp crashSpec, runs int, killAt func(run int) int) (res consumerCrashResult) {
	began := time.Now()
	defer func() { res.took = time.Since(began) }()
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errs = append(res.errs, fmt.Sprintf(format, args...))
	}
	ws, err := webhook.New(webhook.Options{Secrets: []string{crashWebhookSecret}, Timeout: 5 * time.Second, Logger: quiet})
	if err != nil {
		fail("webhook sink: %v", err)
		return res
	}
	sink := recording(ws)
	// Short retry delays and breaker pauses: the relay finds the next process within a
	// second of its start.
	relay, err := core.NewRelay(out.relayStore(nil, ""), sink, core.StaticRouter{Default: "http://" + sp.Addr + "/hook"}, &core.RelayOptions{
		PollInterval: 20 * time.Millisecond, BatchSize: 10, Logger: quiet,
		Retry:           core.RetryPolicy{Initial: 50 * time.Millisecond, Max: 300 * time.Millisecond},
		BreakerMaxDelay: 300 * time.Millisecond,
	})
	if err != nil {
		fail("new relay: %v", err)
		return res
	}
	rctx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- relay.Run(rctx) }()
	defer func() { stopRelay(); <-relayDone }()

	var all []committed
	for run := range runs {
		sp.N = killAt(run)
		sp.Log = filepath.Join(dir, fmt.Sprintf("a%d.log", run))
		a, err := startProc(sp)
		if err != nil {
			fail("run %d: %v", run, err)
			return res
		}
		prod := produceKeys(ctx, out, fmt.Sprintf("r%dk", run), 4, 20*time.Millisecond, fail)
		select {
		case <-a.exited:
		case <-time.After(30 * time.Second):
			prod.stop()
			a.kill()
			fail("run %d: the receiver process did not reach its kill point within 30 s", run)
			return res
		}
		if !a.killedBySIGKILL() {
			prod.stop()
			fail("run %d: the receiver process ended with %v, not at its kill point", run, a.cmd.ProcessState)
			return res
		}
		plain := sp
		plain.Point = pointNone
		plain.Log = filepath.Join(dir, fmt.Sprintf("b%d.log", run))
		b, err := startProc(plain)
		if err != nil {
			prod.stop()
			fail("run %d: %v", run, err)
			return res
		}
		time.Sleep(300 * time.Millisecond) // publishing on while it starts
		prod.stop()
		all = append(all, prod.committed()...)
		// Every event answered 2xx: applied, or recognised as a duplicate.
		_, done := waitDelivered(ctx, sink, all, 30*time.Second)
		time.Sleep(200 * time.Millisecond) // its last stats line
		b.kill()
		res.kills += 2
		for j, log := range []string{sp.Log, plain.Log} {
			st, err := consumerStats(log)
			if err != nil {
				fail("run %d: %v", run, err)
				return res
			}
			for k := range st {
				res.stats[j][k] += st[k]
			}
			if j == 1 && sp.Point == pointBeforeAck && st[2] == 0 {
				// The request whose answer the kill stopped had committed: it comes back.
				fail("run %d: the next receiver process saw no duplicate", run)
			}
		}
		if !done {
			fail("run %d: not every event answered 2xx within 30 s", run)
		}
		rep, err := effectsReport(ctx, inbox, all)
		if err != nil {
			fail("run %d: %v", run, err)
			return res
		}
		res.report = rep
		if !done {
			return res
		}
		res.runs++
	}
	return res
}

// TestWebhookReceiverCrash kills webhook receiver processes (sinks/webhook NewHandler served
// over HTTP) at their kill points: in the handler with the request's inbox transaction open
// (pointBeforeCommit), and as that transaction returns committed, before the 204 answer is
// written (pointBeforeAck). The relay sends through the webhook sink to the receiver's
// address throughout; a plain receiver process takes over the address after the kill. The
// check, over every run: every event answered 2xx in the end, each committed event's effect
// applied exactly once (the resend of a request answered by no one is a duplicate for the
// inbox), first applies in version order per key. OUTBOXKIT_CRASH_RUNS=N runs each case N
// times (default 2).
func TestWebhookReceiverCrash(t *testing.T) {
	t.Parallel()
	runs := crashRuns(t)
	points := []string{pointBeforeCommit, pointBeforeAck}
	killAt := map[string]func(run int) int{
		pointBeforeCommit: func(run int) int { return 5 + 7*(run%3) }, // handler call
		pointBeforeAck:    func(run int) int { return 3 + 5*(run%3) }, // inbox transaction (one request each)
	}
	results := make([]consumerCrashResult, len(points))
	var wg sync.WaitGroup
	for i, point := range points {
		ctx := t.Context()
		dir := t.TempDir()
		path, h := effectsDB(t, dir)
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		out := memoryDB(t, 8)
		wg.Go(func() {
			results[i] = webhookCrashRun(ctx, out, h, dir, crashSpec{
				DB: childDB{Kind: "sqlite", Name: path}, Point: point, Broker: "webhook", Addr: addr,
			}, runs, killAt[point])
		})
	}
	wg.Wait()
	for i, point := range points {
		t.Run(point, func(t *testing.T) {
			res := results[i]
			t.Logf("%d runs, %d SIGKILLs; %s (deliveries: effects applied); killed processes answered %d, applied %d, duplicate %d, failed %d; the next ones answered %d, applied %d, duplicate %d, failed %d; took %v",
				res.runs, res.kills, res.report, res.stats[0][0], res.stats[0][1], res.stats[0][2], res.stats[0][3],
				res.stats[1][0], res.stats[1][1], res.stats[1][2], res.stats[1][3], res.took.Round(time.Millisecond))
			require.Empty(t, res.errs)
			require.Equal(t, runs, res.runs)
			require.Zero(t, res.report.Lost, "lost: a committed event never applied")
			require.Zero(t, res.report.Unknown, "applied but never committed")
			require.Zero(t, res.report.Duplicates, "an effect applied twice")
			require.Zero(t, res.report.OrderBreaks, "first applies in version order per key")
		})
	}
}
