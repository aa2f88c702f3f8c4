package memory

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// changeLog is the Store's change log: every committed transaction, in commit order, reduced to
// its outbox inserts. Position p (1-based) is "just after the p-th transaction". PurgeLog drops
// old entries, as a database expires its binary logs.
type changeLog struct {
	mu     sync.Mutex
	cond   *sync.Cond
	purged int64 // positions <= purged are gone (except purged itself, the oldest resumable)
	txs    [][]driver.Record
}

func (l *changeLog) init() {
	if l.cond == nil {
		l.cond = sync.NewCond(&l.mu)
	}
}

// append is called by commit with s.mu held; it never takes s.mu.
func (l *changeLog) append(inserts []*driver.Record) {
	recs := make([]driver.Record, len(inserts))
	for i, r := range inserts {
		recs[i] = cloneRecord(r)
	}
	l.mu.Lock()
	l.init()
	l.txs = append(l.txs, recs)
	l.cond.Broadcast()
	l.mu.Unlock()
}

func (l *changeLog) head() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.purged + int64(len(l.txs))
}

// PurgeLog drops the change log up to its current head, as PURGE BINARY LOGS would: a change
// stream can then resume only from the head.
func (s *Store) PurgeLog() {
	l := &s.changes
	l.mu.Lock()
	defer l.mu.Unlock()
	l.purged += int64(len(l.txs))
	l.txs = nil
}

// ChangeSource returns the store's change log as a driver.ChangeSource (the reference CDC source of
// the conformance suite).
func (s *Store) ChangeSource() driver.ChangeSource { return &changeSource{s: s} }

type changeSource struct{ s *Store }

// Release implements driver.LogReleaser: it purges the log (PurgeLog).
func (c *changeSource) Release(ctx context.Context) error {
	c.s.PurgeLog()
	return ctx.Err()
}

func (c *changeSource) Identity(ctx context.Context) (string, error) {
	return fmt.Sprintf("memory:%p", c.s), ctx.Err()
}

func (c *changeSource) Start(ctx context.Context) (driver.ChangeStream, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	// Every transaction committed before head is visible to reads that begin now.
	h := c.s.changes.head()
	return c.open(h), strconv.FormatInt(h, 10), nil
}

func (c *changeSource) Resume(ctx context.Context, position string) (driver.ChangeStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p, err := strconv.ParseInt(position, 10, 64)
	if err != nil || p < 0 {
		return nil, fmt.Errorf("memory: resume: bad position %q", position)
	}
	l := &c.s.changes
	l.mu.Lock()
	purged, head := l.purged, l.purged+int64(len(l.txs))
	l.mu.Unlock()
	if p > head {
		return nil, fmt.Errorf("memory: resume: position %d is past the head %d", p, head)
	}
	if p < purged {
		id, _ := c.Identity(ctx)
		return nil, &core.PositionLostError{Source: id, Checkpoint: position,
			Available: strconv.FormatInt(purged, 10), Reason: "the log was purged"}
	}
	return c.open(p), nil
}

func (c *changeSource) Retention(ctx context.Context, position string) (core.Retention, error) {
	p, err := strconv.ParseInt(position, 10, 64)
	if err != nil {
		return core.Retention{}, fmt.Errorf("memory: retention: bad position %q", position)
	}
	l := &c.s.changes
	l.mu.Lock()
	defer l.mu.Unlock()
	var bytes int64
	for i := max(p-l.purged, 0); i < int64(len(l.txs)); i++ {
		for _, r := range l.txs[i] {
			bytes += int64(len(r.Payload)) + 64
		}
	}
	return core.Retention{RetainedBytes: bytes, HeadroomBytes: max(p-l.purged, 0)}, ctx.Err()
}

func (c *changeSource) open(from int64) *changeStream {
	st := &changeStream{src: c, next: from, stop: make(chan struct{})}
	return st
}

type changeStream struct {
	src  *changeSource
	next int64 // the position of the last transaction returned
	once sync.Once
	stop chan struct{}
}

func (st *changeStream) Next(ctx context.Context) (driver.ChangeTx, error) {
	l := &st.src.s.changes
	// Wake the wait below when ctx ends or the stream closes.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
		case <-st.stop:
		case <-done:
			return
		}
		l.mu.Lock()
		l.init()
		l.cond.Broadcast()
		l.mu.Unlock()
	}()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	for {
		select {
		case <-st.stop:
			return driver.ChangeTx{}, fmt.Errorf("memory: change stream closed")
		default:
		}
		if err := ctx.Err(); err != nil {
			return driver.ChangeTx{}, err
		}
		if st.next < l.purged {
			id := fmt.Sprintf("memory:%p", st.src.s)
			return driver.ChangeTx{}, &core.PositionLostError{Source: id, Checkpoint: strconv.FormatInt(st.next, 10),
				Available: strconv.FormatInt(l.purged, 10), Reason: "the log was purged under the stream"}
		}
		if i := st.next - l.purged; i < int64(len(l.txs)) {
			recs := make([]driver.Record, len(l.txs[i]))
			for j := range l.txs[i] {
				recs[j] = cloneRecord(&l.txs[i][j])
			}
			st.next++
			return driver.ChangeTx{Records: recs, Position: strconv.FormatInt(st.next, 10)}, nil
		}
		l.cond.Wait()
	}
}

func (st *changeStream) Confirm(ctx context.Context, position string) error { return ctx.Err() }

func (st *changeStream) Close() error {
	st.once.Do(func() { close(st.stop) })
	l := &st.src.s.changes
	l.mu.Lock()
	l.init()
	l.cond.Broadcast()
	l.mu.Unlock()
	return nil
}

// LoadCheckpoint implements driver.CheckpointStore.
func (s *Store) LoadCheckpoint(ctx context.Context) (driver.Checkpoint, bool, error) {
	if err := ctx.Err(); err != nil {
		return driver.Checkpoint{}, false, fmt.Errorf("memory: load checkpoint: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checkpoint == nil {
		return driver.Checkpoint{}, false, nil
	}
	return *s.checkpoint, true, nil
}

// SaveCheckpoint implements driver.CheckpointStore.
func (s *Store) SaveCheckpoint(ctx context.Context, c driver.Checkpoint) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: save checkpoint: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.fenced("save checkpoint", c.Generation); err != nil {
		return err
	}
	c.UpdatedAt = clock(c.UpdatedAt)
	s.checkpoint = &c
	return nil
}
