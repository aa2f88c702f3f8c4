package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"slices"
	"strconv"
	"sync"
)

// usesLocks reports whether owner's leases are tied to GET_LOCKs: under ClaimGetLock every
// owner's are, otherwise those of an owner holding a sign of life (HoldLiveness).
func (s *Store) usesLocks(owner string) bool {
	if s.o.ClaimStrategy == ClaimGetLock {
		return true
	}
	s.lockMu.Lock()
	defer s.lockMu.Unlock()
	return s.live[owner]
}

// HoldLiveness implements driver.Liveness with the GET_LOCK machinery of ClaimGetLock, whatever
// the ClaimStrategy: until the Life is released, owner claims as under ClaimGetLock, each of
// its leases tied to a GET_LOCK held by a dedicated connection of the *sql.DB, and any claimer
// may take a lane whose lock that connection no longer holds (the server releases the locks of
// a connection that ends, e.g. when the process holding it is killed).
func (s *Store) HoldLiveness(ctx context.Context, owner string) (driver.Life, error) {
	if owner == "" {
		return nil, errors.New("mysql: hold liveness: empty owner")
	}
	lc, err := s.lockConnOf(ctx, owner) // checks that a session can be opened
	if err != nil {
		return nil, wrap("hold liveness", err)
	}
	lc.mu.Unlock()
	s.lockMu.Lock()
	s.live[owner] = true
	s.lockMu.Unlock()
	return &mysqlLife{s: s, owner: owner}, nil
}

// mysqlLife is the sign of life of one owner: the GET_LOCKs of its lock session.
type mysqlLife struct {
	s     *Store
	owner string
}

// Check implements driver.Life: the owner's lock session must be open and answer a ping.
func (l *mysqlLife) Check(ctx context.Context) error {
	lc := l.s.lockConnIfAny(l.owner)
	if lc == nil {
		return errors.New("mysql: liveness: no lock session")
	}
	defer lc.mu.Unlock()
	if err := lc.conn.PingContext(ctx); err != nil {
		return wrap("liveness: lock session", err)
	}
	return nil
}

// Release implements driver.Life: the owner claims as its ClaimStrategy says again, and its lock
// session is closed (releasing its locks) unless ClaimGetLock keeps it.
func (l *mysqlLife) Release() error {
	l.s.lockMu.Lock()
	delete(l.s.live, l.owner)
	l.s.lockMu.Unlock()
	if l.s.o.ClaimStrategy != ClaimGetLock {
		l.s.dropLockConn(l.owner)
	}
	return nil
}

var _ driver.Liveness = (*Store)(nil)

// lockConn is the dedicated session of one owner under ClaimGetLock: it holds the GET_LOCK of
// every lane the owner leases. If the session dies, the server releases its locks.
type lockConn struct {
	mu   sync.Mutex
	conn *sql.Conn
	id   int64        // CONNECTION_ID() of conn
	held map[int]bool // lanes whose lock conn holds
}

func (lc *lockConn) close() error {
	if lc.conn == nil {
		return nil
	}
	err := lc.conn.Close()
	lc.conn, lc.id, lc.held = nil, 0, map[int]bool{}
	return err
}

// lockConnOf returns the owner's lockConn, locked; the caller unlocks it. Its session is
// opened on first use and after a failure.
func (s *Store) lockConnOf(ctx context.Context, owner string) (*lockConn, error) {
	s.lockMu.Lock()
	if s.closed {
		s.lockMu.Unlock()
		return nil, errors.New("store closed")
	}
	lc := s.lockConns[owner]
	if lc == nil {
		lc = &lockConn{held: map[int]bool{}}
		s.lockConns[owner] = lc
	}
	s.lockMu.Unlock()
	lc.mu.Lock()
	if lc.conn != nil {
		// A session the server killed would report stale locks: check it is alive.
		if err := lc.conn.PingContext(ctx); err != nil {
			s.log.Warn("mysql_lock_session_lost", "owner", owner, "error", err)
			_ = lc.close()
		}
	}
	if lc.conn == nil {
		conn, err := s.db.Conn(ctx)
		if err != nil {
			lc.mu.Unlock()
			return nil, err
		}
		var id int64
		if err := conn.QueryRowContext(ctx, s.q.connectionID).Scan(&id); err != nil {
			_ = conn.Close()
			lc.mu.Unlock()
			return nil, err
		}
		lc.conn, lc.id, lc.held = conn, id, map[int]bool{}
	}
	return lc, nil
}

// lockConnIfAny returns the owner's lockConn, locked, or nil when it has no open session.
func (s *Store) lockConnIfAny(owner string) *lockConn {
	s.lockMu.Lock()
	lc := s.lockConns[owner]
	s.lockMu.Unlock()
	if lc == nil {
		return nil
	}
	lc.mu.Lock()
	if lc.conn == nil {
		lc.mu.Unlock()
		return nil
	}
	return lc
}

// dropLockConn closes the owner's lock session, releasing its locks.
func (s *Store) dropLockConn(owner string) {
	s.lockMu.Lock()
	lc := s.lockConns[owner]
	delete(s.lockConns, owner)
	s.lockMu.Unlock()
	if lc != nil {
		lc.mu.Lock()
		_ = lc.close()
		lc.mu.Unlock()
	}
}

// closeIfIdle closes a session that holds no lock: only owners holding lanes keep one open.
func (lc *lockConn) closeIfIdle() {
	if lc.conn != nil && len(lc.held) == 0 {
		_ = lc.close()
	}
}

func (s *Store) lockName(lane int) string { return s.lockPrefix + strconv.Itoa(lane) }

// tryLock takes the lane's lock without waiting. A session error closes the session.
func (s *Store) tryLock(ctx context.Context, lc *lockConn, lane int) (bool, error) {
	if lc.held[lane] {
		return true, nil
	}
	var got sql.NullInt64
	if err := lc.conn.QueryRowContext(ctx, s.q.laneLockTry, laneLockTryParams{Name: s.lockName(lane)}.args()...).Scan(&got); err != nil {
		_ = lc.close()
		return false, err
	}
	if got.Valid && got.Int64 == 1 {
		lc.held[lane] = true
		return true, nil
	}
	return false, nil
}

func (s *Store) unlock(ctx context.Context, lc *lockConn, lane int) {
	if !lc.held[lane] {
		return
	}
	delete(lc.held, lane)
	if _, err := lc.conn.ExecContext(ctx, s.q.laneLockRelease, laneLockReleaseParams{Name: s.lockName(lane)}.args()...); err != nil {
		s.log.Warn("mysql_release_lock_failed", "lane", lane, "error", err)
		_ = lc.close()
	}
}

// claimGetLock: in one READ COMMITTED transaction, lock the candidate lane rows (free,
// expired, or whose recorded lock session no longer holds the lane's lock) with SKIP LOCKED;
// for each, lowest first, take the lane's GET_LOCK on the owner's session. A lane whose lock
// is taken is claimed with lock_session set; a free or expired lane whose lock another live
// session still holds (its old holder has not noticed yet) is claimed without it; any other
// candidate is left alone.
func (s *Store) claimGetLock(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	lc, err := s.lockConnOf(ctx, p.Owner)
	if err != nil {
		return nil, wrap("claim lanes: lock session", err)
	}
	defer func() {
		lc.closeIfIdle()
		lc.mu.Unlock()
	}()
	now := timeArg(p.Now)
	var leases []driver.Lease
	var fresh []int // locks taken by this call
	err = s.inTx(ctx, readCommitted, func(tx *sql.Tx) error {
		leases = nil
		if err := s.checkGeneration(ctx, tx, p.Generation); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, s.q.claimGetLockCandidates, claimGetLockCandidatesParams{Now: now, LockPrefix: s.lockPrefix}.args()...)
		if err != nil {
			return err
		}
		type cand struct {
			lane    int
			expired bool
		}
		var cands []cand
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.lane, &c.expired); err != nil {
				rows.Close()
				return err
			}
			cands = append(cands, c)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		var withLock, without []int
		for _, c := range cands {
			if len(withLock)+len(without) >= p.Max {
				break
			}
			had := lc.held[c.lane]
			ok, err := s.tryLock(ctx, lc, c.lane)
			if err != nil {
				return fmt.Errorf("lock session: %w", err)
			}
			switch {
			case ok:
				if !had {
					fresh = append(fresh, c.lane)
				}
				withLock = append(withLock, c.lane)
			case c.expired:
				without = append(without, c.lane)
			}
		}
		if len(withLock) > 0 {
			l, err := s.takeLanes(ctx, tx, p, withLock, lc.id)
			if err != nil {
				return err
			}
			leases = append(leases, l...)
		}
		if len(without) > 0 {
			l, err := s.takeLanes(ctx, tx, p, without, nil)
			if err != nil {
				return err
			}
			leases = append(leases, l...)
		}
		return nil
	})
	if err != nil {
		if lc.conn != nil {
			for _, lane := range fresh {
				s.unlock(context.WithoutCancel(ctx), lc, lane)
			}
		}
		return nil, wrap("claim lanes", err)
	}
	slices.SortFunc(leases, func(a, b driver.Lease) int { return a.Lane - b.Lane })
	return leases, nil
}

// syncLocks, after a renewal, releases the locks of the asked leases that were not renewed
// (lost) and tries to take (and record) the locks of renewed leases claimed without one.
func (s *Store) syncLocks(ctx context.Context, asked, renewed []driver.Lease) {
	owners := map[string]bool{}
	for _, l := range asked {
		owners[l.Owner] = owners[l.Owner] || false
	}
	for _, l := range renewed {
		owners[l.Owner] = true
	}
	for owner, anyRenewed := range owners {
		if !s.usesLocks(owner) {
			continue
		}
		lc := s.lockConnIfAny(owner)
		if lc == nil && !anyRenewed {
			continue
		}
		if lc == nil {
			var err error
			if lc, err = s.lockConnOf(ctx, owner); err != nil {
				s.log.Warn("mysql_lock_session_failed", "owner", owner, "error", err)
				continue
			}
		}
		kept := map[int]bool{}
		for _, l := range renewed {
			if l.Owner != owner {
				continue
			}
			kept[l.Lane] = true
			if lc.conn == nil || lc.held[l.Lane] {
				continue
			}
			ok, err := s.tryLock(ctx, lc, l.Lane)
			if err != nil {
				s.log.Warn("mysql_lock_session_failed", "owner", owner, "error", err)
				continue
			}
			if ok {
				if _, err := s.db.ExecContext(ctx, s.q.setLockSession, setLockSessionParams{LockSession: lc.id, Lane: l.Lane, Owner: owner, Generation: l.Generation}.args()...); err != nil {
					s.log.Warn("mysql_set_lock_session_failed", "lane", l.Lane, "error", err)
				}
			}
		}
		if lc.conn != nil {
			for _, l := range asked {
				if l.Owner == owner && !kept[l.Lane] {
					s.unlock(ctx, lc, l.Lane)
				}
			}
		}
		lc.closeIfIdle()
		lc.mu.Unlock()
	}
}

// releaseLocks releases the locks of leases (released or lost).
func (s *Store) releaseLocks(ctx context.Context, leases []driver.Lease) {
	for _, l := range leases {
		lc := s.lockConnIfAny(l.Owner)
		if lc == nil {
			continue
		}
		s.unlock(context.WithoutCancel(ctx), lc, l.Lane)
		lc.closeIfIdle()
		lc.mu.Unlock()
	}
}

// releaseLostLocks releases the locks of lost leases, unless the owner holds the lane again
// under a newer lease recorded with its session (a stale Settle must not free the lock of the
// current lease).
func (s *Store) releaseLostLocks(ctx context.Context, leases []driver.Lease) {
	for _, l := range leases {
		lc := s.lockConnIfAny(l.Owner)
		if lc == nil {
			continue
		}
		var n int
		err := s.db.QueryRowContext(ctx, s.q.lockedBy, lockedByParams{Lane: l.Lane, Owner: l.Owner, LockSession: lc.id}.args()...).Scan(&n)
		if err == nil && n == 0 {
			s.unlock(context.WithoutCancel(ctx), lc, l.Lane)
			lc.closeIfIdle()
		}
		lc.mu.Unlock()
	}
}
