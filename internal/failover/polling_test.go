//go:build failover

package failover_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// TestSwitchoverPolling runs producers and two polling relays across a planned Patroni
// switchover (patronictl switchover): with synchronous replication no committed event is lost,
// order per key holds, and the relays resume by themselves.
func TestSwitchoverPolling(t *testing.T) {
	r := needRig(t)
	runPolling(t, r, "switchover", func(t *testing.T) {
		from, to := r.switchover(t)
		if got := r.waitLeader(t, from, time.Minute); got != to {
			t.Fatalf("the switchover made %s leader, not %s", got, to)
		}
	})
}

// TestCrashFailoverPolling does the same across a crash of the primary's node (SIGKILL of its
// Patroni and postmaster): the sync standby takes the leader key once it expires (ttl 10 s).
// The crashed node is started again afterwards and rejoins as a replica.
func TestCrashFailoverPolling(t *testing.T) {
	r := needRig(t)
	runPolling(t, r, "crash", func(t *testing.T) {
		old := r.crash(t)
		r.waitLeader(t, old, time.Minute)
		r.restart(t, old)
	})
}

// TestPostmasterKillPolling SIGKILLs only the primary's postmaster, its Patroni alive: the
// node still holds the leader key, and Patroni restarts PostgreSQL in place (crash recovery)
// rather than failing over. The same checks hold; the test logs which node leads afterwards.
func TestPostmasterKillPolling(t *testing.T) {
	r := needRig(t)
	runPolling(t, r, "postmaster-kill", func(t *testing.T) {
		leader, _ := r.waitHealthy(t, time.Minute)
		pid := r.pidFile(t, r.dir+"/"+leader+"/data/postmaster.pid")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill postmaster %d: %v", pid, err)
		}
		t.Logf("SIGKILL to the postmaster (pid %d) of leader %s, its Patroni alive", pid, leader)
		if !waitFor(2*time.Minute, func() bool {
			ms, _ := r.members()
			for _, m := range ms {
				if m.Role == "leader" && m.State == "running" {
					if _, err := os.Stat(r.dir + "/" + m.Name + "/data/postmaster.pid"); err == nil && (m.Name != leader || r.pidFile(t, r.dir+"/"+m.Name+"/data/postmaster.pid") != pid) {
						t.Logf("leader after the kill: %s (before: %s)", m.Name, leader)
						return true
					}
				}
			}
			return false
		}) {
			t.Fatal("no running leader 2 minutes after the postmaster was killed")
		}
	})
}

// ledger is what the producers wrote: per key, in write order, each event's ID, and whether
// its COMMIT returned nil (committed) or an error (ambiguous: resolved against the table).
type ledger struct {
	mu        sync.Mutex
	byKey     map[string][]string
	ambiguous map[string]bool
	committed map[string]time.Time // commit time of every event whose COMMIT returned nil
	failed    int                  // writes that failed before COMMIT (nothing committed)
}

func (l *ledger) add(key, id string, at time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byKey[key] = append(l.byKey[key], id)
	if ok {
		l.committed[id] = at
	} else {
		l.ambiguous[id] = true
	}
}

// timedSink acknowledges everything (a testkit.Recorder) and keeps the time each ID was first
// sent.
type timedSink struct {
	rec   testkit.Recorder
	mu    sync.Mutex
	first map[string]time.Time
}

func (s *timedSink) Send(ctx context.Context, msgs []core.Message) []error {
	now := time.Now()
	s.mu.Lock()
	for _, m := range msgs {
		if _, ok := s.first[m.ID]; !ok {
			s.first[m.ID] = now
		}
	}
	s.mu.Unlock()
	return s.rec.Send(ctx, msgs)
}

func (s *timedSink) has(ids map[string]bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id := range ids {
		if _, ok := s.first[id]; !ok {
			return false
		}
	}
	return true
}

// newOutbox creates a fresh schema in the rig's database with a migrated store of 8 lanes
// (its logger named name) and the store's outbox; admin is a pool on the public schema, for
// the checks.
func newOutbox(t *testing.T, r *rig, name string) (schema string, admin *pgxpool.Pool, store *postgres.Store[pgx.Tx], ob *core.Outbox[pgx.Tx]) {
	ctx := t.Context()
	schema = randomName("okfo_")
	admin = newPool(t, r.dsn, "public", 2)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	store, err := postgres.New(newPool(t, r.dsn, schema, 8), &postgres.Options{Schema: schema, Lanes: 8, Logger: logger(name + "/store")})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	ob, err = core.NewOutbox(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	return schema, admin, store, ob
}

func newPool(t *testing.T, dsn, schema string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn + "&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.HealthCheckPeriod = time.Second
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	p, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// logger logs warnings and errors of the relays to stderr: the test's report of what happened.
func logger(name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("test", name)
}

// produce runs n producers, each writing its own 8 keys in turn, one event per transaction,
// until stop is set; a write that fails is not retried (the next one has a new ID).
func produce(ctx context.Context, pool *pgxpool.Pool, ob *core.Outbox[pgx.Tx], l *ledger, n int, stop *atomic.Bool, wg *sync.WaitGroup) {
	for p := range n {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("p%d-k%d", p, i%8)
				id := fmt.Sprintf("p%d-%06d", p, i)
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				tx, err := pool.Begin(wctx)
				if err == nil {
					_, err = ob.Write(wctx, tx, core.Event{ID: id, AggregateType: "failover", AggregateID: key, Type: "failover.test", Payload: []byte(`{}`)})
					if err != nil {
						_ = tx.Rollback(context.Background())
					} else {
						cerr := tx.Commit(wctx)
						l.add(key, id, time.Now(), cerr == nil)
						err = nil
					}
				}
				cancel()
				if err != nil {
					l.mu.Lock()
					l.failed++
					l.mu.Unlock()
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
}

// runPolling sets up a fresh outbox on the rig, starts 4 producers and 2 polling relays, lets
// them run 3 s, runs event (the failover), goes on 5 s after the cluster is healthy again,
// then stops the producers, waits until every committed event was delivered and checks.
func runPolling(t *testing.T, r *rig, name string, event func(t *testing.T)) {
	ctx := t.Context()
	schema, admin, _, ob := newOutbox(t, r, name)

	sink := &timedSink{first: map[string]time.Time{}}
	type relay struct {
		r    *core.Relay
		done chan error
	}
	var relays []relay
	rctx, stopRelays := context.WithCancel(context.Background())
	defer stopRelays()
	for i := range 2 {
		rs, err := postgres.New(newPool(t, r.dsn, schema, 6), &postgres.Options{Schema: schema, Logger: logger(name + "/relay-store")})
		if err != nil {
			t.Fatal(err)
		}
		rel, err := core.NewRelay(rs, sink, core.StaticRouter{Default: "failover"}, &core.RelayOptions{
			Owner: fmt.Sprintf("%s-relay%d", name, i), PollInterval: 20 * time.Millisecond, BatchSize: 100,
			LeaseTTL: 15 * time.Second, Logger: logger(fmt.Sprintf("%s/relay%d", name, i)),
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- rel.Run(rctx) }()
		relays = append(relays, relay{rel, done})
	}

	l := &ledger{byKey: map[string][]string{}, ambiguous: map[string]bool{}, committed: map[string]time.Time{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	produce(ctx, newPool(t, r.dsn, schema, 8), ob, l, 4, &stop, &wg)
	time.Sleep(3 * time.Second)

	t0 := time.Now()
	event(t)
	tLeader := time.Now()
	r.waitHealthy(t, 2*time.Minute)
	tHealthy := time.Now()
	time.Sleep(5 * time.Second)
	stop.Store(true)
	wg.Wait()
	tStopped := time.Now()

	// An ambiguous COMMIT either committed or not: the table says which.
	want, all, found, amb := resolve(t, admin, schema, l)
	// Every event whose COMMIT returned nil must be in the table (0 lost to the database).
	var committed []string
	for id := range l.committed {
		committed = append(committed, id)
	}
	var inTable int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox WHERE id = ANY($1)", committed).Scan(&inTable); err != nil {
		t.Fatal(err)
	}

	drained := waitFor(90*time.Second, func() bool { return sink.has(all) })
	tDrained := time.Now()
	stopRelays()
	for i, rl := range relays {
		if err := <-rl.done; err != nil {
			t.Errorf("relay %d: Run returned %v", i, err)
		}
	}

	// The write outage is the longest gap between two commits; the relays resumed when they
	// first sent something after it ended; the publish outage is the longest gap between two
	// first sends.
	commitGapStart, commitGapEnd := largestGap(l.committed)
	sendGapStart, sendGapEnd := largestGap(sink.first)
	resume := time.Duration(-1)
	for _, at := range sink.first {
		if d := at.Sub(commitGapEnd); !at.Before(commitGapEnd) && (resume < 0 || d < resume) {
			resume = d
		}
	}
	got := sink.rec.Snapshot()
	var st []string
	for i, rl := range relays {
		s := rl.r.Stats()
		st = append(st, fmt.Sprintf("relay%d: published %d, claim lost %d, resent %d, lane moves %d, lease expiries %d",
			i, s.Published, s.ClaimLost, s.Resent, s.LaneMoves, s.LeaseExpiries))
	}
	t.Logf("%s: %d events committed (COMMIT nil), %d ambiguous COMMITs of which %d committed, %d writes failed before COMMIT; %d of the committed in the table",
		name, len(l.committed), len(amb), len(found), l.failed, inTable)
	t.Logf("%s: a running leader (new, or restarted in place) %v after the event began, cluster healthy again (leader + sync standby) after %v; write outage (longest gap between commits) %v from %v after the event began; publish outage (longest gap between first sends) %v from %v; first send %v after writes resumed; every event delivered %v after the producers stopped",
		name, tLeader.Sub(t0).Round(time.Millisecond), tHealthy.Sub(t0).Round(time.Millisecond),
		commitGapEnd.Sub(commitGapStart).Round(time.Millisecond), commitGapStart.Sub(t0).Round(time.Millisecond),
		sendGapEnd.Sub(sendGapStart).Round(time.Millisecond), sendGapStart.Sub(t0).Round(time.Millisecond),
		resume.Round(time.Millisecond), tDrained.Sub(tStopped).Round(time.Millisecond))
	t.Logf("%s: %d deliveries; %v", name, len(got), st)
	if inTable != len(committed) {
		t.Fatalf("%d events whose COMMIT returned nil are not in the table", len(committed)-inTable)
	}
	if !drained {
		missing := 0
		for id := range all {
			if _, ok := sink.first[id]; !ok {
				missing++
			}
		}
		t.Fatalf("%d of %d committed events not delivered 90 s after the failover: the relays did not resume", missing, len(all))
	}
	dups := testkit.CheckDeliveries(t, want, got)
	t.Logf("%s: 0 lost, order per key kept, %d duplicates", name, dups)
	if resume < 0 {
		t.Fatal("nothing was published after the write outage ended")
	}
}

// largestGap returns the ends of the longest interval between two consecutive times of ts.
func largestGap(ts map[string]time.Time) (from, to time.Time) {
	all := make([]time.Time, 0, len(ts))
	for _, at := range ts {
		all = append(all, at)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Before(all[j]) })
	for i := 1; i < len(all); i++ {
		if all[i].Sub(all[i-1]) > to.Sub(from) {
			from, to = all[i-1], all[i]
		}
	}
	return from, to
}
