//go:build failover

package failover_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/reconcile"
)

// TestCrashAsyncReplication shows what asynchronous replication loses: with Patroni's
// synchronous_mode off, the primary's WAL sender is stopped (SIGSTOP) for half a second while
// producers commit, then the primary's node is killed: the transactions the standby never
// received are lost, outbox events and all, although their COMMIT returned nil. reconcile,
// given every event whose COMMIT returned nil, reports exactly those as missing.
func TestCrashAsyncReplication(t *testing.T) {
	r := needRig(t)
	ctx := t.Context()
	// Patroni promotes a replica only within maximum_lag_on_failover (1 MB in the rig) of the
	// leader's last known position: raise it, so that the lagging replica is promoted.
	r.setConfig(t, "synchronous_mode=false", "maximum_lag_on_failover=104857600")
	t.Cleanup(func() {
		r.setConfig(t, "synchronous_mode=true", "maximum_lag_on_failover=1048576")
		r.waitHealthy(t, 3*time.Minute)
	})
	var leader, standby member
	if !waitFor(time.Minute, func() bool {
		ms, _ := r.members()
		leader, standby = member{}, member{}
		for _, m := range ms {
			switch {
			case m.Role == "leader" && m.State == "running":
				leader = m
			case m.Role == "replica" && (m.State == "running" || m.State == "streaming"):
				standby = m
			}
		}
		return leader.Name != "" && standby.Name != ""
	}) {
		t.Fatal("the standby did not become asynchronous within a minute")
	}
	t.Logf("asynchronous: leader %s, replica %s", leader.Name, standby.Name)

	schema, admin, store, ob := newOutbox(t, r, "async")
	l := &ledger{byKey: map[string][]string{}, ambiguous: map[string]bool{}, committed: map[string]time.Time{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	produce(ctx, newPool(t, r.dsn, schema, 8), ob, l, 4, &stop, &wg)
	time.Sleep(2 * time.Second)

	// Stop the primary's WAL sender: what commits from now on stays on the primary.
	lp, err := pgxpool.New(ctx, "postgres://postgres@"+leader.Host+":"+strconv.Itoa(leader.Port)+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	var sender int
	err = lp.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE application_name = $1", standby.Name).Scan(&sender)
	lp.Close()
	if err != nil {
		t.Fatalf("the primary's WAL sender to %s: %v", standby.Name, err)
	}
	if err := syscall.Kill(sender, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	r.kill(t, leader.Name)
	// The stopped WAL sender would never notice its postmaster's death.
	if err := syscall.Kill(sender, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	k0 := time.Now()
	newLeader := r.waitLeader(t, leader.Name, time.Minute)
	if !waitFor(2*time.Minute, func() bool {
		c, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := admin.Exec(c, "SELECT 1")
		return err == nil
	}) {
		t.Fatalf("%s leads but accepts no read-write connection 2 minutes after the crash", newLeader)
	}
	t.Logf("%s leads and accepts writes %v after the crash", newLeader, time.Since(k0).Round(time.Millisecond))
	r.restart(t, leader.Name)
	time.Sleep(3 * time.Second)
	stop.Store(true)
	wg.Wait()

	want, _, found, amb := resolve(t, admin, schema, l)
	var committed []string
	for id := range l.committed {
		committed = append(committed, id)
	}
	rows, err := admin.Query(ctx, "SELECT id FROM "+schema+".outbox WHERE id = ANY($1)", committed)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		in[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, id := range committed {
		if !in[id] {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	t.Logf("async crash: %d events committed (COMMIT nil), %d of them lost with the old primary; %d ambiguous COMMITs of which %d committed",
		len(committed), len(lost), len(amb), len(found))
	// Every event whose COMMIT returned nil is expected (and the ambiguous ones found).
	rep, err := reconcile.Run(ctx, expected(want), store, reconcile.Options{UnpublishedAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("async crash: reconcile: %d missing, %d findings in all", len(rep.Missing), rep.Findings())
	if len(lost) == 0 {
		t.Fatal("nothing was lost: the standby received every transaction before the crash (the scenario did not happen)")
	}
	if !slices.Equal(rep.Missing, lost) {
		t.Fatalf("reconcile reported missing %v, the table lacks %v", rep.Missing, lost)
	}
	if rep.Findings() != len(lost) {
		t.Fatalf("reconcile found more than the lost events: %s", rep)
	}
}
