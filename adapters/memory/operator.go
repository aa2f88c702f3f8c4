package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// The operator commands (core.Operator) and the status reads on a Store: the steps of
// driver.OperatorTx applied under the writer lock and s.mu, each with its undo, so that an
// operator transaction is all or nothing, as a database's is. ResizeLanes (driver.LaneResizer)
// runs core.Operator.ResizeLanes on the Store (writers use InsertLanes).

// Interface checks.
var (
	_ driver.OperatorStore      = (*Store)(nil)
	_ driver.SingleWriter       = (*Store)(nil)
	_ driver.LaneInserter[*Tx]  = (*Store)(nil)
	_ driver.LaneResizer        = (*Store)(nil)
	_ driver.CheckpointReleaser = (*Store)(nil)
	_ driver.AuditWriter        = (*Store)(nil)
)

// InOperatorTx implements driver.OperatorStore: it waits for the writer lock (or ctx), runs fn
// with the state locked, and keeps fn's changes when fn returns nil, else (or when fn panics)
// undoes them. fn must call nothing of the Store but tx's steps.
func (s *Store) InOperatorTx(ctx context.Context, fn func(ctx context.Context, tx driver.OperatorTx) error) error {
	return s.operatorTx(ctx, func(ctx context.Context, tx *opTx) error { return fn(ctx, tx) })
}

// operatorTx is InOperatorTx with the Store's own steps.
func (s *Store) operatorTx(ctx context.Context, fn func(ctx context.Context, tx *opTx) error) error {
	if err := s.lockWriter(ctx); err != nil {
		return fmt.Errorf("memory: begin: %w", err)
	}
	defer s.unlockWriter()
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := &opTx{s: s}
	kept := false
	defer func() {
		tx.done = true
		if !kept {
			for i := len(tx.undo) - 1; i >= 0; i-- {
				tx.undo[i]()
			}
		}
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: commit: %w", err)
	}
	kept = true
	return nil
}

// SingleWriter implements driver.SingleWriter: the Store has one writer lock.
func (s *Store) SingleWriter() bool { return true }

// ListAudit implements driver.OperatorStore.
func (s *Store) ListAudit(ctx context.Context, p driver.AuditListParams) ([]driver.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: audit log: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []driver.AuditEntry
	for i := len(s.audit) - 1; i >= 0 && len(out) < p.Limit; i-- {
		if a := s.audit[i]; !a.At.Before(p.Since) {
			out = append(out, a)
		}
	}
	return out, nil
}

// InsertLanes implements driver.LaneInserter: Insert of records whose lanes were computed with
// lanes, refused with an error wrapping core.ErrLaneCountChanged when the lane count is no
// longer lanes. tx holds the writer lock, which a resize needs too, so the count cannot change
// before tx ends.
func (s *Store) InsertLanes(ctx context.Context, tx *Tx, lanes int, records []driver.Record) error {
	if err := tx.check(ctx, s); err != nil {
		return fmt.Errorf("memory: insert: %w", err)
	}
	s.mu.Lock()
	cur := s.lanes
	s.mu.Unlock()
	if cur != lanes {
		return fmt.Errorf("memory: insert: %w: lanes computed with %d, the outbox has %d", core.ErrLaneCountChanged, lanes, cur)
	}
	return s.Insert(ctx, tx, records)
}

// Blocked implements driver.StatusReader: every pending record behind a parked record of its
// key (all unpublished records of a key share a lane).
func (s *Store) Blocked(ctx context.Context) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: blocked: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, rs := range s.unpub {
		parked := map[string]bool{}
		for _, r := range rs {
			switch {
			case !r.ParkedAt.IsZero():
				parked[r.PartitionKey] = true
			case parked[r.PartitionKey]:
				n++
			}
		}
	}
	return n, nil
}

// Lanes implements driver.StatusReader.
func (s *Store) Lanes(ctx context.Context) ([]driver.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: lanes: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]driver.Lease, len(s.leases))
	for i, l := range s.leases {
		out[i] = driver.Lease{Lane: i, Owner: l.owner, Generation: l.generation, Until: l.until}
	}
	return out, nil
}

// PendingDestinations implements driver.StatusReader.
func (s *Store) PendingDestinations(ctx context.Context, limit int) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: pending destinations: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var pending []*driver.Record
	for _, rs := range s.unpub {
		for _, r := range rs {
			if r.ParkedAt.IsZero() {
				pending = append(pending, r)
			}
		}
	}
	slices.SortFunc(pending, func(a, b *driver.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	out := map[string]int64{}
	for _, r := range pending[:min(len(pending), max(limit, 0))] {
		out[r.Destination]++
	}
	return out, nil
}

// InboxConsumers implements driver.StatusReader.
func (s *Store) InboxConsumers(ctx context.Context, limit int) ([]driver.InboxConsumer, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: inbox consumers: %w", err)
	}
	s.mu.Lock()
	byName := map[string]*driver.InboxConsumer{}
	get := func(name string) *driver.InboxConsumer {
		c, ok := byName[name]
		if !ok {
			c = &driver.InboxConsumer{Consumer: name}
			byName[name] = c
		}
		return c
	}
	for k := range s.inbox {
		get(k.consumer).Records++
	}
	for name, h := range s.horizons {
		get(name).Horizon = h
	}
	s.mu.Unlock()
	out := make([]driver.InboxConsumer, 0, len(byName))
	for _, c := range byName {
		if limit > 0 && c.Records > int64(limit) {
			c.Records, c.More = int64(limit), true
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b driver.InboxConsumer) int { return strings.Compare(a.Consumer, b.Consumer) })
	if len(out) > driver.MaxInboxConsumers {
		out = out[:driver.MaxInboxConsumers]
	}
	return out, nil
}

// PublishRate implements driver.StatusReader from the published rows still present (ok is
// always true).
func (s *Store) PublishRate(ctx context.Context, window time.Duration, limit int) (float64, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, fmt.Errorf("memory: publish rate: %w", err)
	}
	now := clock(time.Time{})
	s.mu.Lock()
	var at []time.Time
	for _, r := range s.rows {
		if r.Seq > 0 && r.PublishedAt.After(now.Add(-window)) {
			at = append(at, r.PublishedAt)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(at, func(a, b time.Time) int { return b.Compare(a) }) // newest first
	if len(at) >= limit && limit > 0 {
		at = at[:limit]
		window = max(now.Sub(at[len(at)-1]), time.Millisecond)
	}
	return float64(len(at)) / window.Seconds(), true, nil
}

// opTx is driver.OperatorTx on a Store whose writer lock and s.mu InOperatorTx holds.
type opTx struct {
	s    *Store
	done bool
	undo []func() // run in reverse when the transaction does not keep its changes
}

// check refuses a step after the transaction ended or once ctx ended.
func (t *opTx) check(ctx context.Context, step string) error {
	if t.done {
		return fmt.Errorf("memory: %s: %w", step, ErrTxDone)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: %s: %w", step, err)
	}
	return nil
}

// BeginReplay implements driver.OperatorTx (the writer lock holds every resize and cleanup
// back).
func (t *opTx) BeginReplay(ctx context.Context) (int, error) {
	if err := t.check(ctx, "replay"); err != nil {
		return 0, err
	}
	return t.s.lanes, nil
}

// BeginResize implements driver.OperatorTx (the writer lock holds every writer back).
func (t *opTx) BeginResize(ctx context.Context) (int, error) {
	if err := t.check(ctx, "resize lanes"); err != nil {
		return 0, err
	}
	return t.s.lanes, nil
}

// Publisher implements driver.OperatorTx.
func (t *opTx) Publisher(ctx context.Context) (driver.Publisher, error) {
	if err := t.check(ctx, "publisher"); err != nil {
		return driver.Publisher{}, err
	}
	return t.s.publisher, nil
}

// ReplayTargets implements driver.OperatorTx.
func (t *opTx) ReplayTargets(ctx context.Context, p driver.ReplayParams, limit int) ([]driver.ReplayTarget, error) {
	if err := t.check(ctx, "replay targets"); err != nil {
		return nil, err
	}
	target := func(r *driver.Record) driver.ReplayTarget {
		return driver.ReplayTarget{Seq: r.Seq, ID: r.ID, PartitionKey: r.PartitionKey, Published: !r.PublishedAt.IsZero(), Lane: r.Lane}
	}
	var out []driver.ReplayTarget
	if len(p.IDs) > 0 {
		for _, id := range p.IDs {
			if r := t.s.ids[id]; r != nil && r.Seq > 0 {
				out = append(out, target(r))
			}
		}
		slices.SortFunc(out, func(a, b driver.ReplayTarget) int { return cmp.Compare(a.Seq, b.Seq) })
		return out, nil
	}
	since := p.Since.UTC().Truncate(time.Microsecond)
	for _, r := range t.s.rows {
		if len(out) >= limit {
			break
		}
		if r.Seq > 0 && r.PartitionKey == p.PartitionKey && !r.PublishedAt.IsZero() && !r.CreatedAt.Before(since) {
			out = append(out, target(r))
		}
	}
	return out, nil
}

// KeyUnpublished implements driver.OperatorTx.
func (t *opTx) KeyUnpublished(ctx context.Context, key string) (bool, error) {
	if err := t.check(ctx, "replay"); err != nil {
		return false, err
	}
	for _, rs := range t.s.unpub {
		for _, r := range rs {
			if r.PartitionKey == key {
				return true, nil
			}
		}
	}
	return false, nil
}

// save records r's state for the undo of the step that changes it.
func (t *opTx) save(r *driver.Record) {
	old := *r
	t.undo = append(t.undo, func() {
		r.PublishedAt, r.Attempts, r.NextAttemptAt, r.LastError, r.ParkedAt, r.Lane = old.PublishedAt, old.Attempts, old.NextAttemptAt, old.LastError, old.ParkedAt, old.Lane
	})
}

// saveLanes records the lane state (count, leases, unpublished rows per lane) for the undo of
// the step that changes it.
func (t *opTx) saveLanes() {
	s := t.s
	lanes, leases := s.lanes, slices.Clone(s.leases)
	unpub := make([][]*driver.Record, len(s.unpub))
	for i, rs := range s.unpub {
		unpub[i] = slices.Clone(rs)
	}
	t.undo = append(t.undo, func() { s.lanes, s.leases, s.unpub = lanes, leases, unpub })
}

// Requeue implements driver.OperatorTx.
func (t *opTx) Requeue(ctx context.Context, rows []driver.ReplayTarget) (int64, error) {
	if err := t.check(ctx, "replay"); err != nil {
		return 0, err
	}
	t.saveLanes()
	var n int64
	for _, x := range rows {
		r := t.s.bySeq(x.Seq)
		if r == nil || r.PublishedAt.IsZero() || x.Lane < 0 || x.Lane >= t.s.lanes {
			continue
		}
		t.save(r)
		r.PublishedAt, r.Attempts, r.NextAttemptAt, r.LastError, r.ParkedAt, r.Lane = time.Time{}, 0, time.Time{}, "", time.Time{}, x.Lane
		lane := t.s.unpub[r.Lane]
		i, _ := slices.BinarySearchFunc(lane, r.Seq, func(u *driver.Record, seq int64) int { return cmp.Compare(u.Seq, seq) })
		t.s.unpub[r.Lane] = slices.Insert(lane, i, r)
		n++
	}
	return n, nil
}

// Unpark implements driver.OperatorTx.
func (t *opTx) Unpark(ctx context.Context, key string) (int64, error) {
	if err := t.check(ctx, "unpark"); err != nil {
		return 0, err
	}
	return int64(t.s.unpark(key, t.save)), nil
}

// PruneOutbox implements driver.OperatorTx.
func (t *opTx) PruneOutbox(ctx context.Context, p driver.PruneParams) (int64, error) {
	if err := t.check(ctx, "prune outbox"); err != nil {
		return 0, err
	}
	s := t.s
	rows := slices.Clone(s.rows)
	t.saveLanes()
	gone := s.prune(p)
	t.undo = append(t.undo, func() {
		for _, r := range gone {
			r.Seq = -r.Seq
			s.ids[r.ID] = r
		}
		s.rows = rows
	})
	return int64(len(gone)), nil
}

// ResetLanes implements driver.OperatorTx.
func (t *opTx) ResetLanes(ctx context.Context, p driver.ResetLanesParams) (int64, error) {
	if err := t.check(ctx, "reset lanes"); err != nil {
		return 0, err
	}
	t.saveLanes()
	now := clock(time.Time{})
	var n int64
	for lane := range t.s.leases {
		st := &t.s.leases[lane]
		if st.owner == "" || (len(p.Lanes) > 0 && !slices.Contains(p.Lanes, lane)) || (p.Owner != "" && st.owner != p.Owner) {
			continue
		}
		st.owner, st.until = "", now
		st.generation++
		n++
	}
	return n, nil
}

// ResizeLanes implements driver.OperatorTx: every lease ended (free lanes too), the lane table
// and the unpublished rows' lanes rebuilt for to lanes.
func (t *opTx) ResizeLanes(ctx context.Context, from, to int) (int64, error) {
	if err := t.check(ctx, "resize lanes"); err != nil {
		return 0, err
	}
	s := t.s
	t.saveLanes()
	now := clock(time.Time{})
	leases := make([]laneState, to)
	for lane := range s.leases {
		if lane < to {
			leases[lane] = laneState{generation: s.leases[lane].generation + 1, until: now}
		}
	}
	var unpublished []*driver.Record
	for _, rs := range s.unpub {
		unpublished = append(unpublished, rs...)
	}
	slices.SortFunc(unpublished, func(a, b *driver.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	unpub := make([][]*driver.Record, to)
	var moved int64
	for _, r := range unpublished {
		l := driver.LaneOf(r.PartitionKey, to)
		if l != r.Lane {
			t.save(r)
			r.Lane = l
			moved++
		}
		unpub[l] = append(unpub[l], r)
	}
	s.lanes, s.leases, s.unpub = to, leases, unpub
	return moved, nil
}

// RaiseHorizon implements driver.OperatorTx.
func (t *opTx) RaiseHorizon(ctx context.Context, consumer string, before time.Time) (time.Time, error) {
	if err := t.check(ctx, "raise horizon"); err != nil {
		return time.Time{}, err
	}
	before = before.UTC().Truncate(time.Microsecond)
	h, had := t.s.horizons[consumer]
	if before.After(h) {
		t.undo = append(t.undo, func() {
			if had {
				t.s.horizons[consumer] = h
			} else {
				delete(t.s.horizons, consumer)
			}
		})
		t.s.horizons[consumer] = before
		return before, nil
	}
	return h, nil
}

// PruneInbox implements driver.OperatorTx.
func (t *opTx) PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error) {
	if err := t.check(ctx, "prune inbox"); err != nil {
		return 0, err
	}
	var n int64
	for k, r := range t.s.inbox {
		if n >= int64(limit) {
			break
		}
		if k.consumer == consumer && r.OccurredAt.Before(horizon) {
			delete(t.s.inbox, k)
			t.undo = append(t.undo, func() { t.s.inbox[k] = r })
			n++
		}
	}
	return n, nil
}

// WriteAudit implements driver.OperatorTx.
func (t *opTx) WriteAudit(ctx context.Context, a driver.AuditEntry) (int64, error) {
	if err := t.check(ctx, "write audit"); err != nil {
		return 0, err
	}
	s := t.s
	s.auditSeq++
	a.ID, a.At = s.auditSeq, clock(a.At)
	if a.Arguments == "" {
		a.Arguments = "{}"
	}
	s.audit = append(s.audit, a)
	t.undo = append(t.undo, func() { s.audit = s.audit[:len(s.audit)-1] })
	return a.ID, nil
}

// SetAuditRows implements driver.OperatorTx.
func (t *opTx) SetAuditRows(ctx context.Context, id, rows int64) error {
	if err := t.check(ctx, "write audit"); err != nil {
		return err
	}
	for i, a := range t.s.audit {
		if a.ID == id && a.Rows == -1 {
			t.s.audit[i].Rows = rows
			t.undo = append(t.undo, func() { t.s.audit[i].Rows = -1 })
		}
	}
	return nil
}

// ResizeLanes implements driver.LaneResizer through core.Operator (OperatorStore).
func (s *Store) ResizeLanes(ctx context.Context, lanes int, audit driver.AuditEntry) (int, error) {
	op, err := core.NewOperator(s, &core.OperatorOptions{Logger: s.log})
	if err != nil {
		return 0, err
	}
	return op.ResizeLanes(ctx, lanes, audit)
}

// ReleaseCheckpoint implements driver.CheckpointReleaser: in one operator transaction, the CDC
// checkpoint deleted and audit written with Rows 1 when there was one, else 0.
func (s *Store) ReleaseCheckpoint(ctx context.Context, audit driver.AuditEntry) (bool, error) {
	var had bool
	err := s.operatorTx(ctx, func(ctx context.Context, tx *opTx) error {
		if err := tx.check(ctx, "release checkpoint"); err != nil {
			return err
		}
		c := s.checkpoint
		had, audit.Rows = c != nil, 0
		if had {
			audit.Rows = 1
		}
		s.checkpoint = nil
		tx.undo = append(tx.undo, func() { s.checkpoint = c })
		_, err := tx.WriteAudit(ctx, audit)
		return err
	})
	if err != nil {
		return false, err
	}
	return had, nil
}

// WriteAudit implements driver.AuditWriter: audit written in an operator transaction of its own.
func (s *Store) WriteAudit(ctx context.Context, audit driver.AuditEntry) error {
	return s.operatorTx(ctx, func(ctx context.Context, tx *opTx) error {
		_, err := tx.WriteAudit(ctx, audit)
		return err
	})
}

// CheckAudit implements driver.AuditWriter: a row written in an operator transaction that is
// undone (its ID is used up). The memory store refuses only a done ctx.
func (s *Store) CheckAudit(ctx context.Context) error {
	err := s.operatorTx(ctx, func(ctx context.Context, tx *opTx) error {
		if _, err := tx.WriteAudit(ctx, driver.AuditEntry{Actor: "check", Command: "check"}); err != nil {
			return err
		}
		return driver.ErrAuditChecked
	})
	if err != nil && !errors.Is(err, driver.ErrAuditChecked) {
		return err
	}
	return nil
}
