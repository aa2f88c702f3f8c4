package outboxtest

import (
	"context"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"slices"
	"sync"
	"testing"
)

// Recorder is a driver.OutboxStore that passes every call to the store it wraps and remembers
// the records each transaction inserted through it. Build the application's core.Outbox on a
// Recorder in tests, then check a transaction with Recorder.Tx. It forwards the optional
// driver.Notifier and driver.Flusher capabilities of the wrapped store (a no-op when absent).
// It is safe for concurrent use.
type Recorder[TTx comparable] struct {
	store driver.OutboxStore[TTx]
	mu    sync.Mutex
	byTx  map[TTx][]driver.Record
	all   []driver.Record
}

// Record returns a Recorder around store.
func Record[TTx comparable](store driver.OutboxStore[TTx]) *Recorder[TTx] {
	return &Recorder[TTx]{store: store, byTx: map[TTx][]driver.Record{}}
}

// LaneCount implements driver.OutboxStore.
func (r *Recorder[TTx]) LaneCount(ctx context.Context) (int, error) { return r.store.LaneCount(ctx) }

// Insert implements driver.OutboxStore: it inserts through the wrapped store and, when that
// succeeded, records the records under tx. A failed Insert records nothing.
func (r *Recorder[TTx]) Insert(ctx context.Context, tx TTx, records []driver.Record) error {
	if err := r.store.Insert(ctx, tx, records); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byTx[tx] = append(r.byTx[tx], records...)
	r.all = append(r.all, records...)
	return nil
}

// Notify implements driver.Notifier: the wrapped store's Notify, when it has one.
func (r *Recorder[TTx]) Notify(ctx context.Context) error {
	if n, ok := r.store.(driver.Notifier); ok {
		return n.Notify(ctx)
	}
	return nil
}

// Flush implements driver.Flusher: the wrapped store's Flush, when it has one.
func (r *Recorder[TTx]) Flush(ctx context.Context) error {
	if f, ok := r.store.(driver.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// Tx returns the Source of what tx wrote through the Recorder, in write order, whether or not
// tx has committed yet: what the transaction wrote, not what the database kept (a rolled-back
// transaction still lists its events; check the database with Since for that). The records
// carry Event and Lane; Seq and CreatedAt, which the database assigns, are zero.
func (r *Recorder[TTx]) Tx(tx TTx) Source {
	return SourceFunc(func(context.Context) ([]driver.Record, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.byTx[tx]), nil
	})
}

// All returns the Source of every record written through the Recorder, in write order.
func (r *Recorder[TTx]) All() Source {
	return SourceFunc(func(context.Context) ([]driver.Record, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.Clone(r.all), nil
	})
}

// Reset forgets everything recorded.
func (r *Recorder[TTx]) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.byTx)
	r.all = nil
}

// Point is a position in an outbox: the highest sequence number it held when Mark read it.
type Point struct{ Seq int64 }

// listPage is the page size of Mark and Since.
const listPage = 1000

// Mark returns the position after the last row the outbox of admin holds now. Take it while no
// producer transaction is open: rows get their sequence numbers at insert, so a transaction
// that inserted before Mark and commits after it has rows below the point.
func Mark(ctx context.Context, admin driver.Admin) (Point, error) {
	var p Point
	for {
		page, err := admin.List(ctx, driver.ListParams{AfterSeq: p.Seq, Limit: listPage})
		if err != nil {
			return Point{}, fmt.Errorf("outboxtest: mark: %w", err)
		}
		if len(page) == 0 {
			return p, nil
		}
		p.Seq = page[len(page)-1].Seq
	}
}

// Since returns the Source of the rows the outbox of admin holds after p, in sequence order:
// committed rows, published or not (rows a relay deleted on publish are gone).
func Since(admin driver.Admin, p Point) Source {
	return SourceFunc(func(ctx context.Context) ([]driver.Record, error) {
		var out []driver.Record
		after := p.Seq
		for {
			page, err := admin.List(ctx, driver.ListParams{AfterSeq: after, Limit: listPage})
			if err != nil {
				return nil, err
			}
			out = append(out, page...)
			if len(page) < listPage {
				return out, nil
			}
			after = page[len(page)-1].Seq
		}
	})
}

// RequireMark is Mark that fails tb on error.
func RequireMark(tb testing.TB, admin driver.Admin) Point {
	tb.Helper()
	p, err := Mark(tb.Context(), admin)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}
