package memory

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Options configures a Store. The zero value (or nil) is ready to use.
type Options struct {
	// Lanes is the lane count, as a migration would record it. Default core.DefaultLanes;
	// at most core.MaxLanes.
	Lanes int
	// Logger receives the store's logs. Default slog.Default().
	Logger *slog.Logger
	// Fault deliberately breaks one guarantee. It exists only so that the conformance suite can
	// prove that it catches broken adapters. Default NoFault; never set it otherwise.
	Fault Fault
}

// Fault names a guarantee that a Store deliberately breaks (conformance self-tests only).
type Fault int

// Faults.
const (
	// NoFault: the store keeps every guarantee.
	NoFault Fault = iota
	// FaultUnfencedSettle: Settle ignores leases (owner, generation, expiry and lanes).
	FaultUnfencedSettle
	// FaultSharedLanes: ClaimLanes hands out the lowest lanes whoever holds them.
	FaultSharedLanes
	// FaultNoInboxKey: InsertRecord inserts even when (consumer, event id) exists.
	FaultNoInboxKey
	// FaultPruneUnpublished: PruneOutbox deletes rows whether or not they were published.
	FaultPruneUnpublished
	// FaultUnheldHorizon: PruneInbox does not wait for transactions that read the horizon.
	FaultUnheldHorizon
	// FaultRacySettle: Settle checks the leases, then lets other calls run, then applies its
	// changes (a check-then-act race instead of one transaction).
	FaultRacySettle
	// FaultNoKeyBlocking: Fetch ignores failed and parked records when choosing later records
	// of their partition key.
	FaultNoKeyBlocking
	// FaultUnfencedGeneration: ClaimLanes, RenewLanes and SaveCheckpoint ignore the publisher
	// generation.
	FaultUnfencedGeneration
	// FaultResumeAtHead: a change stream resumed from a position the log no longer holds starts
	// at the oldest position still held instead of failing (it skips the gap).
	FaultResumeAtHead
	// FaultPositionAhead: a change stream reports each transaction's position as the one after
	// the next transaction, so resuming from a checkpoint skips a transaction.
	FaultPositionAhead
)

// Store is an in-memory outbox, lane table, worker table, inbox and a tiny domain table of
// counters. It is safe for concurrent use. Create it with New.
type Store struct {
	core.Broadcast

	lanes int
	log   *slog.Logger
	fault Fault

	wlock chan struct{} // the single writer lock, held for a whole transaction

	mu       sync.Mutex // guards everything below; held briefly
	seq      int64
	rows     []*core.Record          // live outbox rows, ascending Seq
	ids      map[string]*core.Record // live rows by ID
	unpub    [][]*core.Record        // per lane: unpublished rows, ascending Seq
	leases   []laneState             // per lane
	workers  map[string]time.Time    // owner -> expires at
	inbox    map[inboxKey]core.InboxRecord
	horizons map[string]time.Time
	versions map[inboxKey]int64
	counters map[string]int

	publisher  core.Publisher
	checkpoint *core.Checkpoint
	changes    changeLog
}

type laneState struct {
	owner      string
	generation int64
	until      time.Time
}

type inboxKey struct{ a, b string }

// New returns an empty Store. opts may be nil.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Lanes == 0 {
		o.Lanes = core.DefaultLanes
	}
	if o.Lanes < 1 || o.Lanes > core.MaxLanes {
		return nil, &core.OptionError{Field: "Lanes", Reason: fmt.Sprintf("must be between 1 and %d", core.MaxLanes)}
	}
	if o.Fault < NoFault || o.Fault > FaultPositionAhead {
		return nil, &core.OptionError{Field: "Fault", Reason: "unknown fault"}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Store{
		lanes:    o.Lanes,
		log:      o.Logger,
		fault:    o.Fault,
		wlock:    make(chan struct{}, 1),
		ids:      map[string]*core.Record{},
		unpub:    make([][]*core.Record, o.Lanes),
		leases:   make([]laneState, o.Lanes),
		workers:  map[string]time.Time{},
		inbox:    map[inboxKey]core.InboxRecord{},
		horizons: map[string]time.Time{},
		versions: map[inboxKey]int64{},
		counters: map[string]int{},
	}, nil
}

// Interface checks.
var (
	_ core.OutboxStore[*Tx] = (*Store)(nil)
	_ core.RelayStore       = (*Store)(nil)
	_ core.InboxStore[*Tx]  = (*Store)(nil)
	_ core.Pruner           = (*Store)(nil)
	_ core.Admin            = (*Store)(nil)
	_ core.Notifier         = (*Store)(nil)
	_ core.Waker            = (*Store)(nil)
	_ core.CDCStore         = (*Store)(nil)
)

// clock returns t (or time.Now() when t is zero) in UTC, truncated to microseconds.
func clock(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

func cloneRecord(r *core.Record) core.Record {
	c := *r
	if r.Payload != nil {
		c.Payload = bytes.Clone(r.Payload)
	}
	if r.Headers != nil {
		c.Headers = maps.Clone(r.Headers)
	}
	return c
}

func (s *Store) lockWriter(ctx context.Context) error {
	select {
	case s.wlock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Store) unlockWriter() { <-s.wlock }

// Tx is one transaction of a Store, valid only inside the fn given to InTx. Its writes are
// applied atomically when fn returns nil and discarded otherwise.
type Tx struct {
	s        *Store
	done     bool
	inserts  []*core.Record
	ids      map[string]bool
	counters map[string]int // deltas
	inbox    map[inboxKey]core.InboxRecord
	versions map[inboxKey]int64
}

// InTx runs fn in a transaction: it waits for the global writer lock (or ctx), runs fn, and
// commits when fn returns nil, else (or when fn panics) discards fn's writes. It returns fn's
// error, or ctx's error when ctx ended before the commit. Transactions do not nest: calling
// InTx (or PruneInbox) of the same Store from inside fn deadlocks.
func (s *Store) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	if err := s.lockWriter(ctx); err != nil {
		return fmt.Errorf("memory: begin: %w", err)
	}
	defer s.unlockWriter()
	tx := &Tx{s: s}
	defer func() { tx.done = true }()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: commit: %w", err)
	}
	tx.commit()
	return nil
}

func (tx *Tx) commit() {
	s := tx.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range tx.inserts {
		s.rows = append(s.rows, r)
		s.ids[r.ID] = r
		s.unpub[r.Lane] = append(s.unpub[r.Lane], r)
	}
	for k, d := range tx.counters {
		s.counters[k] += d
	}
	maps.Copy(s.inbox, tx.inbox)
	maps.Copy(s.versions, tx.versions)
	s.changes.append(tx.inserts)
}

func (tx *Tx) check(ctx context.Context) error {
	if tx == nil || tx.s == nil {
		return fmt.Errorf("memory: %w: nil transaction", core.ErrInvalidTx)
	}
	if tx.done {
		return ErrTxDone
	}
	return ctx.Err()
}

// Incr adds 1 to the domain counter named key (created at 1) in tx: a one-table domain model
// for tests and demos. Its value is visible through Counter once tx commits.
func (tx *Tx) Incr(key string) error {
	if tx == nil || tx.s == nil {
		return fmt.Errorf("memory: %w: nil transaction", core.ErrInvalidTx)
	}
	if tx.done {
		return ErrTxDone
	}
	if tx.counters == nil {
		tx.counters = map[string]int{}
	}
	tx.counters[key]++
	return nil
}

// Counter returns the committed value of the domain counter named key (0 when absent).
func (s *Store) Counter(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[key]
}

// LaneCount implements core.OutboxStore and core.RelayStore.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: lane count: %w", err)
	}
	return s.lanes, nil
}

// Insert implements core.OutboxStore: the records become visible when tx commits.
func (s *Store) Insert(ctx context.Context, tx *Tx, records []core.Record) error {
	if err := tx.check(ctx); err != nil {
		return fmt.Errorf("memory: insert: %w", err)
	}
	if tx.s != s {
		return fmt.Errorf("memory: insert: %w: transaction of another store", core.ErrInvalidTx)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	batch := make(map[string]bool, len(records))
	for i := range records {
		r := &records[i]
		if r.Lane < 0 || r.Lane >= s.lanes {
			return fmt.Errorf("memory: insert: event %s: lane %d out of range [0,%d)", r.ID, r.Lane, s.lanes)
		}
		if _, dup := s.ids[r.ID]; dup || tx.ids[r.ID] || batch[r.ID] {
			return fmt.Errorf("memory: insert: event %s: %w", r.ID, core.ErrDuplicateEvent)
		}
		batch[r.ID] = true
	}
	now := clock(time.Time{})
	if tx.ids == nil {
		tx.ids = map[string]bool{}
	}
	for i := range records {
		c := cloneRecord(&records[i])
		s.seq++
		c.Seq = s.seq
		c.CreatedAt = now
		c.PublishedAt, c.NextAttemptAt, c.ParkedAt = time.Time{}, time.Time{}, time.Time{}
		c.Attempts, c.LastError = 0, ""
		tx.inserts = append(tx.inserts, &c)
		tx.ids[c.ID] = true
	}
	return nil
}

// Heartbeat implements core.RelayStore.
func (s *Store) Heartbeat(ctx context.Context, p core.HeartbeatParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: heartbeat: %w", err)
	}
	now := clock(p.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.TTL <= 0 {
		delete(s.workers, p.Owner)
	} else {
		s.workers[p.Owner] = now.Add(p.TTL)
	}
	live := 0
	for _, exp := range s.workers {
		if exp.After(now) {
			live++
		}
	}
	return live, nil
}

// held reports whether l is still held at now.
func (s *Store) held(l core.Lease, now time.Time) bool {
	if l.Lane < 0 || l.Lane >= s.lanes {
		return false
	}
	st := s.leases[l.Lane]
	return st.owner != "" && st.owner == l.Owner && st.generation == l.Generation && st.until.After(now)
}

// AcquireGeneration implements core.RelayStore.
func (s *Store) AcquireGeneration(ctx context.Context, p core.AcquireParams) (core.Publisher, error) {
	if err := ctx.Err(); err != nil {
		return core.Publisher{}, fmt.Errorf("memory: acquire generation: %w", err)
	}
	if p.Kind != core.KindPolling && p.Kind != core.KindCDC {
		return core.Publisher{}, &core.OptionError{Field: "Kind", Reason: fmt.Sprintf("unknown publisher kind %q", p.Kind)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.Join && s.publisher.Kind == p.Kind {
		return s.publisher, nil
	}
	s.publisher = core.Publisher{Generation: s.publisher.Generation + 1, Kind: p.Kind, Holder: p.Holder, Since: clock(p.Now)}
	return s.publisher, nil
}

// Generation implements core.RelayStore.
func (s *Store) Generation(ctx context.Context) (core.Publisher, error) {
	if err := ctx.Err(); err != nil {
		return core.Publisher{}, fmt.Errorf("memory: generation: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.publisher, nil
}

// fenced returns an error wrapping core.ErrFenced unless gen is the current generation.
// s.mu must be held.
func (s *Store) fenced(what string, gen int64) error {
	if gen != s.publisher.Generation && s.fault != FaultUnfencedGeneration {
		return fmt.Errorf("memory: %s: generation %d, current %d: %w", what, gen, s.publisher.Generation, core.ErrFenced)
	}
	return nil
}

// ClaimLanes implements core.RelayStore.
func (s *Store) ClaimLanes(ctx context.Context, p core.ClaimParams) ([]core.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: claim lanes: %w", err)
	}
	if p.Owner == "" {
		return nil, &core.OptionError{Field: "Owner", Reason: "required"}
	}
	now := clock(p.Now)
	until := now.Add(p.TTL).Truncate(time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenced("claim lanes", p.Generation); err != nil {
		return nil, err
	}
	var out []core.Lease
	for lane := 0; lane < s.lanes && len(out) < p.Max; lane++ {
		st := &s.leases[lane]
		if st.owner != "" && st.until.After(now) && s.fault != FaultSharedLanes {
			continue
		}
		st.generation++
		st.owner = p.Owner
		st.until = until
		out = append(out, core.Lease{Lane: lane, Owner: p.Owner, Generation: st.generation, Until: until})
	}
	return out, nil
}

// RenewLanes implements core.RelayStore.
func (s *Store) RenewLanes(ctx context.Context, p core.RenewParams) ([]core.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: renew lanes: %w", err)
	}
	now := clock(p.Now)
	until := now.Add(p.TTL).Truncate(time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenced("renew lanes", p.Generation); err != nil {
		return nil, err
	}
	var out []core.Lease
	for _, l := range p.Leases {
		if !s.held(l, now) {
			continue
		}
		s.leases[l.Lane].until = until
		l.Until = until
		out = append(out, l)
	}
	return out, nil
}

// ReleaseLanes implements core.RelayStore.
func (s *Store) ReleaseLanes(ctx context.Context, leases []core.Lease) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: release lanes: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range leases {
		if l.Lane < 0 || l.Lane >= s.lanes {
			continue
		}
		st := &s.leases[l.Lane]
		if st.owner == l.Owner && st.generation == l.Generation {
			st.owner = ""
			st.until = time.Time{}
		}
	}
	return nil
}

// Fetch implements core.RelayStore.
func (s *Store) Fetch(ctx context.Context, p core.FetchParams) ([]core.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: fetch: %w", err)
	}
	if p.Limit <= 0 {
		return nil, nil
	}
	now := clock(p.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[int]bool{}
	var picked []*core.Record
	for _, l := range p.Leases {
		if l.Lane < 0 || l.Lane >= s.lanes || seen[l.Lane] {
			continue
		}
		seen[l.Lane] = true
		blocked := map[string]bool{}
		n := 0
		for _, r := range s.unpub[l.Lane] {
			if n >= p.Limit {
				break
			}
			if blocked[r.PartitionKey] {
				continue
			}
			if !r.ParkedAt.IsZero() || r.NextAttemptAt.After(now) {
				if s.fault != FaultNoKeyBlocking {
					blocked[r.PartitionKey] = true
				}
				continue
			}
			picked = append(picked, r)
			n++
		}
	}
	slices.SortFunc(picked, func(a, b *core.Record) int { return cmpInt64(a.Seq, b.Seq) })
	if len(picked) > p.Limit {
		picked = picked[:p.Limit]
	}
	out := make([]core.Record, len(picked))
	for i, r := range picked {
		out[i] = cloneRecord(r)
	}
	return out, nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Settle implements core.RelayStore.
func (s *Store) Settle(ctx context.Context, p core.SettleParams) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: settle: %w", err)
	}
	now := clock(p.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	leased := map[int]bool{}
	var lost []int
	for _, l := range p.Leases {
		if s.fault != FaultUnfencedSettle && !s.held(l, now) {
			lost = append(lost, l.Lane)
			continue
		}
		leased[l.Lane] = true
	}
	if len(lost) > 0 {
		return &core.LanesLostError{Lanes: lost}
	}
	if s.fault == FaultRacySettle {
		s.mu.Unlock()
		runtime.Gosched()
		s.mu.Lock()
	}
	settle := func(seq int64) *core.Record {
		r := s.bySeq(seq)
		if r == nil || !r.PublishedAt.IsZero() {
			return nil
		}
		if !leased[r.Lane] && s.fault != FaultUnfencedSettle {
			return nil
		}
		return r
	}
	dirty := map[int]bool{}
	deleted := false
	for _, seq := range p.Published {
		r := settle(seq)
		if r == nil {
			continue
		}
		dirty[r.Lane] = true
		if p.Delete {
			delete(s.ids, r.ID)
			r.Seq = -r.Seq // marks the row deleted until the slices are compacted
			deleted = true
		} else {
			r.PublishedAt = now
		}
	}
	for _, f := range p.Failed {
		r := settle(f.Seq)
		if r == nil {
			continue
		}
		r.Attempts++
		r.LastError = f.Error
		r.NextAttemptAt = now.Add(f.Delay).Truncate(time.Microsecond)
		if f.Park {
			r.ParkedAt = now
		}
	}
	for lane := range dirty {
		s.unpub[lane] = slices.DeleteFunc(s.unpub[lane], func(r *core.Record) bool {
			return r.Seq < 0 || !r.PublishedAt.IsZero()
		})
	}
	if deleted {
		s.rows = slices.DeleteFunc(s.rows, func(r *core.Record) bool { return r.Seq < 0 })
	}
	return nil
}

// bySeq finds a live row by binary search (rows are in ascending Seq). Caller holds s.mu.
func (s *Store) bySeq(seq int64) *core.Record {
	i, ok := slices.BinarySearchFunc(s.rows, seq, func(r *core.Record, seq int64) int {
		return cmpInt64(abs(r.Seq), seq)
	})
	if !ok || s.rows[i].Seq < 0 {
		return nil
	}
	return s.rows[i]
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// minUnpublished returns the lowest Seq of an unpublished row, 0 when none. Caller holds s.mu.
func (s *Store) minUnpublished() int64 {
	var m int64
	for _, rs := range s.unpub {
		if len(rs) > 0 && (m == 0 || rs[0].Seq < m) {
			m = rs[0].Seq
		}
	}
	return m
}

// PruneOutbox implements core.Pruner.
func (s *Store) PruneOutbox(ctx context.Context, p core.PruneParams) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: prune outbox: %w", err)
	}
	if p.Limit <= 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	low := s.minUnpublished()
	n := 0
	for _, r := range s.rows {
		if n >= p.Limit {
			break
		}
		if p.BelowSeq > 0 && r.Seq >= p.BelowSeq {
			break
		}
		if s.fault == FaultPruneUnpublished {
			if r.PublishedAt.IsZero() || r.PublishedAt.Before(p.PublishedBefore) {
				r.Seq = -r.Seq
				n++
			}
			continue
		}
		if low > 0 && r.Seq >= low {
			break
		}
		if r.PublishedAt.IsZero() || !r.PublishedAt.Before(p.PublishedBefore) {
			continue
		}
		r.Seq = -r.Seq
		n++
	}
	if n > 0 {
		for _, r := range s.rows {
			if r.Seq < 0 {
				delete(s.ids, r.ID)
			}
		}
		s.rows = slices.DeleteFunc(s.rows, func(r *core.Record) bool { return r.Seq < 0 })
		for lane := range s.unpub {
			s.unpub[lane] = slices.DeleteFunc(s.unpub[lane], func(r *core.Record) bool { return r.Seq < 0 })
		}
	}
	return n, nil
}

// List implements core.Admin: records with Seq > p.AfterSeq in Seq order, at most p.Limit
// (p.Limit <= 0 means 1000).
func (s *Store) List(ctx context.Context, p core.ListParams) ([]core.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list: %w", err)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 1000
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.Record
	for _, r := range s.rows {
		if len(out) >= limit {
			break
		}
		if r.Seq <= p.AfterSeq || !matches(r, p.State) {
			continue
		}
		out = append(out, cloneRecord(r))
	}
	return out, nil
}

func matches(r *core.Record, st core.RecordState) bool {
	switch st {
	case core.StatePending:
		return r.PublishedAt.IsZero() && r.ParkedAt.IsZero()
	case core.StateParked:
		return r.PublishedAt.IsZero() && !r.ParkedAt.IsZero()
	case core.StatePublished:
		return !r.PublishedAt.IsZero()
	}
	return true
}

// Stats implements core.Admin.
func (s *Store) Stats(ctx context.Context) (core.Stats, error) {
	if err := ctx.Err(); err != nil {
		return core.Stats{}, fmt.Errorf("memory: stats: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var st core.Stats
	for _, r := range s.rows {
		switch {
		case !r.PublishedAt.IsZero():
			st.Published++
		case !r.ParkedAt.IsZero():
			st.Parked++
		default:
			st.Pending++
			if st.OldestPendingAt.IsZero() || r.CreatedAt.Before(st.OldestPendingAt) {
				st.OldestPendingAt = r.CreatedAt
			}
		}
	}
	return st, nil
}

// Unpark implements core.Admin. It counts the unpublished records of the key that had
// ParkedAt, NextAttemptAt or Attempts set.
func (s *Store) Unpark(ctx context.Context, partitionKey string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: unpark: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, rs := range s.unpub {
		for _, r := range rs {
			if r.PartitionKey != partitionKey {
				continue
			}
			if !r.ParkedAt.IsZero() || !r.NextAttemptAt.IsZero() || r.Attempts != 0 {
				n++
			}
			r.ParkedAt, r.NextAttemptAt, r.Attempts = time.Time{}, time.Time{}, 0
		}
	}
	if n > 0 {
		s.log.Info("memory_unparked", "partition_key", partitionKey, "records", n)
	}
	return n, nil
}

// Horizon implements core.InboxStore. PruneInbox waits for the writer lock that tx holds.
func (s *Store) Horizon(ctx context.Context, tx *Tx, consumer string) (time.Time, error) {
	if err := tx.check(ctx); err != nil {
		return time.Time{}, fmt.Errorf("memory: horizon: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.horizons[consumer], nil
}

// InsertRecord implements core.InboxStore.
func (s *Store) InsertRecord(ctx context.Context, tx *Tx, rec core.InboxRecord) (core.InboxRecord, bool, error) {
	if err := tx.check(ctx); err != nil {
		return core.InboxRecord{}, false, fmt.Errorf("memory: insert record: %w", err)
	}
	k := inboxKey{rec.Consumer, rec.EventID}
	if s.fault != FaultNoInboxKey {
		if ex, ok := tx.inbox[k]; ok {
			return ex, false, nil
		}
		s.mu.Lock()
		ex, ok := s.inbox[k]
		s.mu.Unlock()
		if ok {
			return ex, false, nil
		}
	}
	rec.ProcessedAt = clock(time.Time{})
	if !rec.OccurredAt.IsZero() {
		rec.OccurredAt = rec.OccurredAt.UTC().Truncate(time.Microsecond)
	}
	if tx.inbox == nil {
		tx.inbox = map[inboxKey]core.InboxRecord{}
	}
	tx.inbox[k] = rec
	return core.InboxRecord{}, true, nil
}

// LockVersion implements core.InboxStore.
func (s *Store) LockVersion(ctx context.Context, tx *Tx, consumer, entity string) (int64, bool, error) {
	if err := tx.check(ctx); err != nil {
		return 0, false, fmt.Errorf("memory: lock version: %w", err)
	}
	k := inboxKey{consumer, entity}
	if v, ok := tx.versions[k]; ok {
		return v, true, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.versions[k]
	return v, ok, nil
}

// SetVersion implements core.InboxStore.
func (s *Store) SetVersion(ctx context.Context, tx *Tx, consumer, entity string, version int64) error {
	if err := tx.check(ctx); err != nil {
		return fmt.Errorf("memory: set version: %w", err)
	}
	if tx.versions == nil {
		tx.versions = map[inboxKey]int64{}
	}
	tx.versions[inboxKey{consumer, entity}] = version
	return nil
}

// PruneInbox implements core.InboxStore. It takes the writer lock, so it waits for open
// transactions (which may have read the horizon) to end.
func (s *Store) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int) (int, error) {
	if s.fault != FaultUnheldHorizon {
		if err := s.lockWriter(ctx); err != nil {
			return 0, fmt.Errorf("memory: prune inbox: %w", err)
		}
		defer s.unlockWriter()
	} else if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: prune inbox: %w", err)
	}
	if limit <= 0 {
		return 0, nil
	}
	before = before.UTC().Truncate(time.Microsecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.horizons[consumer]
	if before.After(h) {
		h = before
		s.horizons[consumer] = h
	}
	n := 0
	for k, r := range s.inbox {
		if n >= limit {
			break
		}
		if k.a == consumer && r.OccurredAt.Before(h) {
			delete(s.inbox, k)
			n++
		}
	}
	return n, nil
}
