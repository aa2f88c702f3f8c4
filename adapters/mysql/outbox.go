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

	"github.com/outboxkit/outbox/adapters/mysql/internal/bridge"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Insert statements are split so that none exceeds these bounds (placeholders and
// max_allowed_packet, 16 MiB by default on MariaDB, 64 MiB on MySQL 8).
const (
	insertMaxRows  = 500
	insertMaxBytes = 4 << 20
)

// Insert implements driver.OutboxStore: a multi-row INSERT in tx. When the records need more
// than one statement a savepoint makes the call all or nothing. A duplicate ID (or, with
// UniqueAggregateVersion, a duplicate aggregate version) wraps core.ErrDuplicateEvent. It does
// not check the records' lanes against the lane count: core.Outbox uses InsertLanes.
func (s *Store) Insert(ctx context.Context, tx *sql.Tx, records []driver.Record) error {
	if err := nilTx("insert", tx); err != nil {
		return err
	}
	if len(records) == 0 {
		return nil
	}
	var chunks [][]driver.Record
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

// InsertLanes implements driver.LaneInserter: Insert checked against the lane count lanes the
// records' lanes were computed with. When the recorded count is not lanes it writes nothing and
// returns an error wrapping core.ErrLaneCountChanged; tx stays usable. The count is read with a
// locking read (LOCK IN SHARE MODE), the latest committed count whatever tx's isolation or
// snapshot, and its shared lock lasts until tx ends: a ResizeLanes, which locks the count FOR
// UPDATE first, waits for tx, and tx's later checked inserts wait for a resize in progress. One
// record is one statement (INSERT ... VALUES whose lane is NULL, refused, when the count
// differs); more are the locking read, then Insert.
func (s *Store) InsertLanes(ctx context.Context, tx *sql.Tx, lanes int, records []driver.Record) error {
	if err := nilTx("insert", tx); err != nil {
		return err
	}
	if len(records) == 0 {
		return nil
	}
	if len(records) > 1 {
		n, err := s.readLanes(ctx, tx, s.q.laneCountShared)
		if err != nil {
			return fmt.Errorf("mysql: insert: lane count: %w", classify(err))
		}
		if n != lanes {
			return fmt.Errorf("mysql: insert: %w: lanes computed with %d lanes, the outbox has %d", core.ErrLaneCountChanged, lanes, n)
		}
		return s.Insert(ctx, tx, records)
	}
	row, err := recordRow(&records[0])
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, s.q.insertChecked, insertCheckedParams{insertRowParams: row, LaneCount: strconv.Itoa(lanes)}.args()...); err != nil {
		if errNumber(err) == errBadNull && strings.Contains(err.Error(), "'lane'") { // the count is not lanes
			return fmt.Errorf("mysql: insert: %w: lanes computed with %d lanes", core.ErrLaneCountChanged, lanes)
		}
		return fmt.Errorf("mysql: insert: %w", classify(duplicate(err)))
	}
	return nil
}

// recordRow returns the insert parameters of r.
func recordRow(r *driver.Record) (insertRowParams, error) {
	headers := "{}"
	if len(r.Headers) > 0 {
		h, err := json.Marshal(r.Headers)
		if err != nil {
			return insertRowParams{}, fmt.Errorf("mysql: insert: headers: %w", err)
		}
		headers = string(h)
	}
	payload := r.Payload
	if payload == nil {
		payload = []byte{}
	}
	return insertRowParams{ID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		AggregateVersion: r.AggregateVersion, Type: r.Type, SchemaID: r.SchemaID, PartitionKey: r.PartitionKey,
		Destination: r.Destination, Payload: payload, Headers: headers, Tenant: r.Tenant,
		CausationID: r.CausationID, CorrelationID: r.CorrelationID, Lane: r.Lane}, nil
}

func (s *Store) insertChunk(ctx context.Context, tx *sql.Tx, recs []driver.Record) error {
	var b strings.Builder
	b.WriteString(s.q.insertPrefix)
	args := make([]any, 0, 14*len(recs))
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s.q.insertRow)
		row, err := recordRow(r)
		if err != nil {
			return err
		}
		args = append(args, row.args()...)
	}
	if _, err := tx.ExecContext(ctx, b.String(), args...); err != nil {
		return fmt.Errorf("mysql: insert: %w", classify(duplicate(err)))
	}
	return nil
}

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

func scanRecord(sc scanner) (driver.Record, error) {
	var r driver.Record
	var headers string
	var published, next, parked sql.NullTime
	var lastErr sql.NullString
	if err := sc.Scan(&r.Seq, &r.ID, &r.AggregateType, &r.AggregateID, &r.AggregateVersion, &r.Type,
		&r.SchemaID, &r.PartitionKey, &r.Destination, &r.Payload, &headers, &r.Tenant, &r.CausationID,
		&r.CorrelationID, &r.Lane, &r.CreatedAt, &published, &r.Attempts, &next, &lastErr, &parked); err != nil {
		return driver.Record{}, err
	}
	var err error
	if r.Headers, err = bridge.DecodeHeaders(headers); err != nil {
		return driver.Record{}, fmt.Errorf("headers of seq %d: %w", r.Seq, err)
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
func scanRecords(rows *sql.Rows, capacity int) ([]driver.Record, error) {
	defer rows.Close()
	out := make([]driver.Record, 0, capacity)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// LaneCount returns the lane count recorded by Migrate (or by ResizeLanes), read afresh at each
// call: writers and relays pick a resize up through it.
func (s *Store) LaneCount(ctx context.Context) (int, error) {
	var v string
	if err := s.db.QueryRowContext(ctx, s.q.laneCount).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, fmt.Errorf("mysql: lane count: %w", s.notMigrated("no lane count recorded"))
		}
		return 0, wrap("lane count", err)
	}
	return parseLanes(v)
}

// parseLanes checks a recorded lane count.
func parseLanes(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > core.MaxLanes {
		return 0, fmt.Errorf("mysql: lane count: %w: recorded value %q", core.ErrSchemaMismatch, v)
	}
	return n, nil
}

// readLanes reads the recorded lane count with query (LaneCountShared or LaneCountLocked) in tx.
func (s *Store) readLanes(ctx context.Context, tx *sql.Tx, query string) (int, error) {
	var v string
	if err := tx.QueryRowContext(ctx, query).Scan(&v); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return 0, s.notMigrated("no lane count recorded")
		}
		return 0, err
	}
	return parseLanes(v)
}
