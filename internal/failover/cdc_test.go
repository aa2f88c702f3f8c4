//go:build failover

package failover_test

import (
	"context"
	"errors"
	"iter"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/reconcile"
)

// TestCDCSwitchoverPermanentSlot runs a CDC relay on the rig's permanent logical slot (Patroni
// "slots:", type logical), which Patroni copies to the standby and advances there, across a
// switchover: the relay resumes on the new primary from its checkpoint by itself, with
// duplicates only.
func TestCDCSwitchoverPermanentSlot(t *testing.T) {
	r := needRig(t)
	runCDC(t, r, true)
}

// TestCDCSwitchoverWithoutPermanentSlot runs a CDC relay on a slot of its own, which exists on
// the primary only, across a switchover: the new primary has no slot, the relay stops loudly
// with core.ErrPositionLost, and the documented repair (CDCRelay.Backfill, then Run) delivers
// every event; reconcile finds nothing missing or unpublished.
func TestCDCSwitchoverWithoutPermanentSlot(t *testing.T) {
	r := needRig(t)
	runCDC(t, r, false)
}

func runCDC(t *testing.T, r *rig, permanent bool) {
	ctx := t.Context()
	name := "cdc-own-slot"
	if permanent {
		name = "cdc-permanent-slot"
	}
	schema, admin, store, ob := newOutbox(t, r, name)
	pub := schema + "_pub"
	slot := schema
	if permanent {
		// The relay's first Run (no checkpoint) drops the slot Patroni created at bootstrap and
		// creates it anew at the head of the log; Patroni keeps it under the same name: it
		// copies it to the standby and advances it there.
		slot = r.slot
	} else {
		t.Cleanup(func() { dropSlot(t, r, slot) })
	}
	src, err := logical.NewChangeSource(store, &logical.Options{Slot: slot, Publication: pub, StandbyTimeout: 2 * time.Second, StallTimeout: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	sink := &timedSink{first: map[string]time.Time{}}
	rel, err := core.NewCDCRelay(store, src, sink, core.StaticRouter{Default: "failover"}, &core.CDCOptions{
		Owner: name, LeaseTTL: 15 * time.Second, CheckpointInterval: time.Second, BatchSize: 100, Logger: logger(name + "/relay"),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stopRelay := context.WithCancel(context.Background())
	defer stopRelay()
	runDone := make(chan error, 1)
	var runEnded atomic.Int64 // when the first Run returned (UnixNano)
	go func() {
		err := rel.Run(rctx)
		runEnded.Store(time.Now().UnixNano())
		runDone <- err
	}()

	l := &ledger{byKey: map[string][]string{}, ambiguous: map[string]bool{}, committed: map[string]time.Time{}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	produce(ctx, newPool(t, r.dsn, schema, 4), ob, l, 2, &stop, &wg)
	time.Sleep(4 * time.Second)
	if permanent {
		// The relay re-created the slot at its start: Patroni copies it to the standby again
		// (restarting the standby's PostgreSQL) and then advances the copy every loop_wait
		// (1 s) to the position the primary's slot confirmed. Switch over once the copy has
		// reached the relay's current checkpoint.
		cp := rel.Stats().Checkpoint
		w0 := time.Now()
		if !waitFor(90*time.Second, func() bool { return standbySlotAt(r, slot, cp) }) {
			logSlots(t, r)
			t.Fatalf("the standby's copy of slot %s did not reach %s within 90 s", slot, cp)
		}
		t.Logf("the standby's copy of slot %s reached the relay's checkpoint %s after %v", slot, cp, time.Since(w0).Round(time.Millisecond))
		logSlots(t, r)
	}
	t0 := time.Now()
	from, to := r.switchover(t)
	if got := r.waitLeader(t, from, time.Minute); got != to {
		t.Fatalf("the switchover made %s leader, not %s", got, to)
	}
	r.waitHealthy(t, 2*time.Minute)
	time.Sleep(5 * time.Second)
	stop.Store(true)
	wg.Wait()
	want, all, found, amb := resolve(t, admin, schema, l)

	delivered := func() bool { return sink.has(all) }
	var runErr error
	ran := false
	if !waitFor(60*time.Second, func() bool {
		select {
		case runErr = <-runDone:
			ran = true
			return true
		default:
			return delivered()
		}
	}) {
		t.Fatalf("%s: the CDC relay neither delivered every event nor stopped within 60 s after the switchover: stats %+v", name, rel.Stats())
	}
	resumed := !ran
	t.Logf("%s: %d committed (COMMIT nil), %d ambiguous of which %d committed; relay stats %+v", name, len(l.committed), len(amb), len(found), rel.Stats())
	if ran {
		var lost *core.PositionLostError
		t.Logf("%s: Run returned %v (%v after the switchover began)", name, runErr, time.Unix(0, runEnded.Load()).Sub(t0).Round(time.Millisecond))
		if !errors.Is(runErr, core.ErrPositionLost) || !errors.As(runErr, &lost) {
			t.Fatalf("%s: the relay stopped with %v, not a position-lost error", name, runErr)
		}
		// The repair: a backfill of every unpublished row, then Run from the new head.
		b0 := time.Now()
		if err := rel.Backfill(ctx); err != nil {
			t.Fatalf("backfill: %v", err)
		}
		t.Logf("%s: Backfill took %v", name, time.Since(b0).Round(time.Millisecond))
		go func() { runDone <- rel.Run(rctx) }()
		if !waitFor(60*time.Second, delivered) {
			t.Fatalf("%s: not every event delivered 60 s after the backfill", name)
		}
	} else {
		gapFrom, gapTo := largestGap(sink.first)
		t.Logf("%s: the relay resumed by itself; publish outage (longest gap between first sends) %v, from %v after the switchover began",
			name, gapTo.Sub(gapFrom).Round(time.Millisecond), gapFrom.Sub(t0).Round(time.Millisecond))
	}
	// Let the last marks land, then stop the relay.
	time.Sleep(2 * time.Second)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	if err := rel.Shutdown(sctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Errorf("Run after the repair: %v", err)
	}
	dups := testkit.CheckDeliveries(t, want, sink.rec.Snapshot())
	rep, err := reconcile.Run(ctx, expected(want), store, reconcile.Options{UnpublishedAfter: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: 0 lost, order per key kept, %d duplicates; reconcile: %s", name, dups, rep)
	if !rep.OK() {
		t.Fatalf("reconcile found %d findings: %s", rep.Findings(), rep)
	}
	if permanent && !resumed {
		t.Fatal("the relay on the permanent slot did not resume by itself")
	}
	if !permanent && resumed {
		t.Fatal("the relay on a slot of its own resumed on the new primary: it had no slot there")
	}
}

// dropSlot drops the test's own slot wherever it is (the old primary keeps it as a replica),
// so that it does not hold the log of the next tests.
func dropSlot(t *testing.T, r *rig, slot string) {
	ms, err := r.members()
	if err != nil {
		t.Log(err)
		return
	}
	for _, m := range ms {
		p, err := pgxpool.New(context.Background(), "postgres://postgres@"+m.Host+":"+strconv.Itoa(m.Port)+"/postgres?sslmode=disable")
		if err != nil {
			continue
		}
		_, err = p.Exec(context.Background(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", slot)
		p.Close()
		if err != nil {
			t.Logf("drop slot %s on %s: %v", slot, m.Name, err)
		}
	}
}

// logSlots logs the slots of both nodes (Patroni keeps the permanent one on the standby).
func logSlots(t *testing.T, r *rig) {
	t.Helper()
	ms, err := r.members()
	if err != nil {
		t.Log(err)
		return
	}
	for _, m := range ms {
		p, err := pgxpool.New(t.Context(), "postgres://postgres@"+m.Host+":"+strconv.Itoa(m.Port)+"/postgres?sslmode=disable")
		if err != nil {
			t.Log(err)
			continue
		}
		var s string
		err = p.QueryRow(t.Context(), `SELECT coalesce(string_agg(slot_name || ' confirmed ' || coalesce(confirmed_flush_lsn::text, '-') || ' restart ' || coalesce(restart_lsn::text, '-'), '; '), 'none')
			FROM pg_replication_slots WHERE slot_type = 'logical'`).Scan(&s)
		p.Close()
		t.Logf("%s (%s): logical slots: %s %v", m.Name, m.Role, s, err)
	}
}

// standbySlotAt reports whether the sync standby has slot, confirmed at pos or later.
func standbySlotAt(r *rig, slot, pos string) bool {
	ms, err := r.members()
	if err != nil || pos == "" {
		return false
	}
	for _, m := range ms {
		if m.Role != "sync_standby" {
			continue
		}
		p, err := pgxpool.New(context.Background(), "postgres://postgres@"+m.Host+":"+strconv.Itoa(m.Port)+"/postgres?sslmode=disable&connect_timeout=2")
		if err != nil {
			return false
		}
		defer p.Close()
		var ok bool
		err = p.QueryRow(context.Background(), "SELECT coalesce(confirmed_flush_lsn >= $1::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $2", pos, slot).Scan(&ok)
		return err == nil && ok
	}
	return false
}

// resolve checks the ambiguous COMMITs against the table and returns, per key in write order,
// the committed IDs.
func resolve(t *testing.T, admin *pgxpool.Pool, schema string, l *ledger) (want map[string][]string, all, found map[string]bool, amb []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.ambiguous {
		amb = append(amb, id)
	}
	found = map[string]bool{}
	if len(amb) > 0 {
		rows, err := admin.Query(t.Context(), "SELECT id FROM "+schema+".outbox WHERE id = ANY($1)", amb)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			found[id] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	want, all = map[string][]string{}, map[string]bool{}
	for key, ids := range l.byKey {
		for _, id := range ids {
			if !l.ambiguous[id] || found[id] {
				want[key] = append(want[key], id)
				all[id] = true
			}
		}
	}
	return want, all, found, amb
}

// expected yields every committed event for reconcile.
func expected(want map[string][]string) iter.Seq2[reconcile.Expected, error] {
	return func(yield func(reconcile.Expected, error) bool) {
		for key, ids := range want {
			for _, id := range ids {
				if !yield(reconcile.Expected{ID: id, AggregateType: "failover", AggregateID: key}, nil) {
					return
				}
			}
		}
	}
}
