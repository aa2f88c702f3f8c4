package memory

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Store is an in-memory outbox, lane table, worker table, inbox and a tiny domain table of
// counters. It is safe for concurrent use. Create it with New.
type Store struct {
	core.Broadcast

	lanes int
	log   *slog.Logger

	wlock chan struct{} // the single writer lock, held for a whole transaction

	mu       sync.Mutex // guards everything below; held briefly
	seq      int64
	rows     []*driver.Record          // live outbox rows, ascending Seq
	ids      map[string]*driver.Record // live rows by ID
	unpub    [][]*driver.Record        // per lane: unpublished rows, ascending Seq
	leases   []laneState               // per lane
	workers  map[string]time.Time      // owner -> expires at
	inbox    map[recordKey]driver.InboxRecord
	horizons map[string]time.Time
	versions map[inboxKey]int64
	counters map[string]int

	publisher  driver.Publisher
	checkpoint *driver.Checkpoint
	audit      []driver.AuditEntry // the operator audit log (core.Operator), ascending ID
	auditSeq   int64
	changes    changeLog
}

type laneState struct {
	owner      string
	generation int64
	until      time.Time
}

// inboxKey is the key of an entity version: (consumer, entity).
type inboxKey struct{ a, b string }

// recordKey is the key of an inbox record.
type recordKey struct{ consumer, source, tenant, eventID string }

// New returns an empty Store. opts may be nil.
func New(opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	var err error
	if o.Lanes, err = driver.LanesOption(o.Lanes); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Store{
		lanes:    o.Lanes,
		log:      o.Logger,
		wlock:    make(chan struct{}, 1),
		ids:      map[string]*driver.Record{},
		unpub:    make([][]*driver.Record, o.Lanes),
		leases:   make([]laneState, o.Lanes),
		workers:  map[string]time.Time{},
		inbox:    map[recordKey]driver.InboxRecord{},
		horizons: map[string]time.Time{},
		versions: map[inboxKey]int64{},
		counters: map[string]int{},
	}, nil
}

// Interface checks.
var (
	_ driver.OutboxStore[*Tx] = (*Store)(nil)
	_ driver.RelayStore       = (*Store)(nil)
	_ driver.InboxStore[*Tx]  = (*Store)(nil)
	_ driver.Pruner           = (*Store)(nil)
	_ driver.Admin            = (*Store)(nil)
	_ driver.Notifier         = (*Store)(nil)
	_ driver.Waker            = (*Store)(nil)
	_ driver.CDCStore         = (*Store)(nil)
)

// clock returns t (or time.Now() when t is zero) in UTC, truncated to microseconds.
func clock(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

func cloneRecord(r *driver.Record) driver.Record {
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
	inserts  []*driver.Record
	ids      map[string]bool
	counters map[string]int // deltas
	inbox    map[recordKey]driver.InboxRecord
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

// check refuses a nil or ended transaction, one of another Store, and an ended ctx.
func (tx *Tx) check(ctx context.Context, s *Store) error {
	if tx == nil || tx.s == nil {
		return fmt.Errorf("memory: %w: nil transaction", core.ErrInvalidTx)
	}
	if tx.s != s {
		return fmt.Errorf("memory: %w: transaction of another store", core.ErrInvalidTx)
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
