package reliability_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// fault is one fault injected between the relays and their database.
type fault struct {
	name string
	// toxic is the toxiproxy toxic (JSON) added for the fault; empty means an outage: the
	// proxy is disabled (every connection closed, new ones refused) and enabled again.
	toxic string
	// progress says that deliveries must go on during the fault (a slow database).
	progress bool
}

var faults = []fault{
	{name: "latency", toxic: `{"name":"f","type":"latency","stream":"downstream","attributes":{"latency":150,"jitter":50}}`, progress: true},
	// A slow link: 64 KB/s each way, deliveries go on (slowly).
	{name: "bandwidth", toxic: `{"name":"f","type":"bandwidth","stream":"downstream","attributes":{"rate":64}}`, progress: true},
	// Closes delayed by 2 s: a relay that drops a connection (a timeout, a pool reset) must not
	// wait for the close.
	{name: "slow_close", toxic: `{"name":"f","type":"slow_close","stream":"downstream","attributes":{"delay":2000}}`, progress: true},
	{name: "reset_peer", toxic: `{"name":"f","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`},
	// A black hole: nothing the relays send arrives and their connections stay open; removing
	// the toxic closes them.
	{name: "timeout", toxic: `{"name":"f","type":"timeout","stream":"upstream","attributes":{"timeout":0}}`},
	{name: "outage"},
}

const (
	// faultLeaseTTL is the relays' LeaseTTL. A claim whose reply a fault loses (the statement
	// committed, the relay saw an error) leaves its lanes leased to a relay that does not know
	// it holds them until the lease expires: it bounds that stall (RELIABILITY.md).
	faultLeaseTTL = 10 * time.Second
)

// TestFaults puts a toxiproxy proxy (in-process) between two polling relays and their
// database while a producer commits straight to the database, and injects, one after another:
// 150±50 ms of latency on every response, a 64 KB/s link, closes delayed by 2 s, connections
// reset (RST) as soon as they carry data,
// a black hole (data dropped, connections left open) and an outage (the proxy disabled: every
// connection closed and new ones refused). Each fault lasts OUTBOXKIT_OUTAGE_SECONDS (default
// 3 s; the long run is 10). The relays run under a supervisor that restarts a relay
// whose Run returned, as an operator's process manager would, and each fault also starts a
// third relay while it lasts (a process started during the fault). A fault after which the
// relays must still deliver (progress) is kept on past its length until one delivery arrives
// (holdFault). After each fault the test
// waits until every event committed before the fault ended is delivered (no lane is left
// stuck) and logs that recovery time; in the end nothing is lost and first deliveries are in
// write order per key. Duplicates are allowed (a settle whose reply is lost is retried by
// resending: at least once) and reported.
//
// The relays run with a 10 s LeaseTTL: a claim whose reply a fault loses leaves its lanes
// stalled until the lease expires (seen with the default 30 s: a 27 s recovery), so the bound
// is LeaseTTL + the fault's length + 10 s. A relay stuck on a connection forever, a lane never handed back, or a
// relay that stops for good on a database error fails it. The same faults also run between
// the relays and the SQS emulator (sqsTarget). Every target runs at once (see TestChurn).
func TestFaults(t *testing.T) {
	t.Parallel()
	hold := envSeconds(t, "OUTBOXKIT_OUTAGE_SECONDS", 3*time.Second)
	targets := []struct {
		name  string
		setup func(t *testing.T, hold time.Duration) faultTarget
	}{
		{"postgres/skip_locked", dbTarget(func(t *testing.T, l int) db { return postgresDB(t, l, postgres.ClaimSkipLocked) })},
		{"postgres/advisory_lock", dbTarget(func(t *testing.T, l int) db { return postgresDB(t, l, postgres.ClaimAdvisoryLock) })},
		{"mariadb/skip_locked", dbTarget(func(t *testing.T, l int) db { return mysqlDB(t, l, mysql.ClaimSkipLocked) })},
		{"mariadb/get_lock", dbTarget(func(t *testing.T, l int) db { return mysqlDB(t, l, mysql.ClaimGetLock) })},
		{"sqs", sqsTarget},
	}
	results := make([]faultResult, len(targets))
	checks := make([]func(t *testing.T, res faultResult), len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		ft := tg.setup(t, hold)
		checks[i] = ft.check
		wg.Go(func() { results[i] = ft.run(t.Context()) })
	}
	wg.Wait()
	for i, tg := range targets {
		t.Run(tg.name, func(t *testing.T) { checks[i](t, results[i]) })
	}
}

// faultTarget is one fault-injection run, set up: run injects the faults (it runs beside the
// others and touches no *testing.T), check checks its result.
type faultTarget struct {
	run   func(ctx context.Context) faultResult
	check func(t *testing.T, res faultResult)
}

// dbTarget puts the proxy between the relays and the database that open returns.
func dbTarget(open func(t *testing.T, lanes int) db) func(t *testing.T, hold time.Duration) faultTarget {
	return func(t *testing.T, hold time.Duration) faultTarget {
		d := open(t, 16)
		proxy := newProxy(t, d.upstream)
		store := d.relayStore(t, proxy.Listen)
		// Every event committed before a fault ended is delivered within bound after it: a
		// fault longer than LeaseTTL expires every lease, and a lost claim stalls its lanes
		// for LeaseTTL.
		bound := faultLeaseTTL + hold + 10*time.Second
		return faultTarget{
			run: func(ctx context.Context) faultResult {
				return injectFaults(ctx, d, store, newRecorder(5*time.Millisecond), proxy, hold, 10*time.Millisecond, bound)
			},
			check: func(t *testing.T, res faultResult) { checkFaults(t, res, bound, len(faults), "relay restarts") },
		}
	}
}

// newProxy starts an in-process toxiproxy proxy to upstream on a free loopback port.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "p", "127.0.0.1:0", upstream)
	require.NoError(t, proxy.Start())
	t.Cleanup(proxy.Stop)
	return proxy
}

// checkFaults logs what each fault did and checks it: phases faults ran (len(faults) for
// TestFaults), each recovered within bound, progress where the fault requires it, nothing
// lost, first deliveries in order. restarts names what the phases' restarts count.
func checkFaults(t *testing.T, res faultResult, bound time.Duration, phases int, restarts string) {
	for _, p := range res.phases {
		rec := "recovered in"
		if !p.recovered {
			rec = "NOT recovered after"
		}
		t.Logf("%s for %v: %d deliveries during the fault; %s %v (every event committed before the fault ended delivered); %s %d %s",
			p.name, p.lasted.Round(100*time.Millisecond), p.during, rec, p.recovery.Round(time.Millisecond), restarts, p.restarts, p.why)
	}
	t.Logf("%s; %s %d in all", res.report, restarts, res.restarts)
	require.Empty(t, res.errs)
	for _, p := range res.phases {
		require.True(t, p.recovered, "%s: not recovered within %v", p.name, bound)
		if p.progress {
			require.Positive(t, p.during, "%s: the relays deliver during the fault", p.name)
		}
	}
	require.Len(t, res.phases, phases)
	require.Zero(t, res.report.Lost, "lost")
	require.Zero(t, res.report.Unknown, "delivered but never committed")
	require.Zero(t, res.report.OrderBreaks, "first deliveries in write order per key")
}

// failf returns what records a failure in res.errs; it is safe for concurrent use.
func (res *faultResult) failf() func(format string, args ...any) {
	var mu sync.Mutex
	return func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errs = append(res.errs, fmt.Sprintf(format, args...))
	}
}

// phase is what one fault did.
type phase struct {
	name      string
	progress  bool
	during    int           // deliveries while the fault lasted
	lasted    time.Duration // how long the fault lasted (longer than hold when progress waited)
	recovery  time.Duration // from the fault's end until everything committed before it was delivered
	recovered bool
	restarts  int64  // relay restarts by the supervisor during the phase
	why       string // the distinct errors the restarted relays returned
}

type faultResult struct {
	events   []committed // what the producer committed
	phases   []phase
	report   report
	restarts int64
	errs     []string
}

// supervisor runs a relay and starts a new one (a new owner) whenever Run returns, until stop.
type supervisor struct {
	mu       sync.Mutex
	cur      *core.Relay
	stopping bool
	done     chan struct{}
	restarts *atomic.Int64
	errs     *errSet
}

func supervise(ctx context.Context, name string, store driver.RelayStore, sink core.Sink, router core.Router, restarts *atomic.Int64, errs *errSet) *supervisor {
	s := &supervisor{done: make(chan struct{}), restarts: restarts, errs: errs}
	go func() {
		defer close(s.done)
		for gen := 0; ctx.Err() == nil; gen++ {
			r, err := core.NewRelay(store, sink, router, &core.RelayOptions{
				Owner: fmt.Sprintf("%s-%d", name, gen), LeaseTTL: faultLeaseTTL,
				PollInterval: 20 * time.Millisecond, BatchSize: 50, Logger: quiet,
			})
			if err != nil {
				errs.add("new relay: " + err.Error())
				return
			}
			s.mu.Lock()
			if s.stopping {
				s.mu.Unlock()
				return
			}
			s.cur = r
			s.mu.Unlock()
			err = r.Run(ctx)
			s.mu.Lock()
			stopping := s.stopping
			s.mu.Unlock()
			if stopping || ctx.Err() != nil {
				if err != nil {
					errs.add("run after stop: " + err.Error())
				}
				return
			}
			restarts.Add(1)
			msg := "returned nil"
			if err != nil {
				msg = err.Error()
			}
			errs.add("restarted: " + msg)
			time.Sleep(200 * time.Millisecond) // a process manager's restart delay
		}
	}()
	return s
}

// stop shuts the current relay down gracefully and waits for the supervisor to end.
func (s *supervisor) stop() error {
	s.mu.Lock()
	s.stopping = true
	r := s.cur
	s.mu.Unlock()
	var err error
	if r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err = r.Shutdown(ctx)
	}
	<-s.done
	return err
}

// errSet collects distinct messages: the errors restarted relays returned, and failures.
type errSet struct {
	mu   sync.Mutex
	msgs map[string]int
}

var digits = regexp.MustCompile(`[0-9]+`)

// add records msg, its numbers (ports, addresses) replaced by N.
func (e *errSet) add(msg string) {
	msg = digits.ReplaceAllString(msg, "N")
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.msgs == nil {
		e.msgs = map[string]int{}
	}
	e.msgs[msg]++
}

// take returns the messages collected since the last take, with their counts.
func (e *errSet) take() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for m, n := range e.msgs {
		out = append(out, fmt.Sprintf("%dx %q", n, m))
	}
	slices.Sort(out)
	e.msgs = nil
	return out
}

// injectFaults runs the faults one after another on one database; like churn it does not
// touch a *testing.T.
// The relays deliver to sink; the producer commits a transaction every interval; bound is the
// recovery bound of each fault.
func injectFaults(ctx context.Context, d db, store driver.RelayStore, sink *recorder, proxy *toxiproxy.Proxy,
	hold, interval, bound time.Duration) faultResult {
	var res faultResult
	fail := res.failf()
	var restarts atomic.Int64
	why := &errSet{}
	router := core.StaticRouter{Default: cmp.Or(d.route, "faults")}
	prod := produce(ctx, d, 32, interval, fail)
	relays := []*supervisor{
		supervise(ctx, "a", store, sink, router, &restarts, why),
		supervise(ctx, "b", store, sink, router, &restarts, why),
	}
	stopAll := func(sups []*supervisor) {
		for _, s := range sups {
			if err := s.stop(); err != nil {
				fail("shutdown: %v", err)
			}
		}
	}
	// Warm up: the relays deliver the first 200 events.
	for len(prod.committed()) < 200 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := waitDelivered(ctx, sink, prod.committed(), bound); !ok {
		fail("the relays did not deliver before the first fault")
	}
	for _, f := range faults {
		p := phase{name: f.name, progress: f.progress}
		before := restarts.Load()
		why.take()
		// The fault.
		if f.toxic == "" {
			proxy.Stop()
		} else if _, err := proxy.Toxics.AddToxicJson(strings.NewReader(f.toxic)); err != nil {
			fail("%s: add toxic: %v", f.name, err)
			break
		}
		late := supervise(ctx, "late-"+f.name, store, sink, router, &restarts, why)
		p.during, p.lasted = holdFault(ctx, hold, bound, f.progress, sink.count)
		// Its end.
		if f.toxic == "" {
			if err := proxy.Start(); err != nil {
				fail("%s: enable the proxy again: %v", f.name, err)
				break
			}
		} else if err := proxy.Toxics.RemoveToxic(context.Background(), "f"); err != nil {
			fail("%s: remove toxic: %v", f.name, err)
			break
		}
		evs := prod.committed()
		p.recovery, p.recovered = waitDelivered(ctx, sink, evs, bound)
		stopAll([]*supervisor{late})
		p.restarts = restarts.Load() - before
		if msgs := why.take(); len(msgs) > 0 {
			p.why = "(" + strings.Join(msgs, "; ") + ")"
		}
		res.phases = append(res.phases, p)
		if !p.recovered {
			break
		}
	}
	prod.stop()
	evs := prod.committed()
	if _, ok := waitDelivered(ctx, sink, evs, bound); !ok {
		fail("not every event was delivered within %v after the last fault", bound)
	}
	stopAll(relays)
	res.events = evs
	res.report = sink.check(evs)
	res.restarts = restarts.Load()
	if ctx.Err() != nil {
		fail("%v", errors.New("the test's context ended"))
	}
	return res
}
