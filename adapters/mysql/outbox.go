package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Insert statements are split so that none exceeds these bounds (placeholders and
// max_allowed_packet, 16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const (
	insertMaxRows  = 500
	insertMaxBytes = 4 << 20
)

// Insert implements core.OutboxStore: a multi-row INSERT in tx. When the records need more
// than one statement a savepoint makes the call all or nothing. A duplicate ID (or, with
// UniqueAggregateVersion, a duplicate aggregate version) wraps core.ErrDuplicateEvent.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []core.Record) error {
	if tx == nil {
		return fmt.Errorf("mysql: insert: %w: nil transaction", core.ErrInvalidTx)
	}
	if len(records) == 0 {
		return nil
	}
	var chunks [][]core.Record
	start, size := 0, 0
	for i := range records {
		n := len(records[i].Payload) + 512
		for k, v := range records[i].Headers {
			n += len(k) + len(v) + 8
		}
		if i > start && (i-start >= insertMaxRows || size+n > insertMaxBytes) {
			chunks = append(chunks, records[start:i])
			start, size = i, 0
		}
		size += n
	}
	chunks = append(chunks, records[start:])
	if len(chunks) == 1 {
		return s.insertChunk(ctx, tx, chunks[0])
	}
	if _, err := tx.ExecContext(ctx, "SAVEPOINT outboxkit_insert"); err != nil {
		return wrap("insert", err)
	}
	for _, c := range chunks {
		if err := s.insertChunk(ctx, tx, c); err != nil {
			if _, rerr := tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT outboxkit_insert"); rerr != nil {
				return fmt.Errorf("%w (and rolling back to the savepoint failed: %v)", err, rerr)
			}
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT outboxkit_insert"); err != nil {
		return wrap("insert", err)
	}
	return nil
}

func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, recs []core.Record) error {
	var b strings.Builder
	b.WriteString(s.q.insertPrefix)
	args := make([]any, 0, 14*len(recs))
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.q.insertRow)
		headers := "{}"
		if len(r.Headers) > 0 {
			h, err := json.Marshal(r.Headers)
			if err != nil {
				return fmt.Errorf("mysql: insert: headers: %w", err)
			}
			headers = string(h)
		}
		payload := r.Payload
		if payload == nil {
			payload = []byte{}
		}
		args = append(args, r.ID, r.AggregateType, r.AggregateID, r.AggregateVersion, r.Type, r.SchemaID,
			r.PartitionKey, r.Destination, payload, headers, r.Tenant, r.CausationID, r.CorrelationID, r.Lane)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("mysql: insert: %w", classify(duplicate(err)))
	}
	return nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanRecord(sc scanner) (core.Record, error) {
	var r core.Record
	var headers string
	var published, next, parked sql.NullTime
	var lastErr sql.NullString
	if err := sc.Scan(&r.Seq, &r.ID, &r.AggregateType, &r.AggregateID, &r.AggregateVersion, &r.Type,
		&r.SchemaID, &r.PartitionKey, &r.Destination, &r.Payload, &headers, &r.Tenant, &r.CausationID,
		&r.CorrelationID, &r.Lane, &r.CreatedAt, &published, &r.Attempts, &next, &lastErr, &parked); err != nil {
		return core.Record{}, err
	}
	var err error
	if r.Headers, err = decodeHeaders(headers); err != nil {
		return core.Record{}, fmt.Errorf("headers of seq %d: %w", r.Seq, err)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	r.PublishedAt = nullTime(published)
	r.NextAttemptAt = nullTime(next)
	r.ParkedAt = nullTime(parked)
	r.LastError = lastErr.String
	return r, nil
}

func nullTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// scanRecords reads rows; capacity is how many records are expected (the fetch's limit).
func scanRecords(rows *sql.Rows, capacity int) ([]core.Record, error) {
	defer rows.Close()
	out := make([]core.Record, 0, capacity)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// LaneCount returns the lane count recorded by Migrate.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	if n := s.lanes.Load(); n > 0 {
		return int(n), nil
	}
	var v string
	if err := s.db.QueryRowContext(ctx, s.q.laneCount).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("mysql: lane count: %w: outbox %s is not migrated", core.ErrSchemaMismatch, s.names.outbox)
		}
		return 0, wrap("lane count", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > core.MaxLanes {
		return 0, fmt.Errorf("mysql: lane count: %w: recorded value %q", core.ErrSchemaMismatch, v)
	}
	s.lanes.Store(int64(n))
	return n, nil
}
