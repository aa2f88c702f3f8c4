package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Insert appends records in tx with one statement (all or nothing). A duplicate ID (or, with
// UniqueAggregateVersion, a duplicate entity version) returns an error wrapping
// core.ErrDuplicateEvent. As with any failed statement, PostgreSQL then aborts tx. It does not
// check the records' lanes against the lane count: core.Outbox uses InsertLanes.
func (s *Store[TTx]) Insert(ctx context.Context, tx TTx, records []driver.Record) error {
	return s.insert(ctx, tx, 0, records)
}

// InsertLanes implements driver.LaneInserter: Insert in the same one statement, which inserts
// nothing and returns an error wrapping core.ErrLaneCountChanged (tx stays usable) when the
// recorded lane count is not lanes. The insert's table lock (ROW EXCLUSIVE, until tx ends)
// makes a ResizeLanes wait for tx and tx's later inserts wait for a resize, and the count is
// read after it: under READ COMMITTED the committed count; under REPEATABLE READ or
// SERIALIZABLE with the row locked FOR SHARE, so that a tx whose snapshot is older than a
// resize fails with a serialization error (SQLSTATE 40001: roll back and retry). On an outbox not yet migrated by
// this version (migration 0007, which ResizeLanes needs as well) it is Insert.
func (s *Store[TTx]) InsertLanes(ctx context.Context, tx TTx, lanes int, records []driver.Record) error {
	if !s.checked.Load() {
		lanes = 0
	}
	return s.insert(ctx, tx, lanes, records)
}

// insert is Insert, checked against the lane count lanes unless it is 0.
func (s *Store[TTx]) insert(ctx context.Context, tx TTx, lanes int, records []driver.Record) error {
	if isNilTx(tx) {
		return fmt.Errorf("postgres: insert: %w: nil transaction", core.ErrInvalidTx)
	}
	if len(records) == 0 {
		return nil
	}
	// The Store's database, once LaneCount has run (core.NewOutbox runs it before any Write);
	// nil (NULL) checks nothing. Learning it here, outside tx, could wait forever on a pool of one.
	database := s.database.Load()
	var stmt string
	var args []any
	if len(records) == 1 && s.q.insertOne != "" {
		// One record: the same statement with scalar parameters (cheaper than one-element arrays).
		r := &records[0]
		h, err := headersJSON(r.Headers)
		if err != nil {
			return err
		}
		one := insertOneParams{
			ID: r.ID, AggregateType: r.AggregateType, AggregateID: r.AggregateID, AggregateVersion: r.AggregateVersion,
			Type: r.Type, SchemaID: r.SchemaID, PartitionKey: r.PartitionKey, Destination: r.Destination,
			Payload: payloadCol(r.Payload), Headers: h, Tenant: r.Tenant, CausationID: r.CausationID,
			CorrelationID: r.CorrelationID, Lane: int32(r.Lane), Database: database,
		}
		stmt, args = s.q.insertOne, one.args()
		if lanes > 0 {
			stmt, args = s.q.insertOneChecked, insertOneCheckedParams{insertOneParams: one, LaneCount: strconv.Itoa(lanes)}.args()
		}
	} else {
		n := len(records)
		many := insertParams{
			IDs: make([]string, n), AggregateTypes: make([]string, n), AggregateIDs: make([]string, n),
			AggregateVersions: make([]int64, n), Types: make([]string, n), SchemaIDs: make([]string, n),
			PartitionKeys: make([]string, n), Destinations: make([]string, n), Payloads: make([][]byte, n),
			Headers: make([]string, n), Tenants: make([]string, n), CausationIDs: make([]string, n),
			CorrelationIDs: make([]string, n), Lanes: make([]int32, n), Database: database,
		}
		for i := range records {
			r := &records[i]
			many.IDs[i], many.AggregateTypes[i], many.AggregateIDs[i] = r.ID, r.AggregateType, r.AggregateID
			many.AggregateVersions[i], many.Types[i], many.SchemaIDs[i] = r.AggregateVersion, r.Type, r.SchemaID
			many.PartitionKeys[i], many.Destinations[i], many.Payloads[i] = r.PartitionKey, r.Destination, payloadCol(r.Payload)
			many.Tenants[i], many.CausationIDs[i], many.CorrelationIDs[i] = r.Tenant, r.CausationID, r.CorrelationID
			many.Lanes[i] = int32(r.Lane)
			h, err := headersJSON(r.Headers)
			if err != nil {
				return err
			}
			many.Headers[i] = h
		}
		stmt, args = s.q.insert, many.args()
		if lanes > 0 {
			stmt, args = s.q.insertChecked, insertCheckedParams{insertParams: many, LaneCount: strconv.Itoa(lanes)}.args()
		}
	}
	q := s.txq(tx)
	got, err := q.exec(ctx, stmt, args...)
	if err != nil {
		if pe := pgError(err); pe != nil && pe.Code == "23505" {
			return fmt.Errorf("postgres: insert: %w: %s (%w)", core.ErrDuplicateEvent, pe.ConstraintName, err)
		}
		return fmt.Errorf("postgres: insert: %w", classify(err))
	}
	if got == 0 { // nothing inserted: another database, or (checked) another lane count
		var in string
		if err := queryRow(ctx, q, s.q.currentDatabase, nil, &in); err != nil {
			return fmt.Errorf("postgres: insert: %w", classify(err))
		}
		if database != nil && in != *database {
			return fmt.Errorf("postgres: insert: %w: the transaction is on database %q, the store on %q", core.ErrInvalidTx, in, *database)
		}
		return fmt.Errorf("postgres: insert: %w: lanes computed with %d lanes", core.ErrLaneCountChanged, lanes)
	}
	return nil
}

// payloadCol is a record's payload as the NOT NULL payload column takes it.
func payloadCol(p []byte) []byte {
	if p == nil {
		return []byte{}
	}
	return p
}

// headersJSON is a record's headers as the headers column takes them ("{}" for none).
func headersJSON(h map[string]string) (string, error) {
	if len(h) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", fmt.Errorf("postgres: insert: headers: %w", classify(err))
	}
	return string(b), nil
}

// recordScanner decodes rows of recordCols. Its scan targets are allocated once, not once per
// row (each target passed to Scan escapes to the heap): a fetch of 1,000 records made ten
// allocations a row for them. Each record gets its own strings and payload (pgx copies them out
// of the row's buffer), so records outlive the scanner.
type recordScanner struct {
	rec               driver.Record
	headers           string
	created           time.Time
	pub, next, parked pgtype.Timestamptz
	lane, attempts    int64
	payload           []byte
	dest              []any
}

func newRecordScanner() *recordScanner {
	s := &recordScanner{}
	s.dest = []any{&s.rec.Seq, &s.rec.ID, &s.rec.AggregateType, &s.rec.AggregateID, &s.rec.AggregateVersion,
		&s.rec.Type, &s.rec.SchemaID, &s.rec.PartitionKey, &s.rec.Destination, &s.payload, &s.headers,
		&s.rec.Tenant, &s.rec.CausationID, &s.rec.CorrelationID, &s.lane, &s.created, &s.pub, &s.attempts, &s.next,
		&s.rec.LastError, &s.parked}
	return s
}

// scan reads the current row into *rec (which it overwrites).
func (s *recordScanner) scan(r rows, rec *driver.Record) error {
	s.rec, s.headers, s.payload = driver.Record{}, "", nil
	if err := r.Scan(s.dest...); err != nil {
		return err
	}
	if len(s.payload) > 0 {
		s.rec.Payload = s.payload
	}
	if s.headers != "" && s.headers != "{}" {
		if err := json.Unmarshal([]byte(s.headers), &s.rec.Headers); err != nil {
			return fmt.Errorf("headers of seq %d: %w", s.rec.Seq, err)
		}
	}
	s.rec.Lane, s.rec.Attempts = int(s.lane), int(s.attempts)
	s.rec.CreatedAt = s.created.UTC()
	s.rec.PublishedAt, s.rec.NextAttemptAt, s.rec.ParkedAt = tsOut(s.pub), tsOut(s.next), tsOut(s.parked)
	*rec = s.rec
	return nil
}

// scanRecords reads every row of recordCols; size is the expected count (0: unknown).
func scanRecords(r rows, err error, size int) ([]driver.Record, error) {
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := make([]driver.Record, 0, size)
	sc := newRecordScanner()
	for r.Next() {
		out = append(out, driver.Record{})
		if err := sc.scan(r, &out[len(out)-1]); err != nil {
			return nil, err
		}
	}
	r.Close()
	return out, r.Err()
}

// tsIn is a time parameter: nil (NULL, the database clock) for the zero time, else the time cut
// to microseconds (what PostgreSQL stores) in UTC.
func tsIn(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.Truncate(time.Microsecond).UTC()
}

func tsOut(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

// LaneCount returns the lane count recorded by Migrate (or by the last ResizeLanes), read from
// the database at every call.
func (s *Store[TTx]) LaneCount(ctx context.Context) (int, error) {
	var v, database string
	var checked bool
	if err := queryRow(ctx, s.db, s.q.laneCountChecked, nil, &v, &checked, &database); err != nil {
		if errors.Is(err, errNoRows) {
			return 0, fmt.Errorf("postgres: lane count: %w", &core.NotMigratedError{Missing: "no lane count recorded in " + s.n.meta})
		}
		return 0, fmt.Errorf("postgres: lane count: %w", classify(err))
	}
	n, err := parseLanes(v)
	if err != nil {
		return 0, fmt.Errorf("postgres: lane count: %w", err)
	}
	if checked {
		s.checked.Store(true)
	}
	s.database.Store(&database)
	return n, nil
}

// readLanes reads the recorded lane count with sql (one of the LaneCount statements) in q.
func readLanes(ctx context.Context, q querier, sql string) (int, error) {
	var v string
	if err := queryRow(ctx, q, sql, nil, &v); err != nil {
		return 0, err
	}
	return parseLanes(v)
}

func parseLanes(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > core.MaxLanes {
		return 0, fmt.Errorf("%w: recorded lane count %q", core.ErrSchemaMismatch, v)
	}
	return n, nil
}
