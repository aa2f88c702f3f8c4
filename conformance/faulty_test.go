package conformance_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The broken adapters of the self-test. Each wraps a healthy *memory.Store, whose methods (and
// so whose capabilities) it promotes, and overrides only the methods that break one guarantee,
// through the store's exported API and the driver interfaces: the memory adapter itself keeps
// every guarantee and carries no fault injection.

// broken are the variants the suite must fail, by name (selftest_test.go's variant names).
var broken = map[string]func(*memory.Store) conformance.Adapter[*memory.Tx]{
	"unfenced-settle":     func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &unfencedSettle{s} },
	"shared-lanes":        func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &sharedLanes{s} },
	"no-inbox-key":        func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &noInboxKey{s} },
	"unscoped-inbox-key":  func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &unscopedInboxKey{s} },
	"prune-unpublished":   func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &pruneUnpublished{s} },
	"stale-horizon":       func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &staleHorizon{Store: s} },
	"racy-settle":         func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &racySettle{s} },
	"no-key-blocking":     func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &noKeyBlocking{s} },
	"unfenced-generation": func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &unfencedGeneration{s} },
	"resume-at-head":      func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &resumeAtHead{s} },
	"position-ahead":      func(s *memory.Store) conformance.Adapter[*memory.Tx] { return &positionAhead{s} },
}

// clockOf is the time a memory call with Now = now uses.
func clockOf(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}

// unfencedSettle: Settle ignores leases (owner, generation, expiry and lanes). It settles with
// the leases of whoever holds each lane now (the status read Lanes), every lane included, and
// when a given lease has expired, as of the instant before it ran out (so PublishedAt is then
// that instant: memory accepts no expired lease).
type unfencedSettle struct{ *memory.Store }

func (w *unfencedSettle) Settle(ctx context.Context, p driver.SettleParams) error {
	cur, err := w.Lanes(ctx)
	if err != nil {
		return err
	}
	now := clockOf(p.Now)
	for _, l := range p.Leases {
		if l.Lane >= 0 && l.Lane < len(cur) && cur[l.Lane].Owner != "" && !cur[l.Lane].Until.After(now) {
			now = cur[l.Lane].Until.Add(-time.Microsecond)
		}
	}
	var leases []driver.Lease
	for _, c := range cur {
		if c.Owner != "" && c.Until.After(now) {
			leases = append(leases, c)
		}
	}
	p.Leases, p.Now = leases, now
	return w.Store.Settle(ctx, p)
}

// racySettle: Settle checks the leases, then lets other calls run, then applies its changes
// with the leases of whoever holds the lanes by then (a check-then-act race instead of one
// transaction).
type racySettle struct{ *memory.Store }

func (w *racySettle) Settle(ctx context.Context, p driver.SettleParams) error {
	now := clockOf(p.Now)
	cur, err := w.Lanes(ctx)
	if err != nil {
		return err
	}
	if err := driver.CheckLeases(p.Leases, func(l driver.Lease) bool {
		return l.Lane >= 0 && l.Lane < len(cur) && l.HeldAt(cur[l.Lane], now)
	}); err != nil {
		return err
	}
	runtime.Gosched()
	if cur, err = w.Lanes(ctx); err != nil {
		return err
	}
	leases := make([]driver.Lease, len(p.Leases))
	for i, l := range p.Leases {
		leases[i] = cur[l.Lane]
	}
	p.Leases = leases
	return w.Store.Settle(ctx, p)
}

// sharedLanes: ClaimLanes hands out the lowest lanes whoever holds them: it releases the
// lowest p.Max lanes held by others (with their holders' leases, read with Lanes), then claims.
type sharedLanes struct{ *memory.Store }

func (w *sharedLanes) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	pub, err := w.Generation(ctx)
	if err != nil {
		return nil, err
	}
	cur, err := w.Lanes(ctx)
	if err != nil {
		return nil, err
	}
	if pub.Generation == p.Generation {
		now := clockOf(p.Now)
		var held []driver.Lease
		for _, c := range cur[:max(min(p.Max, len(cur)), 0)] {
			if c.Owner != "" && c.Until.After(now) {
				held = append(held, c)
			}
		}
		if err := w.ReleaseLanes(ctx, held); err != nil {
			return nil, err
		}
	}
	return w.Store.ClaimLanes(ctx, p)
}

// noInboxKey: the inbox has no unique (consumer, event id) key: InsertRecord and InsertRecords
// report a record that exists as inserted, so a redelivery applies its effect again.
type noInboxKey struct{ *memory.Store }

func (w *noInboxKey) InsertRecord(ctx context.Context, tx *memory.Tx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	_, _, err := w.Store.InsertRecord(ctx, tx, rec)
	return driver.InboxRecord{}, err == nil, err
}

func (w *noInboxKey) InsertRecords(ctx context.Context, tx *memory.Tx, recs []driver.InboxRecord) ([]driver.InboxRecord, []bool, error) {
	if _, _, err := w.Store.InsertRecords(ctx, tx, recs); err != nil {
		return nil, nil, err
	}
	inserted := make([]bool, len(recs))
	for i := range inserted {
		inserted[i] = true
	}
	return make([]driver.InboxRecord, len(recs)), inserted, nil
}

// unscopedInboxKey: the inbox key is (consumer, event id), without source and tenant (an
// adapter that stores neither): one tenant's message with another's event ID is a duplicate
// or a digest conflict, suppressing its effect.
type unscopedInboxKey struct{ *memory.Store }

func unscoped(rec driver.InboxRecord) driver.InboxRecord {
	rec.Source, rec.Tenant = "", ""
	return rec
}

func (w *unscopedInboxKey) InsertRecord(ctx context.Context, tx *memory.Tx, rec driver.InboxRecord) (driver.InboxRecord, bool, error) {
	return w.Store.InsertRecord(ctx, tx, unscoped(rec))
}

func (w *unscopedInboxKey) InsertRecords(ctx context.Context, tx *memory.Tx, recs []driver.InboxRecord) ([]driver.InboxRecord, []bool, error) {
	out := make([]driver.InboxRecord, len(recs))
	for i, rec := range recs {
		out[i] = unscoped(rec)
	}
	return w.Store.InsertRecords(ctx, tx, out)
}

// pruneUnpublished: PruneOutbox deletes rows whether or not they were published: first the
// unpublished rows (below p.BelowSeq) of every leased lane, through Settle with Delete and the
// lane holder's lease, then what the store's own rule deletes.
type pruneUnpublished struct{ *memory.Store }

func (w *pruneUnpublished) PruneOutbox(ctx context.Context, p driver.PruneParams) (int, error) {
	cur, err := w.Lanes(ctx)
	if err != nil {
		return 0, err
	}
	byLane := map[int][]int64{}
	n := 0
	for after := int64(0); ; {
		page, err := w.List(ctx, driver.ListParams{AfterSeq: after, Limit: 1000})
		if err != nil {
			return 0, err
		}
		for _, r := range page {
			if r.PublishedAt.IsZero() && (p.BelowSeq <= 0 || r.Seq < p.BelowSeq) && n < p.BatchSize() {
				byLane[r.Lane] = append(byLane[r.Lane], r.Seq)
				n++
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	deleted := 0
	for lane, seqs := range byLane {
		if lane >= len(cur) || cur[lane].Owner == "" {
			continue
		}
		l := cur[lane]
		err := w.Settle(ctx, driver.SettleParams{Leases: []driver.Lease{l}, Published: seqs, Delete: true, Now: l.Until.Add(-time.Microsecond)})
		if err == nil {
			deleted += len(seqs)
		}
	}
	m, err := w.Store.PruneOutbox(ctx, p)
	return deleted + m, err
}

// staleHorizon: Horizon returns the horizon it first read for the consumer, never the one a
// later PruneInbox raised (a stale snapshot of the horizon).
type staleHorizon struct {
	*memory.Store
	mu   sync.Mutex
	seen map[string]time.Time
}

func (w *staleHorizon) Horizon(ctx context.Context, tx *memory.Tx, consumer string) (time.Time, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h, ok := w.seen[consumer]; ok {
		return h, nil
	}
	h, err := w.Store.Horizon(ctx, tx, consumer)
	if err == nil {
		if w.seen == nil {
			w.seen = map[string]time.Time{}
		}
		w.seen[consumer] = h
	}
	return h, err
}

// noKeyBlocking: Fetch ignores failed and parked records when choosing later records of their
// partition key: it returns the due pending records of the leased lanes (read with List).
type noKeyBlocking struct{ *memory.Store }

func (w *noKeyBlocking) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	if p.Limit <= 0 {
		return nil, ctx.Err()
	}
	now := clockOf(p.Now)
	leased := map[int]bool{}
	for _, l := range p.Leases {
		leased[l.Lane] = true
	}
	var out []driver.Record
	for after := int64(0); len(out) < p.Limit; {
		page, err := w.List(ctx, driver.ListParams{AfterSeq: after, Limit: 1000, State: driver.StatePending})
		if err != nil {
			return nil, err
		}
		for _, r := range page {
			if len(out) < p.Limit && leased[r.Lane] && !r.NextAttemptAt.After(now) {
				out = append(out, r)
			}
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	return out, nil
}

// unfencedGeneration: ClaimLanes, RenewLanes and SaveCheckpoint ignore the publisher
// generation: they pass the current one (read with Generation) instead of the caller's.
type unfencedGeneration struct{ *memory.Store }

func (w *unfencedGeneration) current(ctx context.Context) (int64, error) {
	pub, err := w.Generation(ctx)
	return pub.Generation, err
}

func (w *unfencedGeneration) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	var err error
	if p.Generation, err = w.current(ctx); err != nil {
		return nil, err
	}
	return w.Store.ClaimLanes(ctx, p)
}

func (w *unfencedGeneration) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	var err error
	if p.Generation, err = w.current(ctx); err != nil {
		return nil, err
	}
	return w.Store.RenewLanes(ctx, p)
}

func (w *unfencedGeneration) SaveCheckpoint(ctx context.Context, c driver.Checkpoint) error {
	var err error
	if c.Generation, err = w.current(ctx); err != nil {
		return err
	}
	return w.Store.SaveCheckpoint(ctx, c)
}

// source is a memory change source seen through driver.ChangeSource, its driver.LogReleaser
// kept.
type source struct{ driver.ChangeSource }

func (s source) Release(ctx context.Context) error {
	return s.ChangeSource.(driver.LogReleaser).Release(ctx)
}

// resumeAtHead: a change stream resumed from a position the log no longer holds starts at the
// oldest position still held instead of failing (it skips the gap).
type resumeAtHead struct{ *memory.Store }

func (w *resumeAtHead) ChangeSource() driver.ChangeSource {
	return headSource{source{w.Store.ChangeSource()}}
}

type headSource struct{ source }

func (s headSource) Resume(ctx context.Context, position string) (driver.ChangeStream, error) {
	st, err := s.ChangeSource.Resume(ctx, position)
	if lost := (*core.PositionLostError)(nil); errors.As(err, &lost) {
		return s.ChangeSource.Resume(ctx, lost.Available)
	}
	return st, err
}

// positionAhead: a change stream reports each transaction's position as the one after the
// next transaction (when the log holds one), so resuming from a checkpoint skips a
// transaction. Memory's positions count transactions; Start returns the head.
type positionAhead struct{ *memory.Store }

func (w *positionAhead) ChangeSource() driver.ChangeSource {
	return aheadSource{source{w.Store.ChangeSource()}}
}

type aheadSource struct{ source }

func (s aheadSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	st, pos, err := s.ChangeSource.Start(ctx)
	if err != nil {
		return nil, "", err
	}
	return aheadStream{st, s.ChangeSource}, pos, nil
}

func (s aheadSource) Resume(ctx context.Context, position string) (driver.ChangeStream, error) {
	st, err := s.ChangeSource.Resume(ctx, position)
	if err != nil {
		return nil, err
	}
	return aheadStream{st, s.ChangeSource}, nil
}

type aheadStream struct {
	driver.ChangeStream
	src driver.ChangeSource
}

func (st aheadStream) Next(ctx context.Context) (driver.ChangeTx, error) {
	tx, err := st.ChangeStream.Next(ctx)
	if err != nil {
		return tx, err
	}
	head, at, err := st.src.Start(ctx)
	if err != nil {
		return driver.ChangeTx{}, err
	}
	_ = head.Close()
	p, err1 := strconv.ParseInt(tx.Position, 10, 64)
	h, err2 := strconv.ParseInt(at, 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return driver.ChangeTx{}, err
	}
	if p < h {
		tx.Position = strconv.FormatInt(p+1, 10)
	}
	return tx, nil
}
