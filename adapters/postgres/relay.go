package postgres

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/adapters/postgres/internal/backend"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Heartbeat registers p.Owner until now+TTL (TTL <= 0 removes it) and returns the number of live
// workers, the caller included when TTL > 0. One statement.
func (s *Store[TTx]) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
	var live int64
	var err error
	if p.TTL > 0 {
		err = queryRow(ctx, s.db, s.q.heartbeat, heartbeatParams{Owner: p.Owner, Now: tsIn(p.Now), TTL: p.TTL.Microseconds()}.args(), &live)
	} else {
		err = queryRow(ctx, s.db, s.q.heartbeatLeave, heartbeatLeaveParams{Owner: p.Owner, Now: tsIn(p.Now)}.args(), &live)
	}
	if err != nil {
		return 0, fmt.Errorf("postgres: heartbeat: %w", classify(err))
	}
	return int(live), nil
}

// ClaimLanes takes up to p.Max free or expired lanes, lowest first, with the configured
// ClaimStrategy. One statement, which first locks the publisher row FOR SHARE: when
// p.Generation is not the current publisher generation it claims nothing and returns an error
// wrapping core.ErrFenced.
func (s *Store[TTx]) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	if p.Max <= 0 {
		return nil, nil
	}
	if p.Owner == "" {
		return nil, fmt.Errorf("postgres: claim lanes: empty owner")
	}
	var livePID *int32
	if pid, ok := s.live.Load(p.Owner); ok {
		v := pid.(int32)
		livePID = &v
	}
	claim := claimSkipLockedParams{
		Owner: p.Owner, Now: tsIn(p.Now), TTL: p.TTL.Microseconds(), Max: p.Max, Generation: p.Generation,
		LiveClass: s.n.liveKey, LivePID: livePID,
	}
	sql, args := s.q.claimSkipLocked, claim.args()
	if s.o.ClaimStrategy == ClaimAdvisoryLock {
		sql, args = s.q.claimAdvisory, claimAdvisoryParams{claimSkipLockedParams: claim, ClaimClass: s.n.lockKey}.args()
	}
	leases, err := s.leases(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: claim lanes: %w", classify(err))
	}
	return leases, nil
}

// RenewLanes extends the leases still held. One statement, fenced by p.Generation as
// ClaimLanes is: a stale generation renews nothing and gets an error wrapping core.ErrFenced.
func (s *Store[TTx]) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	if len(p.Leases) == 0 {
		return nil, nil
	}
	lanes, owners, gens := leaseArrays(p.Leases)
	leases, err := s.leases(ctx, s.q.renew, renewParams{
		Lanes: lanes, Owners: owners, Generations: gens, Now: tsIn(p.Now), Generation: p.Generation, TTL: p.TTL.Microseconds(),
	}.args()...)
	if err != nil {
		return nil, fmt.Errorf("postgres: renew lanes: %w", classify(err))
	}
	return leases, nil
}

// ReleaseLanes frees the leases still held. One statement.
func (s *Store[TTx]) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	lanes, owners, gens := leaseArrays(leases)
	if _, err := s.db.exec(ctx, s.q.release, releaseParams{Lanes: lanes, Owners: owners, Generations: gens}.args()...); err != nil {
		return fmt.Errorf("postgres: release lanes: %w", classify(err))
	}
	return nil
}

// leases runs a fenced claim or renewal: rows of (lane, owner, generation, lease_until,
// fenced).
func (s *Store[TTx]) leases(ctx context.Context, sql string, args ...any) ([]driver.Lease, error) {
	r, err := s.db.query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []driver.Lease
	isFenced := false
	for r.Next() {
		var l driver.Lease
		var lane int64
		var fenced bool
		if err := r.Scan(&lane, &l.Owner, &l.Generation, &l.Until, &l.TakenOver, &fenced); err != nil {
			return nil, err
		}
		if fenced {
			isFenced = true
			continue
		}
		l.Lane, l.Until = int(lane), l.Until.UTC()
		out = append(out, l)
	}
	r.Close()
	if err := r.Err(); err != nil {
		return nil, err
	}
	if isFenced {
		return nil, core.ErrFenced
	}
	slices.SortFunc(out, func(a, b driver.Lease) int { return a.Lane - b.Lane })
	return out, nil
}

func leaseArrays(leases []driver.Lease) (lanes []int32, owners []string, gens []int64) {
	lanes, owners, gens = make([]int32, len(leases)), make([]string, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		lanes[i], owners[i], gens[i] = int32(l.Lane), l.Owner, l.Generation
	}
	return lanes, owners, gens
}

// Fetch returns up to p.Limit deliverable records of the leased lanes in seq order. One
// statement: the pending table's walk and a lookup of each record.
func (s *Store[TTx]) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	if len(p.Leases) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	lanes, _, _ := leaseArrays(p.Leases)
	r, err := s.db.query(ctx, s.q.fetch, fetchParams{Lanes: lanes, Now: tsIn(p.Now), Limit: p.Limit}.args()...)
	recs, err := scanRecords(r, err, min(p.Limit, max(fetchPrealloc, int(s.fetched.Load()))))
	if err != nil {
		return nil, fmt.Errorf("postgres: fetch: %w", classify(err))
	}
	// The statement returns them in the walk's order (a nested loop keeps its outer side's
	// order), which SQL does not promise: sort them should a plan ever differ.
	bySeq := func(a, b driver.Record) int { return cmp.Compare(a.Seq, b.Seq) }
	if !slices.IsSortedFunc(recs, bySeq) {
		slices.SortFunc(recs, bySeq)
	}
	s.fetched.Store(int64(len(recs)))
	return recs, nil
}

// fetchPrealloc is the least room for records Fetch allocates before it reads them; it
// allocates room for as many as the last fetch returned when that was more (a drain's full
// batches then fill their slice without copying it). Room for a whole batch on every fetch made
// each wake-up's fetch of one record allocate ~400 KiB: garbage collection then raised the
// commit-to-publish p99 by ~1.5 ms (BENCHMARKS.md, "Commit-to-publish latency").
const fetchPrealloc = 64

// Settle checks every lease and records the outcomes in one statement (one round trip, one
// transaction). A lease not held returns *driver.LanesLostError and changes nothing.
func (s *Store[TTx]) Settle(ctx context.Context, p driver.SettleParams) error {
	if len(p.Leases) == 0 {
		return nil
	}
	lanes, owners, gens := leaseArrays(p.Leases)
	pub := p.Published
	if pub == nil {
		pub = []int64{}
	}
	n := len(p.Failed)
	fSeq, fErr, fDelay, fPark := make([]int64, n), make([]string, n), make([]int64, n), make([]bool, n)
	for i, f := range p.Failed {
		fSeq[i], fErr[i], fDelay[i], fPark[i] = f.Seq, f.Error, max(f.Delay, 0).Microseconds(), f.Park
	}
	sql := s.q.settleMark
	if p.Delete {
		sql = s.q.settleDelete
	}
	r, err := s.db.query(ctx, sql, settleMarkParams{
		Lanes: lanes, Owners: owners, Generations: gens, Now: tsIn(p.Now), Published: pub,
		Failed: fSeq, Errors: fErr, Delays: fDelay, Park: fPark, Async: s.o.AsyncSettle,
	}.args()...)
	if err != nil {
		return fmt.Errorf("postgres: settle: %w", classify(err))
	}
	var lost []int
	for r.Next() {
		var lane int64
		if err := r.Scan(&lane); err != nil {
			r.Close()
			return fmt.Errorf("postgres: settle: %w", classify(err))
		}
		lost = append(lost, int(lane))
	}
	r.Close()
	if err := r.Err(); err != nil {
		return fmt.Errorf("postgres: settle: %w", classify(err))
	}
	if len(lost) > 0 {
		return &driver.LanesLostError{Lanes: lost}
	}
	return nil
}

// HoldLiveness implements driver.Liveness: it opens a connection of its own (with the settings of
// the pool or database, outside it) and takes a session-level advisory lock of this outbox's
// liveness class keyed by the connection's server process id. ClaimLanes of owner then records
// that process id with each lease it takes, and any claimer may take the lane once no session
// holds the lock (the server releases it when the connection ends, e.g. when the process holding
// it is killed). A transaction-pooling proxy does not keep a session per client connection:
// through a pooler (see ErrPooledConnection) it fails with an error wrapping
// ErrPooledConnection before it takes the lock, unless Options.PoolerKeepsSessions is set.
func (s *Store[TTx]) HoldLiveness(ctx context.Context, owner string) (driver.Life, error) {
	if owner == "" {
		return nil, fmt.Errorf("postgres: hold liveness: empty owner")
	}
	cfg, err := s.connConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: hold liveness: connection settings: %w", err)
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: hold liveness: %w", err)
	}
	session, err := s.sessionPID(ctx, conn)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("postgres: hold liveness: %w", err)
	}
	res, err := conn.Exec(ctx, fmt.Sprintf(`SELECT pg_backend_pid(), pg_try_advisory_lock(%d, pg_backend_pid())`, s.n.liveKey)).ReadAll()
	var pid int64
	if err == nil && (len(res) != 1 || len(res[0].Rows) != 1) {
		err = errors.New("unexpected result")
	}
	if err == nil {
		row := res[0].Rows[0]
		pid, err = strconv.ParseInt(string(row[0]), 10, 32)
		switch {
		case err != nil:
		case uint32(pid) != session:
			// The lock went to another server process: unlock it there (the statement may run
			// anywhere again, so the lock may stay until that process ends; no lease names it).
			_, _ = conn.Exec(ctx, fmt.Sprintf(`SELECT pg_advisory_unlock(%d, %d)`, s.n.liveKey, pid)).ReadAll()
			err = movedError(session, uint32(pid))
		case string(row[1]) != "t":
			err = fmt.Errorf("the lock of server process %d is held", pid)
		}
	}
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("postgres: hold liveness: %w", err)
	}
	s.live.Store(owner, int32(pid))
	return &pgLife{forget: func() { s.live.CompareAndDelete(owner, int32(pid)) }, conn: conn, pid: uint32(pid)}, nil
}

// pgLife is a held sign of life: the connection holding the advisory lock.
type pgLife struct {
	forget func()
	mu     sync.Mutex
	conn   *pgconn.PgConn
	pid    uint32 // the server process holding the lock
}

// Check implements driver.Life: a round trip on the lock's connection, which must still run in
// the server process holding the lock (it would not through a transaction pooler).
func (l *pgLife) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return errors.New("postgres: liveness released")
	}
	pid, err := backend.PID(ctx, l.conn)
	if err != nil {
		return fmt.Errorf("postgres: liveness session: %w", err)
	}
	if pid != l.pid {
		return fmt.Errorf("postgres: liveness session: %w", movedError(l.pid, pid))
	}
	return nil
}

// Release implements driver.Life: it closes the lock's connection.
func (l *pgLife) Release() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return nil
	}
	l.forget()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := l.conn.Close(ctx)
	l.conn = nil
	return err
}

var (
	_ driver.Liveness = (*Store[pgx.Tx])(nil)
	_ driver.Liveness = (*Store[*sql.Tx])(nil)
)

// Ingress implements driver.IngressCounter: the highest seq committed to the outbox (0 when
// it is empty), read from the end of its primary key (of each partition when partitioned).
func (s *Store[TTx]) Ingress(ctx context.Context) (uint64, error) {
	var v int64
	if err := queryRow(ctx, s.db, s.q.ingress, nil, &v); err != nil {
		return 0, fmt.Errorf("postgres: ingress: %w", classify(err))
	}
	return uint64(v), nil
}
