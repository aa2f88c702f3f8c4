package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"slices"
	"strings"
	"time"
)

// Heartbeat implements driver.RelayStore. The live count leaves out workers known dead: those
// holding a lane tied to a GET_LOCK session that has ended (their rows are deleted).
func (s *Store) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
	now := timeArg(p.Now)
	if p.TTL <= 0 {
		if _, err := s.exec(ctx, s.q.heartbeatDelete, heartbeatDeleteParams{Owner: p.Owner}.args()...); err != nil {
			return 0, wrap("heartbeat", err)
		}
		s.dropLockConn(p.Owner)
	} else {
		if _, err := s.exec(ctx, s.q.heartbeatPurgeDead, heartbeatPurgeDeadParams{Owner: p.Owner, LockPrefix: s.lockPrefix}.args()...); err != nil {
			return 0, wrap("heartbeat", err)
		}
		if _, err := s.exec(ctx, s.q.heartbeatUpsert, heartbeatUpsertParams{Owner: p.Owner, Now: now, TTL: micros(p.TTL)}.args()...); err != nil {
			return 0, wrap("heartbeat", err)
		}
	}
	var live int
	if err := s.db.QueryRowContext(ctx, s.q.heartbeatCount, heartbeatCountParams{Now: now}.args()...).Scan(&live); err != nil {
		return 0, wrap("heartbeat", err)
	}
	return live, nil
}

// ClaimLanes implements driver.RelayStore with the configured ClaimStrategy. Its transaction
// first checks p.Generation against the publisher row (shared lock): a stale generation claims
// nothing and gets an error wrapping core.ErrFenced.
func (s *Store) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if p.Owner == "" {
		return nil, fmt.Errorf("mysql: claim lanes: empty owner")
	}
	if p.TTL <= 0 {
		return nil, fmt.Errorf("mysql: claim lanes: TTL must be positive")
	}
	if s.usesLocks(p.Owner) {
		return s.claimGetLock(ctx, p)
	}
	now := timeArg(p.Now)
	var leases []driver.Lease
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		leases = nil
		if err := s.checkGeneration(ctx, tx, p.Generation); err != nil {
			return err
		}
		lanes, err := queryInts(ctx, tx, s.q.claimSkipLocked, claimSkipLockedParams{Now: now, LockPrefix: s.lockPrefix, Max: p.Max}.args()...)
		if err != nil || len(lanes) == 0 {
			return err
		}
		leases, err = s.takeLanes(ctx, tx, p, lanes, nil)
		return err
	})
	if err != nil {
		return nil, wrap("claim lanes", err)
	}
	return leases, nil
}

// takeLanes gives lanes (locked by tx) to p.Owner and returns the new leases.
func (s *Store) takeLanes(ctx context.Context, tx *sql.Tx, p driver.ClaimParams, lanes []int, lockSession any) ([]driver.Lease, error) {
	query, args := claimOwnedParams{Lanes: lanes}.query(s.q.claimOwned)
	owned, err := queryInts(ctx, tx, query, args...)
	if err != nil {
		return nil, err
	}
	query, args = claimUpdateParams{Owner: p.Owner, Now: timeArg(p.Now), TTL: micros(p.TTL), LockSession: lockSession, Lanes: lanes}.query(s.q.claimUpdate)
	if _, err := tx.ExecContext(ctx, query, args...); err != nil {
		return nil, err
	}
	leases, err := s.readLeases(ctx, tx, p.Owner, lanes)
	for i := range leases {
		leases[i].TakenOver = slices.Contains(owned, leases[i].Lane)
	}
	return leases, err
}

func (s *Store) readLeases(ctx context.Context, tx *sql.Tx, owner string, lanes []int) ([]driver.Lease, error) {
	query, args := lanesReadParams{Lanes: lanes}.query(s.q.lanesRead)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.Lease
	for rows.Next() {
		l := driver.Lease{Owner: owner}
		var until sql.NullTime
		if err := rows.Scan(&l.Lane, &l.Generation, &until); err != nil {
			return nil, err
		}
		l.Until = nullTime(until)
		out = append(out, l)
	}
	return out, rows.Err()
}

// lockLanes locks the lane rows of leases (in lane order) and returns the leases still held, and
// a *driver.LanesLostError naming the others (nil when none is lost).
func (s *Store) lockLanes(ctx context.Context, tx *sql.Tx, leases []driver.Lease, now any) (held []driver.Lease, lost, err error) {
	lanes := make([]int, 0, len(leases))
	for _, l := range leases {
		lanes = append(lanes, l.Lane)
	}
	slices.Sort(lanes)
	lanes = slices.Compact(lanes)
	query, args := lanesLockParams{Now: now, Lanes: lanes}.query(s.q.lanesLock)
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, nil, err
	}
	state := map[int]driver.Lease{}
	var at time.Time // now, by the clock of the query
	for rows.Next() {
		var st driver.Lease
		var until sql.NullTime
		if err := rows.Scan(&st.Lane, &st.Owner, &st.Generation, &until, &at); err != nil {
			rows.Close()
			return nil, nil, err
		}
		st.Until = nullTime(until)
		state[st.Lane] = st
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	lost = driver.CheckLeases(leases, func(l driver.Lease) bool {
		ok := l.HeldAt(state[l.Lane], at)
		if ok {
			held = append(held, l)
		}
		return ok
	})
	return held, lost, nil
}

// RenewLanes implements driver.RelayStore. Like ClaimLanes it is fenced by p.Generation.
func (s *Store) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	if len(p.Leases) == 0 {
		return nil, nil
	}
	if p.TTL <= 0 {
		return nil, fmt.Errorf("mysql: renew lanes: TTL must be positive")
	}
	now := timeArg(p.Now)
	var renewed []driver.Lease
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		renewed = nil
		if err := s.checkGeneration(ctx, tx, p.Generation); err != nil {
			return err
		}
		held, _, err := s.lockLanes(ctx, tx, p.Leases, now)
		if err != nil || len(held) == 0 {
			return err
		}
		lanes := make([]int, len(held))
		for i, l := range held {
			lanes[i] = l.Lane
		}
		query, args := renewUpdateParams{Now: now, TTL: micros(p.TTL), Lanes: lanes}.query(s.q.renewUpdate)
		if _, err := tx.ExecContext(ctx, query, args...); err != nil {
			return err
		}
		got, err := s.readLeases(ctx, tx, "", lanes)
		if err != nil {
			return err
		}
		for i := range got {
			got[i].Owner = held[i].Owner
		}
		// readLeases is in lane order; held may not be.
		byLane := map[int]driver.Lease{}
		for _, l := range got {
			byLane[l.Lane] = l
		}
		for _, l := range held {
			n := byLane[l.Lane]
			n.Owner = l.Owner
			renewed = append(renewed, n)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("renew lanes", err)
	}
	s.syncLocks(ctx, p.Leases, renewed)
	return renewed, nil
}

// ReleaseLanes implements driver.RelayStore.
func (s *Store) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	sorted := slices.Clone(leases)
	slices.SortFunc(sorted, func(a, b driver.Lease) int { return a.Lane - b.Lane })
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		for _, l := range sorted {
			if _, err := tx.ExecContext(ctx, s.q.release, releaseParams{Lane: l.Lane, Owner: l.Owner, Generation: l.Generation}.args()...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return wrap("release lanes", err)
	}
	s.releaseLocks(ctx, sorted)
	return nil
}

// maxInlineBlocked is the most blocked keys Fetch excludes with inline conditions; beyond it
// the exclusion is a NOT EXISTS subquery per row.
const maxInlineBlocked = 64

// Fetch implements driver.RelayStore. It first reads the blocked keys of the leased lanes (a
// tiny index of the failed pending rows), then walks the pending rows in seq order, skipping
// other lanes and the blocked keys' rows from their first blocking seq on, and joins each to
// its outbox row.
func (s *Store) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	if len(p.Leases) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	lanes := make([]int, 0, len(p.Leases))
	for _, l := range p.Leases {
		lanes = append(lanes, l.Lane)
	}
	slices.Sort(lanes)
	lanes = slices.Compact(lanes)
	now := timeArg(p.Now)

	var blocked []blockedKey
	query, args := fetchBlockedParams{Lanes: lanes, Now: now}.query(s.q.fetchBlocked)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap("fetch", err)
	}
	for rows.Next() {
		var b blockedKey
		if err := rows.Scan(&b.key, &b.seq); err != nil {
			rows.Close()
			return nil, wrap("fetch", err)
		}
		blocked = append(blocked, b)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("fetch", err)
	}

	total, _ := s.LaneCount(ctx)
	query, args = s.fetchQuery(lanes, total, blocked, now, p.Limit)
	rows, err = s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap("fetch", err)
	}
	recs, err := scanRecords(rows, p.Limit)
	if err != nil {
		return nil, wrap("fetch", err)
	}
	return recs, nil
}

// blockedKey is a partition key held back from seq on.
type blockedKey struct {
	key string
	seq int64
}

// fetchQuery builds Fetch's main statement: unpublished, due, unparked rows of lanes (all
// lanes when len(lanes) == total) in seq order, without the blocked keys' rows.
func (s *Store) fetchQuery(lanes []int, total int, blocked []blockedKey, now any, limit int) (string, []any) {
	var q strings.Builder
	q.WriteString(s.q.fetchPrefix)
	args := fetchPrefixParams{Now: now}.args()
	if total == 0 || len(lanes) < total {
		text, more := fetchLanesParams{Lanes: lanes}.query(s.q.fetchLanes)
		q.WriteString(" " + text)
		args = append(args, more...)
	}
	if len(blocked) > maxInlineBlocked {
		q.WriteString(" " + s.q.fetchNotExists)
		args = append(args, fetchNotExistsParams{Now: now}.args()...)
	} else {
		for _, b := range blocked {
			q.WriteString(" " + s.q.fetchKey)
			args = append(args, fetchKeyParams{Key: b.key, Seq: b.seq}.args()...)
		}
	}
	q.WriteString(" " + s.q.fetchEnd)
	args = append(args, fetchEndParams{Limit: limit}.args()...)
	return q.String(), args
}

// Settle implements driver.RelayStore: one transaction that marks the records (the pending
// layout, migration 010: their settle log rows are written and their pending rows deleted; no
// outbox row changes) or deletes them (p.Delete: their pending rows, then their outbox rows),
// then locks the leased lane rows, checks every lease (owner, generation,
// lease_until > now) and commits only when all are held; otherwise it rolls back (nothing is marked) and returns the
// *driver.LanesLostError. The check and the commit happen under the lane locks, so a lease
// cannot change between them; marking first keeps the lane rows locked for the commit only,
// not for the marks as well: renewals, which lock every lane of the relay, and with them the
// relay's other InFlight loops, then wait for a commit instead of a whole settle.
func (s *Store) Settle(ctx context.Context, p driver.SettleParams) error {
	if len(p.Leases) == 0 {
		if len(p.Published) == 0 && len(p.Failed) == 0 {
			return nil
		}
		return fmt.Errorf("mysql: settle: records given without leases")
	}
	now := timeArg(p.Now)
	lanes := make([]int, 0, len(p.Leases))
	for _, l := range p.Leases {
		lanes = append(lanes, l.Lane)
	}
	slices.Sort(lanes)
	lanes = slices.Compact(lanes)
	var lostErr *driver.LanesLostError
	err := s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		lostErr = nil
		for start := 0; start < len(p.Published); start += 1000 {
			seqs := p.Published[start:min(start+1000, len(p.Published))]
			if p.Delete {
				if err := s.settleDeleteChunk(ctx, tx, seqs, lanes); err != nil {
					return err
				}
				continue
			}
			query, args := settlePublishParams{Now: now, Seqs: seqs, Lanes: lanes}.query(s.q.settlePublish)
			if _, err := tx.ExecContext(ctx, query, args...); err != nil {
				return err
			}
			query, args = settleUnpendParams{Seqs: seqs, Lanes: lanes}.query(s.q.settleUnpend)
			if _, err := tx.ExecContext(ctx, s.markPrefix+query, args...); err != nil {
				return err
			}
		}
		for _, f := range p.Failed {
			query, args := settleFailParams{Error: f.Error, Now: now, Delay: micros(f.Delay), Park: f.Park, Seq: f.Seq, Lanes: lanes}.query(s.q.settleFail)
			if _, err := tx.ExecContext(ctx, s.markPrefix+query, args...); err != nil {
				return err
			}
		}
		_, lost, err := s.lockLanes(ctx, tx, p.Leases, now)
		if err != nil {
			return err
		}
		if lost != nil {
			lostErr = lost.(*driver.LanesLostError)
			return lost // rolls the marks back
		}
		return nil
	})
	if lostErr != nil && errors.Is(err, lostErr) {
		var gone []driver.Lease
		for _, l := range p.Leases {
			if slices.Contains(lostErr.Lanes, l.Lane) {
				gone = append(gone, l)
			}
		}
		s.releaseLostLocks(ctx, gone) // of owners that claim with locks
		return fmt.Errorf("mysql: settle: %w", lostErr)
	}
	return wrap("settle", err)
}

// settleDeleteChunk deletes the published records' pending rows with one statement, then their
// outbox rows with @outboxkit_unpended set, so that the delete trigger skips its per-row pending
// delete; the variable is cleared again whatever the DELETE did.
func (s *Store) settleDeleteChunk(ctx context.Context, tx *sql.Tx, seqs []int64, lanes []int) (err error) {
	query, args := settleUnpendParams{Seqs: seqs, Lanes: lanes}.query(s.q.settleUnpend)
	if _, err := tx.ExecContext(ctx, s.markPrefix+query, args...); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q.unpendedOn); err != nil {
		return err
	}
	defer func() {
		if _, oerr := tx.ExecContext(context.WithoutCancel(ctx), s.q.unpendedOff); err == nil {
			err = oerr
		}
	}()
	query, args = settleDeleteParams{Seqs: seqs, Lanes: lanes}.query(s.q.settleDelete)
	_, err = tx.ExecContext(ctx, s.markPrefix+query, args...)
	return err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func queryInts(ctx context.Context, q querier, query string, args ...any) ([]int, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// queryStrings returns the first column of every row of query.
func queryStrings(ctx context.Context, q querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

func queryInt64s(ctx context.Context, q querier, query string, args ...any) ([]int64, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Ingress implements driver.IngressCounter: the highest seq committed to the outbox (0 when
// it is empty), the last entry of its primary key.
func (s *Store) Ingress(ctx context.Context) (uint64, error) {
	var v int64
	if err := s.db.QueryRowContext(ctx, s.q.ingress).Scan(&v); err != nil {
		return 0, wrap("ingress", err)
	}
	return uint64(v), nil
}
