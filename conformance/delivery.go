package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func deliveryCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "at-least-once", lanes: 16, run: testDeliveryParallel[TTx]},
		{name: "order", lanes: 4, run: testDeliveryOrder[TTx]},
		{name: "rolled-back", lanes: 4, run: testDeliveryRolledBack[TTx]},
		{name: "crash-restart", lanes: 4, run: testDeliveryCrash[TTx]},
		{name: "delete-on-publish", lanes: 4, run: testDeliveryDelete[TTx]},
		{name: "wakeup", lanes: 4, run: testDeliveryWakeup[TTx]},
		{name: "ingress", lanes: 4, run: testDeliveryIngress[TTx]},
	}
}

// checkOrder fails the subtest on any per-key order violation of the sink's deliveries.
func (e *env[TTx]) checkOrder(sink *Sink, want map[string][]string) {
	e.t.Helper()
	errs := sink.CheckOrder(want)
	if len(errs) > 0 {
		e.fatalf("delivery order violated:\n%v", errors.Join(errs...))
	}
}

// waitSettled waits until no record is pending (every delivered record was marked).
func (e *env[TTx]) waitSettled() {
	e.t.Helper()
	e.waitFor("every record to be marked published", func() bool {
		st := e.stats()
		return st.Pending == 0 && st.Parked == 0
	})
}

// testDeliveryParallel: concurrent writers and several relays (joining and leaving): every
// committed event is delivered at least once, in order per key, and rolled back events never.
func testDeliveryParallel[TTx any](e *env[TTx]) {
	sink := NewSink()
	const writers, keysPer, perWriter = 3, 8, 200
	r1 := e.startRelay(e.a, sink, nil)
	e.startRelay(e.a, sink, nil)

	var (
		mu        sync.Mutex
		want      = map[string][]string{}
		committed []string
		rolled    []string
		wg        sync.WaitGroup
		failed    atomic.Value
	)
	for w := range writers {
		wg.Go(func() {
			n := 0
			for tx := 0; n < perWriter; tx++ {
				size := 1 + rand.IntN(4)
				var evs []core.Event
				for range size {
					key := fmt.Sprintf("w%d-k%d", w, rand.IntN(keysPer))
					evs = append(evs, event(key, n))
					n++
				}
				rollback := tx%10 == 9
				var stored []core.Event
				err := e.a.InTx(e.ctx, func(ctx context.Context, txn TTx) error {
					var err error
					if stored, err = e.ob.Write(ctx, txn, evs...); err != nil {
						return err
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				if rollback && errors.Is(err, errRollback) {
					mu.Lock()
					rolled = append(rolled, ids(stored)...)
					mu.Unlock()
					continue
				}
				if err != nil {
					failed.Store(fmt.Errorf("writer %d: %w", w, err))
					return
				}
				_ = e.ob.Notify(e.ctx)
				mu.Lock()
				for _, ev := range stored {
					want[ev.PartitionKey] = append(want[ev.PartitionKey], ev.ID)
					committed = append(committed, ev.ID)
				}
				mu.Unlock()
			}
		})
	}
	delivered := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			if len(committed) < n {
				return false
			}
			return sink.AllAcked(committed[:n])
		}
	}
	e.waitFor("the first 150 committed events to be delivered", delivered(150))
	e.startRelay(e.a, sink, nil)
	e.waitFor("the first 300 committed events to be delivered", delivered(300))
	e.stopRelay(r1)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		e.fatalf("%v", err)
	}
	e.waitFor(fmt.Sprintf("all %d committed events to be delivered", len(committed)), delivered(len(committed)))
	e.checkOrder(sink, want)
	for _, id := range rolled {
		if sink.Sent(id) > 0 {
			e.fatalf("rolled back event %s was sent", id)
		}
	}
	e.waitSettled()
	// Seq order is write order within each key.
	seqOf := map[string]int64{}
	for _, r := range e.list(driver.StateAll) {
		seqOf[r.ID] = r.Seq
	}
	for key, list := range want {
		for i := 1; i < len(list); i++ {
			if seqOf[list[i]] <= seqOf[list[i-1]] {
				e.fatalf("key %s: event %s written after %s has a lower seq", key, list[i], list[i-1])
			}
		}
	}
}

// testDeliveryOrder: with transient failures of random events and two relays, per-key order
// still holds and everything arrives.
func testDeliveryOrder[TTx any](e *env[TTx]) {
	sink := NewSink()
	want, all := e.writeKeys("order", 10, 30)
	for _, id := range all {
		if rand.IntN(6) == 0 {
			sink.FailOnce(id)
		}
	}
	e.startRelay(e.a, sink, nil)
	e.startRelay(e.a, sink, nil)
	e.waitFor("all 300 events to be delivered", func() bool { return sink.AllAcked(all) })
	e.checkOrder(sink, want)
	e.waitSettled()
}

// testDeliveryRolledBack: events of a rolled back transaction are never sent, while events
// committed after them are.
func testDeliveryRolledBack[TTx any](e *env[TTx]) {
	sink := NewSink()
	e.startRelay(e.a, sink, nil)
	var rolled, committed []string
	want := map[string][]string{}
	for i := range 20 {
		key := fmt.Sprintf("rb-%d", i%3)
		var stored []core.Event
		err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
			var err error
			stored, err = e.ob.Write(ctx, tx, event(key, i))
			if err == nil && i%2 == 0 {
				return errRollback
			}
			return err
		})
		if i%2 == 0 {
			if !errors.Is(err, errRollback) {
				e.fatalf("InTx returned %v, want %v", err, errRollback)
			}
			rolled = append(rolled, stored[0].ID)
			continue
		}
		e.must(err, "write")
		committed = append(committed, stored[0].ID)
		want[key] = append(want[key], stored[0].ID)
	}
	e.waitFor("the committed events (written after rolled back ones) to be delivered", func() bool { return sink.AllAcked(committed) })
	for _, id := range rolled {
		if n := sink.Sent(id); n > 0 {
			e.fatalf("rolled back event %s was sent %d times", id, n)
		}
	}
	e.checkOrder(sink, want)
	if recs := e.list(driver.StateAll); len(recs) != len(committed) {
		e.fatalf("%d records stored, want the %d committed ones", len(recs), len(committed))
	}
}

// testDeliveryCrash: a relay that dies between a successful send and its settle loses
// nothing: after a restart the unmarked events are delivered again (duplicates), in order.
func testDeliveryCrash[TTx any](e *env[TTx]) {
	sink := NewSink()
	cs := NewCrashStore(e.a)
	o := relayOptions("crashing")
	o.BatchSize = 10
	o.LeaseTTL = 500 * time.Millisecond
	r1 := e.startRelay(cs, sink, o)
	e.waitFor("the first relay to claim its lanes", func() bool { return r1.r.Stats().Lanes == e.lanes })
	sink.CrashAfterSend(func() {
		cs.Crash()
		r1.cancel()
	})
	want, all := e.writeKeys("crash", 5, 10)
	e.waitFor("the first relay to send a batch and crash", cs.Crashed)
	e.stopRelay(r1)
	crashed := map[string]bool{}
	for _, m := range sink.Deliveries() {
		crashed[m.ID] = true
	}
	if len(crashed) == 0 {
		e.fatalf("the relay crashed before sending anything")
	}
	recs := e.byID()
	for id := range crashed {
		if !recs[id].PublishedAt.IsZero() {
			e.fatalf("event %s was marked published although its relay crashed before settling", id)
		}
	}
	e.startRelay(e.a, sink, nil)
	// Wait for the resends too: a relay's loops deliver their lanes independently, so every
	// event can be acknowledged once before the last crashed one is sent again.
	resent := func() bool {
		for id := range crashed {
			if sink.Acks(id) < 2 {
				return false
			}
		}
		return true
	}
	e.waitFor("every event to be delivered after the restart, the crashed ones again", func() bool {
		return sink.AllAcked(all) && resent()
	})
	for id := range crashed {
		if n := sink.Acks(id); n < 2 {
			e.fatalf("event %s was sent before the crash but not again after it (%d acks): lost", id, n)
		}
	}
	e.checkOrder(sink, want)
	e.waitSettled()
}

// testDeliveryDelete: with DeleteOnPublish every event is delivered in order and its row is
// deleted.
func testDeliveryDelete[TTx any](e *env[TTx]) {
	sink := NewSink()
	o := relayOptions(e.name("deleting"))
	o.DeleteOnPublish = true
	want, all := e.writeKeys("del", 5, 20)
	e.startRelay(e.a, sink, o)
	e.waitFor("all 100 events to be delivered", func() bool { return sink.AllAcked(all) })
	e.checkOrder(sink, want)
	e.waitFor("every delivered row to be deleted", func() bool { return len(e.list(driver.StateAll)) == 0 })
	if st := e.stats(); st.Pending != 0 || st.Published != 0 || st.Parked != 0 {
		e.fatalf("after delete-on-publish Stats = %+v, want all zero", st)
	}
}

// testDeliveryWakeup: with a Waker/Notifier adapter, Outbox.Notify after commit makes a relay
// with a one-hour poll interval deliver the event. An adapter without both capabilities is
// checked against the base behaviour instead (fstest.TestFS style): Notify is a no-op that
// returns nil, and a relay still delivers by polling.
func testDeliveryWakeup[TTx any](e *env[TTx]) {
	if !e.h.Capabilities.Has(Waker | Notifier) {
		e.t.Log("conformance: not offered: driver.Waker and driver.Notifier (Harness.Capabilities); checking delivery by polling instead")
		testDeliveryPollOnly(e)
		return
	}
	capable[driver.Waker](e, Waker)
	capable[driver.Notifier](e, Notifier)
	sink := NewSink()
	o := relayOptions(e.name("sleepy"))
	o.PollInterval = time.Hour
	o.LeaseTTL = time.Minute
	r := e.startRelay(e.a, sink, o)
	e.waitFor("the relay to claim its lanes", func() bool { return r.r.Stats().Lanes == e.lanes })
	for i := range 3 {
		ev := e.write(event("wake", i))
		// A notification may be lost (that only costs latency), so notify again while waiting;
		// without working wake-ups the relay sleeps for an hour and the watchdog fires.
		var last time.Time
		e.waitFor(fmt.Sprintf("event %d to be delivered after Notify (poll interval 1h)", i), func() bool {
			if time.Since(last) > 100*time.Millisecond {
				e.must(e.ob.Notify(e.ctx), "Outbox.Notify")
				last = time.Now()
			}
			return sink.Acks(ev[0].ID) > 0
		})
	}
	// Flusher: Outbox.Flush waits for the notifications accepted so far and returns nil.
	if e.h.Capabilities.Has(Flusher) {
		capable[driver.Flusher](e, Flusher)
		e.must(e.ob.Notify(e.ctx), "Outbox.Notify")
		e.must(e.ob.Flush(e.ctx), "Outbox.Flush")
	} else {
		e.notOffered("driver.Flusher (Harness.Capabilities): Outbox.Flush")
	}
}

// testDeliveryPollOnly is testDeliveryWakeup for an adapter without wake-ups: Outbox.Notify
// returns nil and the relay delivers at its next poll.
func testDeliveryPollOnly[TTx any](e *env[TTx]) {
	sink := NewSink()
	o := relayOptions(e.name("poller"))
	o.PollInterval = 20 * time.Millisecond
	r := e.startRelay(e.a, sink, o)
	e.waitFor("the relay to claim its lanes", func() bool { return r.r.Stats().Lanes == e.lanes })
	for i := range 3 {
		ev := e.write(event("poll", i))
		e.must(e.ob.Notify(e.ctx), "Outbox.Notify without a Notifier")
		e.waitFor(fmt.Sprintf("event %d to be delivered by polling", i), func() bool { return sink.Acks(ev[0].ID) > 0 })
	}
}

// writeKeys commits perKey events for each of keys partition keys named prefix-0, prefix-1, ...
// (one transaction per key) and returns the event IDs per key in write order, and all of them.
func (e *env[TTx]) writeKeys(prefix string, keys, perKey int) (map[string][]string, []string) {
	want := map[string][]string{}
	var all []string
	for k := range keys {
		key := fmt.Sprintf("%s-%d", prefix, k)
		evs := make([]core.Event, perKey)
		for i := range evs {
			evs[i] = event(key, i)
		}
		for _, ev := range e.write(evs...) {
			want[key] = append(want[key], ev.ID)
			all = append(all, ev.ID)
		}
	}
	return want, all
}

// testDeliveryIngress: driver.IngressCounter, the producers' count the relay's adaptive drain
// reads, grows by at least the records of each committed transaction, and the relay's marks
// do not lower it.
func testDeliveryIngress[TTx any](e *env[TTx]) {
	if !e.h.Capabilities.Has(IngressCounter) {
		e.notOffered("driver.IngressCounter (Harness.Capabilities): the relay's adaptive drain never limits its rate")
		return
	}
	ic := capable[driver.IngressCounter](e, IngressCounter)
	read := func() uint64 {
		e.t.Helper()
		n, err := ic.Ingress(e.ctx)
		e.must(err, "Ingress")
		return n
	}
	n0 := read()
	var evs []core.Event
	for i := range 5 {
		evs = append(evs, event(fmt.Sprintf("in-%d", i%2), i))
	}
	e.write(evs...)
	n1 := read()
	if n1 < n0+5 {
		e.fatalf("Ingress: %d before a committed transaction of 5 records, %d after; want at least %d", n0, n1, n0+5)
	}
	err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
		if _, err := e.ob.Write(ctx, tx, event("in-rolled", 0)); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		e.fatalf("a rolled-back write: %v", err)
	}
	e.write(event("in-0", 5), event("in-1", 6))
	n2 := read()
	if n2 < n1+2 {
		e.fatalf("Ingress: %d, then %d after a rolled-back and a committed transaction of 2 records; want at least %d", n1, n2, n1+2)
	}
	sink := NewSink()
	r := e.startRelay(e.a, sink, nil)
	e.waitSettled()
	e.must(r.stop(), "stop the relay")
	if n3 := read(); n3 < n2 {
		e.fatalf("Ingress: %d before the relay marked every record published, %d after; marks must not lower it", n2, n3)
	}
}
