package conformance

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func inboxCases[TTx any]() []tcase[TTx] {
	return []tcase[TTx]{
		{name: "concurrent-once", run: testInboxConcurrent[TTx]},
		{name: "digest-mismatch", run: testInboxDigest[TTx]},
		{name: "handler-error", run: testInboxHandlerError[TTx]},
		{name: "handler-panic", run: testInboxHandlerPanic[TTx]},
		{name: "versions", run: testInboxVersions[TTx]},
		{name: "gap-reject", run: testInboxGapReject[TTx]},
		{name: "retention", run: testInboxRetention[TTx]},
		{name: "consumers", run: testInboxConsumers[TTx]},
		{name: "horizon-after-insert", run: testInboxHorizonAfterInsert[TTx]},
		{name: "batch", run: testInboxBatch[TTx]},
		{name: "batch-outcomes", run: testInboxBatchOutcomes[TTx]},
		{name: "set", run: testInboxSet[TTx]},
		{name: "prune-beside-delivery", run: testInboxPruneBesideDelivery[TTx]},
		{name: "tenants", run: testInboxTenants[TTx]},
	}
}

// testInboxPruneBesideDelivery (adapters without driver.SingleWriter, whose inbox transactions
// run side by side): Inbox.Prune never waits for a delivery in progress. The horizon check
// takes no lock that a delivery's transaction keeps until it commits (when each delivery held
// a shared lock on the horizon row, the prune that updates it waited for every delivery in
// flight: 5–13.5 s on PostgreSQL under 16 busy consumers). It processes old messages, gives
// the consumer a horizon row (a first prune, so that the held delivery reads one), then holds
// one delivery's handler (its transaction open, its record inserted and its horizon read) while
// the consumer prunes the old records: the prune must return while the handler still waits (a
// prune that waits is reported when the watchdog fires). It then checks the held delivery was
// applied, the old records deleted and the new horizon enforced. The adapter needs at least 2
// connections.
func testInboxPruneBesideDelivery[TTx any](e *env[TTx]) {
	if e.h.Capabilities.Has(SingleWriter) {
		e.notOffered("a single-writer database (driver.SingleWriter) runs one inbox transaction at a time")
		return
	}
	const (
		consumer = "busy"
		old      = 20
	)
	ctx := e.ctx
	in, err := core.NewInbox(ctx, driver.InboxStore[TTx](e.a), nil)
	e.must(err, "NewInbox")
	now := time.Now()
	noop := func(context.Context, TTx, core.InboxMessage) error { return nil }
	msg := func(id string, at time.Time) core.InboxMessage {
		return core.InboxMessage{EventID: id, Payload: []byte("p"), OccurredAt: at}
	}
	for i := range old {
		res, err := in.Process(ctx, consumer, msg(fmt.Sprintf("old-%d", i), now.Add(-2*time.Hour)), noop)
		e.must(err, "Process")
		if res.Outcome != core.Applied {
			e.fatalf("old message %d: %v, want Applied", i, res.Outcome)
		}
	}
	// A first prune gives the consumer its horizon row, which every delivery then reads.
	if n, err := in.Prune(ctx, consumer, now.Add(-3*time.Hour), 0); err != nil || n != 0 {
		e.fatalf("the first Prune = %d, %v; want 0: no record is older than the first horizon", n, err)
	}

	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock() // a failed check below must not leave the delivery waiting
	type result struct {
		res core.InboxResult
		err error
	}
	held := make(chan result, 1)
	go func() {
		res, err := in.Process(ctx, consumer, msg("held", now), func(context.Context, TTx, core.InboxMessage) error {
			close(entered)
			<-release
			return nil
		})
		held <- result{res, err}
	}()
	select {
	case <-entered:
	case r := <-held:
		e.fatalf("the held delivery ended before its handler ran: %+v", r)
	case <-ctx.Done():
		e.fatalf("gave up waiting for the held delivery's handler")
	}

	type pruned struct {
		n   int
		err error
	}
	done := make(chan pruned, 1)
	go func() {
		n, err := in.Prune(ctx, consumer, now.Add(-time.Hour), 0)
		done <- pruned{n, err}
	}()
	var p pruned
	select {
	case p = <-done:
	case <-ctx.Done():
		e.fatalf("Prune waits for the delivery in progress: the horizon check locks what the prune changes")
	}
	if p.err != nil || !e.prunedOK(p.n, old) {
		e.fatalf("Prune beside the held delivery = %d, %v; want %d: every record older than the horizon", p.n, p.err, old)
	}

	unblock()
	r := <-held
	if r.err != nil || r.res.Outcome != core.Applied {
		e.fatalf("the held delivery, newer than the horizon = %+v, %v; want Applied", r.res, r.err)
	}
	if res, err := in.Process(ctx, consumer, msg("new", time.Now()), noop); err != nil || res.Outcome != core.Applied {
		e.fatalf("a new message after the prune = %+v, %v; want Applied", res, err)
	}
	if _, err := in.Process(ctx, consumer, msg("too-old", now.Add(-2*time.Hour)), noop); !errors.Is(err, core.ErrBeyondRetention) {
		e.fatalf("a message older than the new horizon: %v, want core.ErrBeyondRetention", err)
	}
}

// inboxFixture is an Inbox with a counting handler that applies Harness.Effect.
type inboxFixture[TTx any] struct {
	e     *env[TTx]
	in    *core.Inbox[TTx]
	calls atomic.Int64
}

func (e *env[TTx]) inbox(o *core.InboxOptions) *inboxFixture[TTx] {
	e.t.Helper()
	in, err := core.NewInbox(e.ctx, driver.InboxStore[TTx](e.a), o)
	e.must(err, "NewInbox")
	return &inboxFixture[TTx]{e: e, in: in}
}

// handler applies the effect named key.
func (f *inboxFixture[TTx]) handler(key string) core.Handler[TTx] {
	return func(ctx context.Context, tx TTx, msg core.InboxMessage) error {
		f.calls.Add(1)
		return f.e.h.Effect(ctx, tx, key)
	}
}

func (f *inboxFixture[TTx]) process(consumer string, msg core.InboxMessage, key string) (core.InboxResult, error) {
	return f.in.Process(f.e.ctx, consumer, msg, f.handler(key))
}

// expect processes msg and checks the outcome (and Prior, for Duplicate).
func (f *inboxFixture[TTx]) expect(what, consumer string, msg core.InboxMessage, key string, outcome, prior core.Outcome) {
	f.e.t.Helper()
	res, err := f.process(consumer, msg, key)
	if err != nil {
		f.e.fatalf("%s: Process: %v", what, err)
	}
	if res.Outcome != outcome || (outcome == core.Duplicate && res.Prior != prior) {
		f.e.fatalf("%s: got %v (prior %v), want %v (prior %v)", what, res.Outcome, res.Prior, outcome, prior)
	}
}

func (f *inboxFixture[TTx]) expectErr(what, consumer string, msg core.InboxMessage, key string, want error) {
	f.e.t.Helper()
	calls := f.calls.Load()
	res, err := f.process(consumer, msg, key)
	if !errors.Is(err, want) {
		f.e.fatalf("%s: Process returned %v, %v; want an error wrapping %v", what, res, err, want)
	}
	if f.calls.Load() != calls {
		f.e.fatalf("%s: the handler ran although the message was refused", what)
	}
}

func (e *env[TTx]) expectEffect(key string, want int) {
	e.t.Helper()
	if n := e.effectCount(key); n != want {
		e.fatalf("effect %s applied %d times, want %d", key, n, want)
	}
}

func msg(id string, payload string) core.InboxMessage {
	return core.InboxMessage{EventID: id, Payload: []byte(payload), OccurredAt: i0, SourcePosition: "queue/" + id}
}

// testInboxConcurrent: many concurrent deliveries of one event apply its effect exactly once:
// one Applied, the others Duplicate with Prior Applied.
func testInboxConcurrent[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	const rounds, deliveries = 5, 10
	for round := range rounds {
		id, key := fmt.Sprintf("evt-%d", round), fmt.Sprintf("eff-%d", round)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			applied int
			dups    int
			errs    []error
		)
		start := make(chan struct{})
		for range deliveries {
			wg.Go(func() {
				<-start
				res, err := f.in.Process(e.ctx, "c1", msg(id, "same payload"), func(ctx context.Context, tx TTx, m core.InboxMessage) error {
					f.calls.Add(1)
					runtime.Gosched() // widen the window between record and commit
					return e.h.Effect(ctx, tx, key)
				})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					errs = append(errs, err)
				case res.Outcome == core.Applied:
					applied++
				case res.Outcome == core.Duplicate && res.Prior == core.Applied:
					dups++
				default:
					errs = append(errs, fmt.Errorf("unexpected result %+v", res))
				}
			})
		}
		close(start)
		wg.Wait()
		if len(errs) > 0 {
			e.fatalf("round %d: concurrent deliveries failed: %v", round, errors.Join(errs...))
		}
		if applied != 1 || dups != deliveries-1 {
			e.fatalf("round %d: %d Applied and %d Duplicate of %d deliveries, want 1 and %d", round, applied, dups, deliveries, deliveries-1)
		}
		e.expectEffect(key, 1)
	}
}

// testInboxDigest: the same event ID with another payload is refused and applies nothing.
func testInboxDigest[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	f.expect("first delivery", "c1", msg("x", "p1"), "eff", core.Applied, 0)
	f.expectErr("same id, other payload", "c1", msg("x", "p2"), "eff", core.ErrDigestMismatch)
	e.expectEffect("eff", 1)
	f.expect("redelivery", "c1", msg("x", "p1"), "eff", core.Duplicate, core.Applied)
	e.expectEffect("eff", 1)
}

var errHandler = errors.New("conformance: handler failed")

// testInboxHandlerError: a failing handler records nothing; a retry applies.
func testInboxHandlerError[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	_, err := f.in.Process(e.ctx, "c1", msg("h", "p"), func(ctx context.Context, tx TTx, m core.InboxMessage) error {
		if err := e.h.Effect(ctx, tx, "eff"); err != nil {
			return err
		}
		return errHandler
	})
	if !errors.Is(err, errHandler) {
		e.fatalf("Process returned %v, want the handler's error", err)
	}
	e.expectEffect("eff", 0)
	f.expect("retry after the handler failed", "c1", msg("h", "p"), "eff", core.Applied, 0)
	e.expectEffect("eff", 1)
	f.expect("redelivery", "c1", msg("h", "p"), "eff", core.Duplicate, core.Applied)
}

// testInboxHandlerPanic: a panicking handler rolls its effect and the record back, and the
// panic reaches Process's caller unchanged (as Inbox.Process documents).
func testInboxHandlerPanic[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	type boom struct{}
	got := func() (p any) {
		defer func() { p = recover() }()
		_, _ = f.in.Process(e.ctx, "c1", msg("hp", "p"), func(ctx context.Context, tx TTx, m core.InboxMessage) error {
			if err := e.h.Effect(ctx, tx, "eff"); err != nil {
				return err
			}
			panic(boom{})
		})
		return nil
	}()
	if _, ok := got.(boom); !ok {
		e.fatalf("Process let through %v, want the handler's panic value", got)
	}
	e.expectEffect("eff", 0)
	f.expect("retry after the handler panicked", "c1", msg("hp", "p"), "eff", core.Applied, 0)
	e.expectEffect("eff", 1)
}

func versioned(id, entity string, v int64) core.InboxMessage {
	m := msg(id, "payload of "+id)
	m.Entity, m.Version = entity, v
	return m
}

// testInboxVersions: a version not above the last applied one is recorded Stale and its handler
// does not run; with GapAllow a newer version applies even across a gap.
func testInboxVersions[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	f.expect("v1", "c1", versioned("a", "order/1", 1), "eff", core.Applied, 0)
	calls := f.calls.Load()
	f.expect("v1 again, new id", "c1", versioned("b", "order/1", 1), "eff", core.Stale, 0)
	if f.calls.Load() != calls {
		e.fatalf("the handler ran for a stale message")
	}
	f.expect("v3 across a gap", "c1", versioned("c", "order/1", 3), "eff", core.Applied, 0)
	f.expect("v2 after v3", "c1", versioned("d", "order/1", 2), "eff", core.Stale, 0)
	f.expect("redelivery of a stale message", "c1", versioned("b", "order/1", 1), "eff", core.Duplicate, core.Stale)
	f.expect("another entity", "c1", versioned("e", "order/2", 1), "eff", core.Applied, 0)
	e.expectEffect("eff", 3)
}

// testInboxGapReject: with GapReject a version past the next one is ErrVersionGap and not
// recorded; in order it applies.
func testInboxGapReject[TTx any](e *env[TTx]) {
	f := e.inbox(&core.InboxOptions{Gap: core.GapReject})
	f.expect("v1", "c1", versioned("s1", "e", 1), "eff", core.Applied, 0)
	f.expectErr("v3 before v2", "c1", versioned("s3", "e", 3), "eff", core.ErrVersionGap)
	f.expectErr("v3 before v2, again (not recorded)", "c1", versioned("s3", "e", 3), "eff", core.ErrVersionGap)
	f.expect("v2", "c1", versioned("s2", "e", 2), "eff", core.Applied, 0)
	f.expect("v3 in order", "c1", versioned("s3", "e", 3), "eff", core.Applied, 0)
	e.expectEffect("eff", 3)
}

// testInboxRetention: after Prune, a message older than the horizon is ErrBeyondRetention and
// not applied; newer ones are still deduplicated; the horizon never goes down.
func testInboxRetention[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	at := func(id string, d time.Duration) core.InboxMessage {
		m := msg(id, "p")
		m.OccurredAt = i0.Add(d)
		return m
	}
	f.expect("old", "c1", at("m1", 0), "eff", core.Applied, 0)
	f.expect("new", "c1", at("m2", 2*time.Hour), "eff", core.Applied, 0)
	for i := range 5 {
		f.expect("older", "c1", at(fmt.Sprintf("o%d", i), -time.Duration(i+1)*time.Minute), "eff", core.Applied, 0)
	}
	n, err := f.in.Prune(e.ctx, "c1", i0.Add(time.Hour), 2)
	e.must(err, "Inbox.Prune")
	if !e.prunedOK(n, 6) {
		e.fatalf("Prune deleted %d records, want 6 (m1 and o0-o4)", n)
	}
	f.expectErr("pruned message redelivered", "c1", at("m1", 0), "eff", core.ErrBeyondRetention)
	f.expectErr("new message older than the horizon", "c1", at("m3", 30*time.Minute), "eff", core.ErrBeyondRetention)
	f.expect("newer message redelivered", "c1", at("m2", 2*time.Hour), "eff", core.Duplicate, core.Applied)
	e.expectEffect("eff", 7)
	n, err = f.in.Prune(e.ctx, "c1", i0, 10)
	e.must(err, "Inbox.Prune (lower)")
	if n != 0 {
		e.fatalf("a lower Prune deleted %d records", n)
	}
	f.expectErr("after a lower Prune the horizon stays", "c1", at("m4", 30*time.Minute), "eff", core.ErrBeyondRetention)
	f.expect("another consumer has its own horizon", "c2", at("m1", 0), "eff", core.Applied, 0)
	e.expectEffect("eff", 8)
}

// testInboxConsumers: deduplication is per consumer.
func testInboxConsumers[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	f.expect("consumer a", "a", msg("same", "p"), "eff-a", core.Applied, 0)
	f.expect("consumer b", "b", msg("same", "p"), "eff-b", core.Applied, 0)
	f.expect("consumer a again", "a", msg("same", "p"), "eff-a", core.Duplicate, core.Applied)
	e.expectEffect("eff-a", 1)
	e.expectEffect("eff-b", 1)
}

// testInboxHorizonAfterInsert: the retention rule without a lock (driver.InboxStore.Horizon and
// PruneInbox). A transaction that began before a PruneInbox (it took a version lock first, as
// Process does) and whose InsertRecord inserts an old record's key again, because the prune
// deleted it, must read the raised horizon afterwards, so Process refuses the old message
// instead of applying it twice. The prune completes whether or not it waited.
func testInboxHorizonAfterInsert[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	for _, consumer := range []string{"never-pruned", "pruned"} {
		if consumer == "pruned" {
			_, err := f.in.Prune(e.ctx, consumer, i0.Add(-time.Hour), 10)
			e.must(err, "Inbox.Prune")
		}
		f.expect("first delivery", consumer, msg("m", "p"), "eff-"+consumer, core.Applied, 0)
		pruned := make(chan error, 1)
		var n int
		err := e.a.InTx(e.ctx, func(ctx context.Context, tx TTx) error {
			if _, _, err := e.a.LockVersion(ctx, tx, consumer, "entity"); err != nil {
				return err
			}
			go func() {
				var err error
				n, err = e.a.PruneInbox(e.ctx, consumer, i0.Add(time.Hour), 10)
				pruned <- err
			}()
			// Give a PruneInbox that does not wait (the point of the rule) the time to finish.
			select {
			case err := <-pruned:
				pruned <- err
			case <-time.After(100 * time.Millisecond):
			}
			_, inserted, err := e.a.InsertRecord(ctx, tx, driver.InboxRecord{Consumer: consumer, EventID: "m",
				Digest: [32]byte{1}, Outcome: core.Applied, OccurredAt: i0})
			if err != nil {
				return err
			}
			h, err := e.a.Horizon(ctx, tx, consumer)
			if err != nil {
				return err
			}
			if inserted && h.Before(i0.Add(time.Hour)) {
				e.fatalf("%s: PruneInbox deleted the record, yet Horizon after InsertRecord returned %v, not the raised horizon %v: the old message would apply twice",
					consumer, h, i0.Add(time.Hour))
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			e.fatalf("%s: transaction: %v", consumer, err)
		}
		select {
		case err := <-pruned:
			e.must(err, consumer+": PruneInbox")
		case <-e.ctx.Done():
			e.fatalf("%s: PruneInbox did not complete", consumer)
		}
		if !e.prunedOK(n, 1) {
			e.fatalf("%s: PruneInbox deleted %d records, want 1", consumer, n)
		}
		f.expectErr("redelivery after the prune", consumer, msg("m", "p"), "eff-"+consumer, core.ErrBeyondRetention)
		e.expectEffect("eff-"+consumer, 1)
	}
}

// i0 is the base of inbox message times (OccurredAt, Prune horizons): in the past, because
// Inbox.Prune refuses a horizon beyond now plus core.MaxClockSkew.
var i0 = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// testInboxBatch: ProcessBatch applies each message as Process would, in one transaction:
// a second delivery within the batch is a Duplicate, versions ascend within it; a failing
// message (digest conflict, handler error) rolls the whole batch back, and the error names
// its index and wraps the cause.
func testInboxBatch[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	effect := func(key string) core.BatchHandler[TTx] {
		return func(ctx context.Context, tx TTx, i int, m core.InboxMessage) error {
			f.calls.Add(1)
			return e.h.Effect(ctx, tx, key)
		}
	}
	batch := []core.InboxMessage{msg("b1", "p1"), msg("b2", "p2"), msg("b1", "p1"),
		versioned("b3", "order/b", 1), versioned("b4", "order/b", 2), versioned("b5", "order/b", 1)}
	res, err := f.in.ProcessBatch(e.ctx, "c1", batch, effect("eff"))
	e.must(err, "ProcessBatch")
	want := []core.InboxResult{{Outcome: core.Applied}, {Outcome: core.Applied}, {Outcome: core.Duplicate, Prior: core.Applied},
		{Outcome: core.Applied}, {Outcome: core.Applied}, {Outcome: core.Stale}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		e.fatalf("ProcessBatch results %v, want %v", res, want)
	}
	e.expectEffect("eff", 4)
	f.expect("a message of the batch, delivered again", "c1", msg("b2", "p2"), "eff", core.Duplicate, core.Applied)

	// A digest conflict at index 2 rolls back the new messages before it.
	calls := f.calls.Load()
	_, err = f.in.ProcessBatch(e.ctx, "c1", []core.InboxMessage{msg("b6", "p6"), msg("b7", "p7"), msg("b1", "other")}, effect("eff2"))
	var be *core.BatchError
	if !errors.As(err, &be) || be.Index != 2 || !errors.Is(err, core.ErrDigestMismatch) {
		e.fatalf("ProcessBatch with a conflict at index 2 returned %v, want a *core.BatchError at 2 wrapping ErrDigestMismatch", err)
	}
	if f.calls.Load() != calls+2 {
		e.fatalf("the handler ran %d times before the conflict, want 2", f.calls.Load()-calls)
	}
	e.expectEffect("eff2", 0)
	f.expect("a message rolled back with its batch", "c1", msg("b6", "p6"), "eff2", core.Applied, 0)

	// A handler error at index 1 rolls back index 0.
	_, err = f.in.ProcessBatch(e.ctx, "c1", []core.InboxMessage{msg("b8", "p8"), msg("b9", "p9")},
		func(ctx context.Context, tx TTx, i int, m core.InboxMessage) error {
			if err := e.h.Effect(ctx, tx, "eff3"); err != nil {
				return err
			}
			if i == 1 {
				return errHandler
			}
			return nil
		})
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, errHandler) {
		e.fatalf("ProcessBatch with a failing handler at index 1 returned %v, want a *core.BatchError at 1 wrapping the handler's error", err)
	}
	e.expectEffect("eff3", 0)
	f.expect("the first message after its batch failed", "c1", msg("b8", "p8"), "eff3", core.Applied, 0)

	// An invalid message refuses the batch before anything runs.
	calls = f.calls.Load()
	_, err = f.in.ProcessBatch(e.ctx, "c1", []core.InboxMessage{msg("b10", "p"), {Payload: []byte("no id")}}, effect("eff4"))
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, core.ErrInvalidMessage) {
		e.fatalf("ProcessBatch with an invalid message at index 1 returned %v, want a *core.BatchError at 1 wrapping ErrInvalidMessage", err)
	}
	if f.calls.Load() != calls {
		e.fatalf("the handler ran for a batch that was refused")
	}
}

// testInboxSet: ProcessSet checks and records each message as ProcessBatch does and hands the
// Applied ones, in order, to one handler call; a handler error rolls the whole batch back and
// is returned wrapped, not as a *core.BatchError; a batch with nothing to apply calls nothing.
func testInboxSet[TTx any](e *env[TTx]) {
	f := e.inbox(nil)
	var got [][]string
	effect := func(key string) core.SetHandler[TTx] {
		return func(ctx context.Context, tx TTx, applied []core.InboxMessage) error {
			ids := []string{}
			for _, m := range applied {
				ids = append(ids, m.EventID)
				if err := e.h.Effect(ctx, tx, key); err != nil {
					return err
				}
			}
			got = append(got, ids)
			return nil
		}
	}
	_, err := f.in.ProcessBatch(e.ctx, "c1", []core.InboxMessage{msg("s0", "p0")}, func(ctx context.Context, tx TTx, _ int, _ core.InboxMessage) error {
		return e.h.Effect(ctx, tx, "eff-s")
	})
	e.must(err, "ProcessBatch")
	batch := []core.InboxMessage{msg("s1", "p1"), msg("s0", "p0"), msg("s2", "p2"), msg("s1", "p1"),
		versioned("s3", "order/s", 2), versioned("s4", "order/s", 1)}
	res, err := f.in.ProcessSet(e.ctx, "c1", batch, effect("eff-s"))
	e.must(err, "ProcessSet")
	want := []core.InboxResult{{Outcome: core.Applied}, {Outcome: core.Duplicate, Prior: core.Applied}, {Outcome: core.Applied},
		{Outcome: core.Duplicate, Prior: core.Applied}, {Outcome: core.Applied}, {Outcome: core.Stale}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		e.fatalf("ProcessSet results %v, want %v", res, want)
	}
	if fmt.Sprint(got) != "[[s1 s2 s3]]" {
		e.fatalf("ProcessSet handed the handler %v, want one call with [s1 s2 s3] (the Applied messages in order)", got)
	}
	e.expectEffect("eff-s", 4)
	f.expect("a message of the set, delivered again", "c1", msg("s2", "p2"), "eff-s", core.Duplicate, core.Applied)

	// Nothing to apply: no call.
	got = nil
	_, err = f.in.ProcessSet(e.ctx, "c1", []core.InboxMessage{msg("s1", "p1"), versioned("s5", "order/s", 1)}, effect("eff-s"))
	e.must(err, "ProcessSet of redeliveries")
	if got != nil {
		e.fatalf("ProcessSet called the handler with %v for a batch with nothing Applied", got)
	}

	// A handler error rolls back every message of the batch.
	_, err = f.in.ProcessSet(e.ctx, "c1", []core.InboxMessage{msg("s6", "p6"), msg("s7", "p7")},
		func(ctx context.Context, tx TTx, applied []core.InboxMessage) error {
			if err := e.h.Effect(ctx, tx, "eff-s2"); err != nil {
				return err
			}
			return errHandler
		})
	var be *core.BatchError
	if !errors.Is(err, errHandler) || errors.As(err, &be) {
		e.fatalf("ProcessSet with a failing handler returned %v, want an error wrapping the handler's error that is no *core.BatchError", err)
	}
	e.expectEffect("eff-s2", 0)
	f.expect("a message rolled back with its set", "c1", msg("s7", "p7"), "eff-s2", core.Applied, 0)

	// A conflict is still a *core.BatchError naming its message, and nothing runs.
	got = nil
	_, err = f.in.ProcessSet(e.ctx, "c1", []core.InboxMessage{msg("s8", "p8"), msg("s1", "other")}, effect("eff-s3"))
	if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, core.ErrDigestMismatch) {
		e.fatalf("ProcessSet with a conflict at index 1 returned %v, want a *core.BatchError at 1 wrapping ErrDigestMismatch", err)
	}
	if got != nil {
		e.fatalf("ProcessSet called the handler (%v) for a batch with a conflict", got)
	}
	e.expectEffect("eff-s3", 0)
}

// messageByMessage hides an adapter's InboxBatchStore methods: ProcessBatch on it makes one
// InboxStore call per message.
type messageByMessage[TTx any] struct{ driver.InboxStore[TTx] }

// testInboxBatchOutcomes: ProcessBatch gives the outcomes Process would give one message after
// another, through the adapter's driver.InboxBatchStore when it has one and through its
// InboxStore methods alone: redeliveries of recorded
// events among new versions of their entity, a second delivery within the batch, stale
// versions, a gap (GapReject refuses the whole batch), and an event first recorded without a
// version and redelivered with one.
func testInboxBatchOutcomes[TTx any](e *env[TTx]) {
	if e.offers(InboxBatchStore) {
		capable[driver.InboxBatchStore[TTx]](e, InboxBatchStore)
	}
	stores := map[string]driver.InboxStore[TTx]{"adapter": driver.InboxStore[TTx](e.a), "message-by-message": messageByMessage[TTx]{e.a}}
	for _, name := range []string{"adapter", "message-by-message"} {
		c := "cb-" + name
		in, err := core.NewInbox(e.ctx, stores[name], nil)
		e.must(err, "NewInbox")
		gapIn, err := core.NewInbox(e.ctx, stores[name], &core.InboxOptions{Gap: core.GapReject})
		e.must(err, "NewInbox")
		run := func(what string, in *core.Inbox[TTx], msgs []core.InboxMessage, want ...core.InboxResult) {
			e.t.Helper()
			res, err := in.ProcessBatch(e.ctx, c, msgs, func(ctx context.Context, tx TTx, _ int, m core.InboxMessage) error {
				return e.h.Effect(ctx, tx, c+"/"+m.EventID)
			})
			if err != nil {
				e.fatalf("%s (%s): ProcessBatch: %v", what, name, err)
			}
			if fmt.Sprint(res) != fmt.Sprint(want) {
				e.fatalf("%s (%s): results %v, want %v", what, name, res, want)
			}
		}
		applied, stale := core.InboxResult{Outcome: core.Applied}, core.InboxResult{Outcome: core.Stale}
		dupApplied := core.InboxResult{Outcome: core.Duplicate, Prior: core.Applied}
		run("first versions", in, []core.InboxMessage{versioned("x1", "E", 1), versioned("x2", "E", 2)}, applied, applied)
		run("redelivery among new versions", in, []core.InboxMessage{
			versioned("x2", "E", 2), versioned("y3", "E", 3), versioned("y3", "E", 3), versioned("z", "E", 2),
			msg("w", "p"), versioned("y5", "E", 5), versioned("z", "E", 2)},
			dupApplied, applied, dupApplied, stale, applied, applied, core.InboxResult{Outcome: core.Duplicate, Prior: core.Stale})
		for _, id := range []string{"x1", "x2", "y3", "w", "y5"} {
			e.expectEffect(c+"/"+id, 1)
		}
		e.expectEffect(c+"/z", 0)

		_, err = gapIn.ProcessBatch(e.ctx, c, []core.InboxMessage{versioned("g1", "F", 1), versioned("g3", "F", 3)},
			func(ctx context.Context, tx TTx, _ int, m core.InboxMessage) error {
				return e.h.Effect(ctx, tx, c+"/"+m.EventID)
			})
		var be *core.BatchError
		if !errors.As(err, &be) || be.Index != 1 || !errors.Is(err, core.ErrVersionGap) {
			e.fatalf("a gap at index 1 (%s): ProcessBatch returned %v, want a *core.BatchError at 1 wrapping ErrVersionGap", name, err)
		}
		e.expectEffect(c+"/g1", 0)
		run("the same versions without the gap", gapIn, []core.InboxMessage{versioned("g1", "F", 1), versioned("g2", "F", 2), versioned("g3", "F", 3)},
			applied, applied, applied)

		// u is recorded without a version, then redelivered with one: it stays a Duplicate and
		// does not raise K, so k2 (K version 2) applies.
		run("unversioned first", in, []core.InboxMessage{msg("u", "payload of u"), msg("v", "p")}, applied, applied)
		run("redelivered with a version", in, []core.InboxMessage{versioned("u", "K", 3), versioned("k2", "K", 2)}, dupApplied, applied)
	}
}

// testInboxTenants: the inbox key is (consumer, source, tenant, event ID). A message of tenant
// A with tenant B's event ID (and other content) is A's own record: neither B's duplicate nor a
// digest conflict, whichever comes first; a message from another source likewise; and entity
// versions are kept per source and tenant (A's version 9 of an entity leaves B's version 1
// applicable). Redeliveries in each scope stay duplicates. A tenant the inbox does not list is
// refused (ErrTenantRefused, permanent) and nothing is recorded. Prune deletes a record, not
// every record of its event ID. A batch holds one event ID of two tenants as two records, on
// the adapter's batch path and message by message.
func testInboxTenants[TTx any](e *env[TTx]) {
	tm := func(tenant, id, payload string) core.InboxMessage {
		m := msg(id, payload)
		m.Tenant = tenant
		return m
	}
	tv := func(tenant, id, entity string, v int64) core.InboxMessage {
		m := versioned(id, entity, v)
		m.Tenant = tenant
		return m
	}
	f := e.inbox(nil)
	f.expect("tenant B's event", "ct", tm("B", "t1", "b"), "eff-B", core.Applied, 0)
	f.expect("tenant A with B's event ID and other content", "ct", tm("A", "t1", "a"), "eff-A", core.Applied, 0)
	f.expect("no tenant, the same event ID", "ct", tm("", "t1", "none"), "eff-none", core.Applied, 0)
	f.expect("tenant B's redelivery", "ct", tm("B", "t1", "b"), "eff-B", core.Duplicate, core.Applied)
	f.expect("tenant A's redelivery", "ct", tm("A", "t1", "a"), "eff-A", core.Duplicate, core.Applied)
	f.expectErr("tenant A, other content again", "ct", tm("A", "t1", "a2"), "eff-A", core.ErrDigestMismatch)
	e.expectEffect("eff-B", 1)
	e.expectEffect("eff-A", 1)
	e.expectEffect("eff-none", 1)

	f.expect("tenant A's version 9", "ct", tv("A", "v1", "order/1", 9), "eff-vA", core.Applied, 0)
	f.expect("tenant B's version 1 of the same entity", "ct", tv("B", "v2", "order/1", 1), "eff-vB", core.Applied, 0)
	f.expect("tenant B's version 1 again, new ID", "ct", tv("B", "v3", "order/1", 1), "eff-vB", core.Stale, 0)
	f.expect("no tenant, version 1 of the same entity", "ct", tv("", "v4", "order/1", 1), "eff-v", core.Applied, 0)
	e.expectEffect("eff-vB", 1)

	src := e.inbox(&core.InboxOptions{Source: "queue-2"})
	src.expect("another source, B's event", "ct", tm("B", "t1", "other source"), "eff-src", core.Applied, 0)
	src.expect("another source, B's version 1", "ct", tv("B", "v2", "order/1", 1), "eff-src", core.Applied, 0)
	src.expect("another source, redelivery", "ct", tm("B", "t1", "other source"), "eff-src", core.Duplicate, core.Applied)
	e.expectEffect("eff-src", 2)
	f.expect("the first source's record is untouched", "ct", tm("B", "t1", "b"), "eff-B", core.Duplicate, core.Applied)

	only := e.inbox(&core.InboxOptions{Tenants: []string{"A", ""}})
	calls := only.calls.Load()
	_, err := only.process("ct", tm("B", "r1", "p"), "eff-r")
	var te *core.TenantError
	if !errors.Is(err, core.ErrTenantRefused) || !errors.As(err, &te) || te.Tenant != "B" || !core.IsPermanent(err) {
		e.fatalf("a tenant the inbox does not list: Process returned %v, want a permanent *core.TenantError (ErrTenantRefused) naming tenant B", err)
	}
	if only.calls.Load() != calls {
		e.fatalf("the handler ran for a refused tenant")
	}
	only.expect("a listed tenant", "ct", tm("A", "r1", "p"), "eff-r", core.Applied, 0)
	only.expect("no tenant, listed as \"\"", "ct", tm("", "r1", "p"), "eff-r", core.Applied, 0)
	f.expect("the refused message was not recorded", "ct", tm("B", "r1", "other"), "eff-r", core.Applied, 0)
	e.expectEffect("eff-r", 3)

	// Prune deletes records, not event IDs: tenant A's old record goes, tenant B's newer record
	// of the same event ID stays, so B's redelivery is still a Duplicate.
	oldA := tm("A", "p1", "a")
	oldA.OccurredAt = i0.Add(-time.Hour)
	f.expect("tenant A's old message", "ctp", oldA, "eff-p", core.Applied, 0)
	f.expect("tenant B's newer message, same event ID", "ctp", tm("B", "p1", "b"), "eff-p", core.Applied, 0)
	n, err := f.in.Prune(e.ctx, "ctp", i0.Add(-time.Minute), 1)
	e.must(err, "Inbox.Prune")
	if !e.prunedOK(n, 1) {
		e.fatalf("Prune below tenant A's message deleted %d records, want 1 (A's, not B's of the same event ID)", n)
	}
	f.expect("tenant B's redelivery after the prune", "ctp", tm("B", "p1", "b"), "eff-p", core.Duplicate, core.Applied)
	f.expectErr("tenant A's redelivery after the prune", "ctp", oldA, "eff-p", core.ErrBeyondRetention)
	e.expectEffect("eff-p", 2)

	for name, store := range map[string]driver.InboxStore[TTx]{"adapter": driver.InboxStore[TTx](e.a), "message-by-message": messageByMessage[TTx]{e.a}} {
		in, err := core.NewInbox(e.ctx, store, nil)
		e.must(err, "NewInbox")
		c := "ctb-" + name
		batch := []core.InboxMessage{tm("A", "b1", "a"), tm("B", "b1", "b"), tm("A", "b1", "a"), tv("A", "b2", "E", 5), tv("B", "b3", "E", 1)}
		res, err := in.ProcessBatch(e.ctx, c, batch, func(ctx context.Context, tx TTx, _ int, m core.InboxMessage) error {
			return e.h.Effect(ctx, tx, c+"/"+m.Tenant+"/"+m.EventID)
		})
		if err != nil {
			e.fatalf("a batch of two tenants (%s): ProcessBatch: %v", name, err)
		}
		applied := core.InboxResult{Outcome: core.Applied}
		want := []core.InboxResult{applied, applied, {Outcome: core.Duplicate, Prior: core.Applied}, applied, applied}
		if fmt.Sprint(res) != fmt.Sprint(want) {
			e.fatalf("a batch of two tenants (%s): results %v, want %v", name, res, want)
		}
		for _, k := range []string{"A/b1", "B/b1", "A/b2", "B/b3"} {
			e.expectEffect(c+"/"+k, 1)
		}
	}
}
