package memory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Heartbeat implements driver.RelayStore.
func (s *Store) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
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
func (s *Store) held(l driver.Lease, now time.Time) bool {
	if l.Lane < 0 || l.Lane >= s.lanes {
		return false
	}
	st := s.leases[l.Lane]
	return l.HeldAt(driver.Lease{Lane: l.Lane, Owner: st.owner, Generation: st.generation, Until: st.until}, now)
}

// ClaimLanes implements driver.RelayStore.
func (s *Store) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
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
	var out []driver.Lease
	for lane := 0; lane < s.lanes && len(out) < p.Max; lane++ {
		st := &s.leases[lane]
		if st.owner != "" && st.until.After(now) {
			continue
		}
		takenOver := st.owner != ""
		st.generation++
		st.owner = p.Owner
		st.until = until
		out = append(out, driver.Lease{Lane: lane, Owner: p.Owner, Generation: st.generation, Until: until, TakenOver: takenOver})
	}
	return out, nil
}

// RenewLanes implements driver.RelayStore.
func (s *Store) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
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
	var out []driver.Lease
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

// ReleaseLanes implements driver.RelayStore.
func (s *Store) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
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

// Fetch implements driver.RelayStore.
func (s *Store) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
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
	var picked []*driver.Record
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
				blocked[r.PartitionKey] = true
				continue
			}
			picked = append(picked, r)
			n++
		}
	}
	slices.SortFunc(picked, func(a, b *driver.Record) int { return cmpInt64(a.Seq, b.Seq) })
	if len(picked) > p.Limit {
		picked = picked[:p.Limit]
	}
	out := make([]driver.Record, len(picked))
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

// Settle implements driver.RelayStore.
func (s *Store) Settle(ctx context.Context, p driver.SettleParams) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: settle: %w", err)
	}
	now := clock(p.Now)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := driver.CheckLeases(p.Leases, func(l driver.Lease) bool {
		return s.held(l, now)
	}); err != nil {
		return err
	}
	leased := map[int]bool{}
	for _, l := range p.Leases {
		leased[l.Lane] = true
	}
	settle := func(seq int64) *driver.Record {
		r := s.bySeq(seq)
		if r == nil || !r.PublishedAt.IsZero() {
			return nil
		}
		if !leased[r.Lane] {
			return nil
		}
		return r
	}
	dirty := map[int]int64{} // lane -> its highest settled seq
	var deleted int64        // the highest deleted seq
	for _, seq := range p.Published {
		r := settle(seq)
		if r == nil {
			continue
		}
		dirty[r.Lane] = max(dirty[r.Lane], r.Seq)
		if p.Delete {
			delete(s.ids, r.ID)
			deleted = max(deleted, r.Seq)
			r.Seq = -r.Seq // marks the row deleted until the slices are compacted
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
	for lane, top := range dirty {
		s.unpub[lane] = compact(s.unpub[lane], top, func(r *driver.Record) bool {
			return r.Seq < 0 || !r.PublishedAt.IsZero()
		})
	}
	if deleted > 0 {
		s.rows = compact(s.rows, deleted, func(r *driver.Record) bool { return r.Seq < 0 })
	}
	return nil
}

// compact removes the rows that gone reports from rs (ascending |Seq|), where they all have
// |Seq| <= top, in time proportional to the rows up to top when they are the first rows (a
// relay settles the oldest rows of its lanes): the rows after top are not looked at, and are
// not moved when every row up to top is gone. Settling a batch then costs the batch, not the
// backlog behind it (which made a fast writer outrun the relay for good).
func compact(rs []*driver.Record, top int64, gone func(*driver.Record) bool) []*driver.Record {
	hi, found := slices.BinarySearchFunc(rs, top, func(r *driver.Record, seq int64) int { return cmpInt64(abs(r.Seq), seq) })
	if found {
		hi++
	}
	w := 0
	for _, r := range rs[:hi] {
		if !gone(r) {
			rs[w] = r
			w++
		}
	}
	if w == 0 {
		clear(rs[:hi])
		return rs[hi:]
	}
	n := copy(rs[w:], rs[hi:])
	clear(rs[w+n:])
	return rs[:w+n]
}

// bySeq finds a live row by binary search (rows are in ascending Seq). Caller holds s.mu.
func (s *Store) bySeq(seq int64) *driver.Record {
	i, ok := slices.BinarySearchFunc(s.rows, seq, func(r *driver.Record, seq int64) int {
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

// Ingress implements driver.IngressCounter: the highest seq given to a record (its
// transaction may not have committed yet).
func (s *Store) Ingress(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("memory: ingress: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(s.seq), nil
}
