package reliability_test

// The crash matrix of issue 14: polling relay processes (this test binary run again, see
// TestMain) killed at chosen points on every database, restarted, and checked for losses,
// first-delivery order per key and duplicates beyond what was in flight.

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// crashChildEnv makes the test binary a polling relay process: its value is a crashSpec in
// JSON.
const crashChildEnv = "OUTBOXKIT_CRASH_CHILD"

func TestMain(m *testing.M) { testkit.KillMain(m, crashChildEnv, crashChild) }

// childDB names, for a relay process, the database of a test's outbox (stores_test.go).
type childDB struct {
	Kind     string // "sqlite", "postgres", "pgbouncer" (postgres through PgBouncer) or "mysql"
	Name     string // the SQLite file, the PostgreSQL schema or the MariaDB database
	Lanes    int
	Strategy int // postgres.ClaimStrategy or mysql.ClaimStrategy
}

// The kill points of a relay process.
const (
	pointNone       = ""              // run until the test kills it
	pointBeforeSend = "before_send"   // SIGKILL at the Nth send, before the sink has it
	pointAfterAck   = "after_ack"     // SIGKILL at the Nth send, acknowledged, not settled
	pointSettle     = "during_settle" // SIGKILL 0–5 ms after the Nth settle began
	pointStall      = "stall"         // SIGSTOP at the Nth send, acknowledged, not settled
)

// crashSpec is what a relay process runs.
type crashSpec struct {
	DB    childDB
	Out   string // its FileSink
	Log   string // its store's log: claims and settles (crashStore)
	Point string
	N     int // the send, settle, handler call or delete request of the kill point, from 1
	// Queue and Endpoint make it an SQS consumer process (consumerChild) of that queue of
	// that SQS endpoint.
	Queue, Endpoint string
	// Topic and Brokers make it a Kafka consumer process (kafkaConsumerChild) of that topic
	// of that cluster (broker addresses, comma-separated).
	Topic, Brokers string
	// Member is the Kafka consumer's static group member ID (kgo.InstanceID); default
	// "crash".
	Member string
	// Broker ("rabbitmq", "nats", "redis" or "webhook"), Addr and Dest make it a consumer
	// process of that kind (brokerConsumerChild): of queue, stream or stream Dest on the
	// server at Addr, or a webhook receiver listening on Addr.
	Broker, Addr, Dest string
}

// The relay processes' options: short leases so that the next process takes over within
// seconds, small batches so that a kill leaves little in flight.
const (
	crashLease    = 2 * time.Second
	crashRenew    = 250 * time.Millisecond
	crashBatch    = 10
	crashInFlight = 2
	crashLanes    = 8
)

// proc is a relay or consumer process this test started.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once it ended (cmd.ProcessState is then set)
}

// startProc starts a relay or consumer process that runs sp.
func startProc(sp crashSpec) (*proc, error) {
	spec, err := json.Marshal(sp)
	if err != nil {
		return nil, err
	}
	cmd, err := testkit.StartChild(crashChildEnv, string(spec))
	if err != nil {
		return nil, err
	}
	p := &proc{cmd, make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill SIGKILLs the process (stopped or not, or already ended) and waits for it; nil is a
// no-op.
func (p *proc) kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	<-p.exited
}

// killedBySIGKILL reports whether the ended process was killed by SIGKILL.
func (p *proc) killedBySIGKILL() bool {
	ws, _ := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// crashChild runs a polling relay process, or an SQS or Kafka consumer process, until it is
// killed.
func crashChild(raw string) error {
	var sp crashSpec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		return err
	}
	ctx := context.Background()
	switch {
	case sp.Broker != "":
		return brokerConsumerChild(ctx, sp)
	case sp.Queue != "":
		return consumerChild(ctx, sp)
	case sp.Topic != "":
		return kafkaConsumerChild(ctx, sp)
	}
	inner, err := openChild(ctx, sp.DB)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(sp.Log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	store := &crashStore{RelayStore: inner, log: logf, claimed: map[[2]int64]bool{}, lanes: map[int64]int{}}
	var relayStore driver.RelayStore = store
	sink, err := testkit.FileSink(sp.Out)
	if err != nil {
		return err
	}
	switch sp.Point {
	case pointNone:
	case pointBeforeSend:
		sink = testkit.SignalSink(sink, sp.N, syscall.SIGKILL, true)
	case pointAfterAck:
		sink = testkit.SignalSink(sink, sp.N, syscall.SIGKILL, false)
	case pointSettle:
		relayStore = testkit.SettleSignal(store, sp.N, syscall.SIGKILL, 5*time.Millisecond)
	case pointStall:
		sink = store.stallAt(sink, sp.N)
	default:
		return fmt.Errorf("unknown kill point %q", sp.Point)
	}
	relay, err := core.NewRelay(relayStore, sink, core.StaticRouter{Default: "file"}, &core.RelayOptions{
		LeaseTTL: crashLease, RenewInterval: crashRenew, PollInterval: 20 * time.Millisecond,
		BatchSize: crashBatch, InFlight: crashInFlight, Logger: quiet,
	})
	if err != nil {
		return err
	}
	return relay.Run(ctx)
}

// openChild opens, in a relay process, the store of a test's outbox.
func openChild(ctx context.Context, c childDB) (driver.RelayStore, error) {
	switch c.Kind {
	case "sqlite":
		h, err := sqlite.OpenDB(ctx, c.Name)
		if err != nil {
			return nil, err
		}
		return sqlite.New(h, &sqlite.Options{Lanes: c.Lanes, Logger: quiet})
	case "postgres", "pgbouncer":
		cfg, err := pgConfig(os.Getenv(testkit.PostgresDSN), c.Name, "")
		if c.Kind == "pgbouncer" {
			cfg, err = pooledConfig(os.Getenv(testkit.PgBouncerTxDSN))
		}
		if err != nil {
			return nil, err
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		s, err := postgres.New(pool, &postgres.Options{Schema: c.Name, Lanes: c.Lanes,
			ClaimStrategy: postgres.ClaimStrategy(c.Strategy), Logger: quiet})
		if err != nil {
			return nil, err
		}
		return s, nil
	case "mysql":
		base, err := mysqldrv.ParseDSN(os.Getenv(testkit.MySQLDSN))
		if err != nil {
			return nil, err
		}
		h, err := sql.Open("mysql", mysqlConfig(base, c.Name, "").FormatDSN())
		if err != nil {
			return nil, err
		}
		return mysql.New(ctx, h, &mysql.Options{Lanes: c.Lanes, ClaimStrategy: mysql.ClaimStrategy(c.Strategy), Logger: quiet})
	}
	return nil, fmt.Errorf("unknown database kind %q", c.Kind)
}

// crashStore is a relay process's store: it logs to a file each claim ("claim
// <lane>:<generation> ...")
// and, after a stall, each settle that carries a lease claimed before the
// stall ("stale_settle refused" when the store's fencing refused it, "stale_settle marked"
// when it changed something), and for every settle that a lost lease refused "refused <n>":
// the n acknowledged records of the lost lanes, which the lanes' new owner sends again. For
// the stall it also gates every call: stallAt stops the
// process only when no call is open (no transaction, no row lock held through the stall), so
// that the stall is exactly "acknowledged, not yet settled". Being a driver.RelayStore only, it
// hides the store's wake-ups (driver.Waker): the relay polls every 20 ms.
type crashStore struct {
	driver.RelayStore
	log     *os.File
	gate    sync.RWMutex
	mu      sync.Mutex
	stalled bool
	claimed map[[2]int64]bool // (lane, generation) of the leases claimed before the stall
	lanes   map[int64]int     // lane of each fetched, unsettled seq
}

func (s *crashStore) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(s.log, format+"\n", args...)
}

// stallAt wraps the sink: at the nth send, once acknowledged, it SIGSTOPs the process.
func (s *crashStore) stallAt(next core.Sink, n int) core.Sink {
	var mu sync.Mutex
	sends := 0
	return core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		out := next.Send(ctx, msgs)
		mu.Lock()
		sends++
		hit := sends == n
		mu.Unlock()
		if hit {
			s.gate.Lock() // no store call open through the stall
			s.mu.Lock()
			s.stalled = true
			s.mu.Unlock()
			testkit.SignalSelf(syscall.SIGSTOP)
			s.gate.Unlock()
		}
		return out
	})
}

func (s *crashStore) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.RelayStore.RenewLanes(ctx, p)
}

func (s *crashStore) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.RelayStore.Heartbeat(ctx, p)
}

func (s *crashStore) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.RelayStore.ReleaseLanes(ctx, leases)
}

func (s *crashStore) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	recs, err := s.RelayStore.Fetch(ctx, p)
	s.mu.Lock()
	for _, r := range recs {
		s.lanes[r.Seq] = r.Lane
	}
	s.mu.Unlock()
	return recs, err
}

func (s *crashStore) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	leases, err := s.RelayStore.ClaimLanes(ctx, p)
	if len(leases) > 0 {
		var b strings.Builder
		b.WriteString("claim")
		s.mu.Lock()
		for _, l := range leases {
			if !s.stalled {
				s.claimed[[2]int64{int64(l.Lane), l.Generation}] = true
			}
			fmt.Fprintf(&b, " %d:%d", l.Lane, l.Generation)
		}
		s.mu.Unlock()
		s.logf("%s", b.String())
	}
	return leases, err
}

func (s *crashStore) Settle(ctx context.Context, p driver.SettleParams) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	s.mu.Lock()
	stale := false
	for _, l := range p.Leases {
		stale = stale || (s.stalled && s.claimed[[2]int64{int64(l.Lane), l.Generation}])
	}
	s.mu.Unlock()
	err := s.RelayStore.Settle(ctx, p)
	var lost *driver.LanesLostError
	if errors.As(err, &lost) {
		// The acknowledged records of the lost lanes: the lanes' new owner sends them again.
		s.mu.Lock()
		resent := 0
		for _, seq := range p.Published {
			if slices.Contains(lost.Lanes, s.lanes[seq]) {
				resent++
			}
		}
		s.mu.Unlock()
		s.logf("refused %d", resent)
	}
	if err == nil {
		s.mu.Lock()
		for _, seq := range p.Published {
			delete(s.lanes, seq)
		}
		s.mu.Unlock()
	}
	if stale {
		switch {
		case errors.As(err, &lost):
			s.logf("stale_settle refused")
		case err == nil:
			s.logf("stale_settle marked %v", p.Leases)
		default:
			s.logf("stale_settle failed %v", err)
		}
	}
	return err
}

// crashRuns is how many times each case runs: OUTBOXKIT_CRASH_RUNS, default 2.
func crashRuns(t *testing.T) int {
	v := os.Getenv("OUTBOXKIT_CRASH_RUNS")
	if v == "" {
		return 2
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "OUTBOXKIT_CRASH_RUNS must be a whole number")
	require.Positive(t, n, "OUTBOXKIT_CRASH_RUNS must be positive")
	return n
}

// crashParallel is how many cases run at once (each mostly waits for a lease to expire).
const crashParallel = 8

// TestCrashMatrix kills polling relay processes at each kill point on every database: before
// the send, after the sink's acknowledgement and before the settle, during the settle, and a
// stall longer than the lease (SIGSTOP at an acknowledged, unsettled batch; another relay
// process takes the lanes over; SIGCONT). Each run of a case commits events while a relay
// process runs to its kill point, then starts a relay process that must deliver everything.
// After every run the case checks, over everything delivered so far: lost = 0 (every
// committed event in the file), no delivery of an event never committed, first deliveries in
// write order per key, and duplicates within what was in flight. Every run SIGKILLs two
// processes (the one at its kill point, or the stalled one once it has run on, and then the
// one that delivered the rest, once the file holds every event); each kill leaves at most
// InFlight batches acknowledged and unsettled (InFlight loops, one batch each), which the next
// process sends again. Besides, every acknowledged record whose settle a lost lease refused is
// sent again by the lane's new owner: the stalled process's batches, sent before the stall or
// after its SIGCONT on leases already lost (Fetch is not fenced; the settle is), and any lease
// a live process lost to a long pause of the loaded machine. The child's store counts those
// records, so the bound is 2 * InFlight * BatchSize per run plus that count. The stalled
// process's settles on its old leases must all be refused by the store's fencing ("the stale
// one must not mark the other's work"), and at least one must happen.
//
// Cases run side by side, crashParallel at a time (goroutines, not parallel subtests, which
// -parallel would queue two at a time on two cores); a subtest per case then reports.
// OUTBOXKIT_CRASH_RUNS=N runs each case N times (default 2).
func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	runs := crashRuns(t)
	points := []string{pointBeforeSend, pointAfterAck, pointSettle, pointStall}
	type crashCase struct {
		name string
		d    db
		dir  string
	}
	var cases []crashCase
	for _, d := range databases() {
		if d.name == "memory" {
			continue // a memory outbox lives in one process
		}
		for _, p := range points {
			x := d.open(t, crashLanes)
			cases = append(cases, crashCase{d.name + "/" + p, x, t.TempDir()})
		}
	}
	results := make([]crashResult, len(cases))
	sem := make(chan struct{}, crashParallel)
	var wg sync.WaitGroup
	for i, c := range cases {
		point := c.name[strings.LastIndexByte(c.name, '/')+1:]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = crashCaseRun(t.Context(), c.d, c.dir, point, runs)
		})
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := results[i]
			t.Logf("%d runs, %d SIGKILLs; %s; acknowledged records refused by a lost lease %d; duplicate bound %d; stale settles refused %d; took %v",
				res.runs, res.kills, res.report, res.refused, res.bound, res.staleRefused, res.took.Round(time.Millisecond))
			require.Empty(t, res.errs)
			require.Equal(t, runs, res.runs)
			require.Zero(t, res.report.Lost, "lost")
			require.Zero(t, res.report.Unknown, "delivered but never committed")
			require.Zero(t, res.report.OrderBreaks, "first deliveries in write order per key")
			require.LessOrEqual(t, res.report.Duplicates, res.bound, "duplicates beyond what was in flight")
		})
	}
}

// crashResult is what one case saw over its runs.
type crashResult struct {
	runs, kills  int
	report       report // over every run
	bound        int    // the duplicates allowed over every run
	staleRefused int
	refused      int // acknowledged records whose settle a lost lease refused
	took         time.Duration
	errs         []string
}

// crashCaseRun runs one case runs times on d; it does not touch a *testing.T (it runs beside
// the others in a goroutine) and returns what it saw.
func crashCaseRun(ctx context.Context, d db, dir, point string, runs int) (res crashResult) {
	began := time.Now()
	defer func() { res.took = time.Since(began) }()
	var mu sync.Mutex
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		res.errs = append(res.errs, fmt.Sprintf(format, args...))
	}
	out := filepath.Join(dir, "delivered.txt")
	var all []committed
	for run := range runs {
		logs := [2]string{filepath.Join(dir, fmt.Sprintf("a%d.log", run)), filepath.Join(dir, fmt.Sprintf("b%d.log", run))}
		start := func(point, log string, n int) *proc {
			p, err := startProc(crashSpec{DB: d.child, Out: out, Log: log, Point: point, N: n})
			if err != nil {
				fail("run %d: %v", run, err)
			}
			return p
		}
		// Keys of their own per run: each producer numbers its versions from 1.
		prod := produceKeys(ctx, d, fmt.Sprintf("r%dk", run), 8, 20*time.Millisecond, fail)
		stopProd := sync.OnceFunc(prod.stop)
		a := start(point, logs[0], 1+rand.IntN(5))
		if a == nil {
			stopProd()
			break
		}
		var b *proc
		ok := func() bool {
			if point != pointStall {
				// The process reaches its kill point by itself.
				select {
				case <-a.exited:
				case <-time.After(30 * time.Second):
					fail("run %d: the relay process did not reach its kill point within 30 s", run)
					return false
				}
				if !a.killedBySIGKILL() {
					fail("run %d: the relay process ended with %v, not at its kill point", run, a.cmd.ProcessState)
					return false
				}
				stopProd()
				b = start(pointNone, logs[1], 0)
				return b != nil && waitFile(ctx, out, prod.committed(), 30*time.Second, run, fail)
			}
			// The stall: wait for the SIGSTOP, let another process take the lanes over and
			// deliver everything, then SIGCONT the stale one.
			for deadline := time.Now().Add(30 * time.Second); !testkit.Stopped(a.cmd.Process.Pid); {
				select {
				case <-a.exited:
					fail("run %d: the relay process ended (%v) before its stall", run, a.cmd.ProcessState)
					return false
				case <-time.After(5 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					fail("run %d: the relay process did not stall within 30 s", run)
					return false
				}
			}
			// The lanes it held, and so its leases: it claimed them all (it ran alone) and
			// released none.
			held, err := claimedLanes(logs[0])
			if err != nil || len(held) == 0 {
				fail("run %d: the stalled relay process logged no claim (%v)", run, err)
				return false
			}
			b = start(pointNone, logs[1], 0)
			if b == nil || !waitLog(ctx, logs[1], func(string) bool {
				got, _ := claimedLanes(logs[1])
				for l := range held {
					if !got[l] {
						return false
					}
				}
				return true
			}, 30*time.Second) {
				fail("run %d: the second relay process did not take every lane of the stalled one over within 30 s", run)
				return false
			}
			stopProd()
			if !waitFile(ctx, out, prod.committed(), 30*time.Second, run, fail) {
				return false
			}
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				fail("run %d: SIGCONT: %v", run, err)
				return false
			}
			if !waitLog(ctx, logs[0], func(l string) bool { return strings.HasPrefix(l, "stale_settle") }, 15*time.Second) {
				fail("run %d: the stalled relay process settled nothing after its SIGCONT", run)
				return false
			}
			time.Sleep(4 * crashRenew) // its other loop's stale batch, its rebalance with the other
			return true
		}()
		a.kill()
		b.kill()
		stopProd()
		all = append(all, prod.committed()...)
		rep, err := fileReport(out, all)
		if err != nil {
			fail("run %d: %v", run, err)
			break
		}
		res.report = rep
		if !ok {
			break
		}
		// Each run SIGKILLs two processes with batches possibly in flight, InFlight at most
		// (at a kill point, or at the end of the run once the file had every event: the last
		// batch acknowledged, maybe not yet settled, which the next run resends); and whatever
		// a lost lease refused is sent again (the stalled process's batches, or a live
		// process's lease lost to a pause of the loaded machine).
		res.runs++
		res.kills += 2
		res.bound += 2 * crashInFlight * crashBatch
		for _, log := range logs {
			lines, err := readLines(log)
			if err != nil {
				fail("run %d: %v", run, err)
				break
			}
			for _, l := range lines {
				var n int
				if _, err := fmt.Sscanf(l, "refused %d", &n); err == nil {
					res.refused += n
					res.bound += n
				}
			}
		}
		if point == pointStall {
			lines, err := readLines(logs[0])
			if err != nil {
				fail("run %d: %v", run, err)
				break
			}
			for _, l := range lines {
				if l == "stale_settle refused" {
					res.staleRefused++
				} else if strings.HasPrefix(l, "stale_settle") {
					a, _ := os.ReadFile(logs[0])
					b, _ := os.ReadFile(logs[1])
					fail("run %d: the stalled relay process, its leases taken over, settled: %q\nits log:\n%s\nthe other's log:\n%s", run, l, a, b)
				}
			}
		}
	}
	return res
}

// fileReport checks a FileSink's file against what was committed.
func fileReport(out string, evs []committed) (report, error) {
	got, err := testkit.ReadDeliveries(out)
	if err != nil {
		return report{}, err
	}
	byID := make(map[string]committed, len(evs))
	for _, ev := range evs {
		byID[ev.id] = ev
	}
	rec := newRecorder(0)
	for _, g := range got {
		rec.got = append(rec.got, delivery{g.ID, g.Key, byID[g.ID].version})
	}
	return rec.check(evs), nil
}

// waitFile waits until every event of evs is in the FileSink's file out, or bound passed.
func waitFile(ctx context.Context, out string, evs []committed, bound time.Duration, run int, fail func(string, ...any)) bool {
	deadline := time.Now().Add(bound)
	for {
		got, err := testkit.ReadDeliveries(out)
		if err != nil {
			fail("run %d: %v", run, err)
			return false
		}
		ids := make(map[string]bool, len(got))
		for _, g := range got {
			ids[g.ID] = true
		}
		missing := 0
		for _, ev := range evs {
			if !ids[ev.id] {
				missing++
			}
		}
		if missing == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			fail("run %d: %d of %d events not delivered within %v", run, missing, len(evs), bound)
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitLog waits until a line of the log at path satisfies match, or bound passed.
func waitLog(ctx context.Context, path string, match func(string) bool, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		lines, _ := readLines(path)
		for _, l := range lines {
			if match(l) {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// claimedLanes reads the lanes a relay process claimed from its log.
func claimedLanes(path string) (map[int]bool, error) {
	lines, err := readLines(path)
	if err != nil {
		return nil, err
	}
	lanes := map[int]bool{}
	for _, l := range lines {
		rest, ok := strings.CutPrefix(l, "claim ")
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			lane, _, _ := strings.Cut(f, ":")
			n, err := strconv.Atoi(lane)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", path, l, err)
			}
			lanes[n] = true
		}
	}
	return lanes, nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines, sc.Err()
}
