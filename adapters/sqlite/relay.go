package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Heartbeat implements driver.RelayStore. It registers p.Owner until now+TTL (TTL <= 0 removes
// it), forgets workers that expired at now, and returns how many are live.
func (s *Store) Heartbeat(ctx context.Context, p driver.HeartbeatParams) (int, error) {
	if p.Owner == "" {
		return 0, &core.OptionError{Field: "Owner", Reason: "required"}
	}
	now := nowMicros(p.Now)
	var live int
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if p.TTL > 0 {
			if _, err := s.exec(ctx, tx, s.q.heartbeatUpsert, heartbeatUpsertParams{Owner: p.Owner, ExpiresAt: now + p.TTL.Microseconds()}.args()...); err != nil {
				return err
			}
		} else if _, err := s.exec(ctx, tx, s.q.heartbeatDelete, heartbeatDeleteParams{Owner: p.Owner}.args()...); err != nil {
			return err
		}
		if _, err := s.exec(ctx, tx, s.q.heartbeatExpired, heartbeatExpiredParams{Now: now}.args()...); err != nil {
			return err
		}
		return s.queryRow(ctx, tx, s.q.heartbeatCount, heartbeatExpiredParams{Now: now}.args()...).Scan(&live)
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: heartbeat: %w", classify(err))
	}
	return live, nil
}

// ClaimLanes implements driver.RelayStore. The write lock taken at the start of its transaction
// makes concurrent claims run one after the other, so no lane is handed out twice, and keeps
// AcquireGeneration out between the publisher generation check and the claim.
func (s *Store) ClaimLanes(ctx context.Context, p driver.ClaimParams) ([]driver.Lease, error) {
	if p.Owner == "" {
		return nil, &core.OptionError{Field: "Owner", Reason: "required"}
	}
	if p.Max <= 0 {
		if err := s.fencedNoWork(ctx, p.Generation); err != nil {
			return nil, fmt.Errorf("sqlite: claim lanes: %w", classify(err))
		}
		return nil, nil
	}
	now := nowMicros(p.Now)
	until := now + p.TTL.Microseconds()
	var out []driver.Lease
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		if err := s.checkGeneration(ctx, tx, p.Generation); err != nil {
			return err
		}
		owned, err := s.claimOwned(ctx, tx, now)
		if err != nil {
			return err
		}
		rows, err := s.query(ctx, tx, s.q.claim, claimParams{Owner: p.Owner, LeaseUntil: until, Now: now, Max: p.Max}.args()...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			l := driver.Lease{Owner: p.Owner, Until: fromMicros(until)}
			if err := rows.Scan(&l.Lane, &l.Generation); err != nil {
				return err
			}
			l.TakenOver = owned[l.Lane]
			out = append(out, l)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: claim lanes: %w", classify(err))
	}
	slices.SortFunc(out, func(a, b driver.Lease) int { return a.Lane - b.Lane })
	return out, nil
}

// claimOwned returns the claimable lanes at now that still have an owner (expired leases), read
// in ClaimLanes' write transaction before its update.
func (s *Store) claimOwned(ctx context.Context, tx *sql.Tx, now int64) (map[int]bool, error) {
	rows, err := s.query(ctx, tx, s.q.claimOwned, heartbeatExpiredParams{Now: now}.args()...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	owned := map[int]bool{}
	for rows.Next() {
		var lane int
		if err := rows.Scan(&lane); err != nil {
			return nil, err
		}
		owned[lane] = true
	}
	return owned, rows.Err()
}

// RenewLanes implements driver.RelayStore. It checks the publisher generation in the same write
// transaction as the renewals.
func (s *Store) RenewLanes(ctx context.Context, p driver.RenewParams) ([]driver.Lease, error) {
	if len(p.Leases) == 0 {
		if err := s.fencedNoWork(ctx, p.Generation); err != nil {
			return nil, fmt.Errorf("sqlite: renew lanes: %w", classify(err))
		}
		return nil, nil
	}
	now := nowMicros(p.Now)
	until := now + p.TTL.Microseconds()
	var out []driver.Lease
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		if err := s.checkGeneration(ctx, tx, p.Generation); err != nil {
			return err
		}
		for _, l := range p.Leases {
			res, err := s.exec(ctx, tx, s.q.renew, renewParams{LeaseUntil: until, Lane: l.Lane, Owner: l.Owner, Generation: l.Generation, Now: now}.args()...)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n == 1 {
				l.Until = fromMicros(until)
				out = append(out, l)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: renew lanes: %w", classify(err))
	}
	return out, nil
}

// ReleaseLanes implements driver.RelayStore.
func (s *Store) ReleaseLanes(ctx context.Context, leases []driver.Lease) error {
	if len(leases) == 0 {
		return nil
	}
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		for _, l := range leases {
			if _, err := s.exec(ctx, tx, s.q.releaseLane, releaseLaneParams{Lane: l.Lane, Owner: l.Owner, Generation: l.Generation}.args()...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: release lanes: %w", classify(err))
	}
	return nil
}

// Fetch implements driver.RelayStore with one SELECT: it walks the queue (one narrow row per
// unpublished record, migration 0007) in seq order, joins each row's outbox record, and stops
// after p.Limit deliverable rows, probing the queue's small index of failed and parked rows for
// per-key blocking.
func (s *Store) Fetch(ctx context.Context, p driver.FetchParams) ([]driver.Record, error) {
	if len(p.Leases) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	lanes := make([]int, len(p.Leases))
	for i, l := range p.Leases {
		lanes[i] = l.Lane
	}
	rows, err := s.dbQuery(ctx, s.q.fetch, fetchParams{Lanes: intList(lanes), Now: nowMicros(p.Now), Limit: p.Limit}.args()...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch: %w", classify(err))
	}
	recs, err := scanRecords(rows, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: fetch: %w", classify(err))
	}
	return recs, nil
}

// Settle implements driver.RelayStore: one transaction, holding the write lock from its first
// statement, that checks every lease and then marks all published seqs (their publication rows
// written and their queue rows deleted, two statements; or, with p.Delete, their outbox rows
// deleted, which takes their queue rows with them) and records all failures in the queue rows
// with one more. No outbox row is updated.
func (s *Store) Settle(ctx context.Context, p driver.SettleParams) error {
	if len(p.Leases) == 0 {
		if len(p.Published) == 0 && len(p.Failed) == 0 {
			return nil
		}
		return fmt.Errorf("sqlite: settle: records given without leases")
	}
	now := nowMicros(p.Now)
	lanes := make([]int, len(p.Leases))
	for i, l := range p.Leases {
		lanes[i] = l.Lane
	}
	laneList := intList(lanes)
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		if err := s.checkLeases(ctx, tx, p.Leases, laneList, now); err != nil {
			return err
		}
		if len(p.Published) > 0 {
			seqs := int64List(p.Published)
			var err error
			if p.Delete {
				_, err = s.exec(ctx, tx, s.q.deletePublished, publishDequeueParams{Seqs: seqs, Lanes: laneList}.args()...)
			} else if _, err = s.exec(ctx, tx, s.q.publish, publishParams{Now: now, Seqs: seqs, Lanes: laneList}.args()...); err == nil {
				_, err = s.exec(ctx, tx, s.q.publishDequeue, publishDequeueParams{Seqs: seqs, Lanes: laneList}.args()...)
			}
			if err != nil {
				return err
			}
		}
		if len(p.Failed) > 0 {
			list, err := failureList(p.Failed)
			if err != nil {
				return err
			}
			if _, err := s.exec(ctx, tx, s.q.fail, failParams{Now: now, Failures: list, Lanes: laneList}.args()...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: settle: %w", classify(err))
	}
	return nil
}

// checkLeases returns a *driver.LanesLostError naming every lease not held at now.
func (s *Store) checkLeases(ctx context.Context, tx *sql.Tx, leases []driver.Lease, laneList string, now int64) error {
	cur := make(map[int]driver.Lease, len(leases))
	rows, err := s.query(ctx, tx, s.q.leaseState, leaseStateParams{Lanes: laneList}.args()...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var st driver.Lease
		var until int64
		if err := rows.Scan(&st.Lane, &st.Owner, &st.Generation, &until); err != nil {
			return err
		}
		st.Until = fromMicros(until)
		cur[st.Lane] = st
	}
	if err := rows.Err(); err != nil {
		return err
	}
	at := fromMicros(now)
	return driver.CheckLeases(leases, func(l driver.Lease) bool { return l.HeldAt(cur[l.Lane], at) })
}

func intList(v []int) string {
	var b strings.Builder
	b.Grow(len(v)*4 + 2)
	b.WriteByte('[')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(x))
	}
	b.WriteByte(']')
	return b.String()
}

func int64List(v []int64) string {
	var b strings.Builder
	b.Grow(len(v)*8 + 2)
	b.WriteByte('[')
	for i, x := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	b.WriteByte(']')
	return b.String()
}

type failureJSON struct {
	Seq   int64  `json:"s"`
	Delay int64  `json:"d"` // microseconds
	Park  int    `json:"p"`
	Error string `json:"e"`
}

func failureList(fs []driver.Failure) (string, error) {
	out := make([]failureJSON, len(fs))
	for i, f := range fs {
		out[i] = failureJSON{Seq: f.Seq, Delay: max(f.Delay.Microseconds(), 0), Error: f.Error}
		if f.Park {
			out[i].Park = 1
		}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func scanRecords(rows *sql.Rows, capHint int) ([]driver.Record, error) {
	defer rows.Close()
	out := make([]driver.Record, 0, min(capHint, 1024))
	for rows.Next() {
		var (
			r                       driver.Record
			payload                 []byte
			headers                 sql.NullString
			created                 int64
			published, next, parked sql.NullInt64
		)
		if err := rows.Scan(&r.Seq, &r.ID, &r.AggregateType, &r.AggregateID, &r.AggregateVersion,
			&r.Type, &r.SchemaID, &r.PartitionKey, &r.Destination, &payload, &headers, &r.Tenant,
			&r.CausationID, &r.CorrelationID, &r.Lane, &created, &published, &r.Attempts, &next,
			&r.LastError, &parked); err != nil {
			return nil, err
		}
		if len(payload) > 0 {
			r.Payload = payload
		}
		h, err := decodeHeaders(headers)
		if err != nil {
			return nil, fmt.Errorf("seq %d: headers: %w", r.Seq, err)
		}
		r.Headers = h
		r.CreatedAt = fromMicros(created)
		r.PublishedAt = fromNullMicros(published)
		r.NextAttemptAt = fromNullMicros(next)
		r.ParkedAt = fromNullMicros(parked)
		out = append(out, r)
	}
	return out, rows.Err()
}

// Ingress implements driver.IngressCounter: the highest seq committed to the outbox (0 when
// it is empty), the last entry of its primary key.
func (s *Store) Ingress(ctx context.Context) (uint64, error) {
	var v int64
	if err := s.db.QueryRowContext(ctx, s.q.ingress).Scan(&v); err != nil {
		return 0, fmt.Errorf("sqlite: ingress: %w", classify(err))
	}
	return uint64(v), nil
}
