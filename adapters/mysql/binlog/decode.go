package binlog

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outboxkit/outbox/adapters/mysql/internal/bridge"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Decoding of the outbox table's binlog rows into driver.Record values, equal to what the Store's
// reads (Admin.List, Fetch) return for the same row (go-mysql's replication decodes DATETIME(6) as time.Time in UTC,
// BLOB/TEXT as []byte pointing into the packet buffer, VARCHAR as string).

// The outbox columns a Record is built from.
const (
	fSeq = iota
	fID
	fAggregateType
	fAggregateID
	fAggregateVersion
	fType
	fSchemaID
	fPartitionKey
	fDestination
	fPayload
	fHeaders
	fTenant
	fCausationID
	fCorrelationID
	fLane
	fCreatedAt
	fPublishedAt
	fAttempts
	fNextAttemptAt
	fLastError
	fParkedAt
	numFields
)

var fieldNames = [numFields]string{"seq", "id", "aggregate_type", "aggregate_id", "aggregate_version", "type",
	"schema_id", "partition_key", "destination", "payload", "headers", "tenant", "causation_id", "correlation_id",
	"lane", "created_at", "published_at", "attempts", "next_attempt_at", "last_error", "parked_at"}

// mapColumns sets colIndex from the table map's column names (or the information_schema
// order when the log has none).
func (st *changeStream) mapColumns(tm *replication.TableMapEvent) error {
	names := tm.ColumnName
	if len(names) == 0 {
		if len(st.fallback) != int(tm.ColumnCount) {
			return fmt.Errorf("mysql: cdc: the binary log has no column names (binlog_row_metadata=MINIMAL) and outbox %s has %d columns, not the %d read at start: restart the relay",
				st.src.store.Outbox, tm.ColumnCount, len(st.fallback))
		}
		names = make([][]byte, len(st.fallback))
		for i, n := range st.fallback {
			names[i] = []byte(n)
		}
	} else if len(names) == len(st.cols) {
		same := true
		for i := range names {
			if string(names[i]) != string(st.cols[i]) {
				same = false
				break
			}
		}
		if same {
			return nil
		}
	}
	for f := range st.colIndex {
		st.colIndex[f] = -1
	}
	for i, n := range names {
		for f, want := range fieldNames {
			if string(n) == want {
				st.colIndex[f] = i
				break
			}
		}
	}
	for f, i := range st.colIndex {
		if i < 0 {
			return fmt.Errorf("mysql: cdc: %w: outbox %s has no column %s in the binary log", core.ErrSchemaMismatch, st.src.store.Outbox, fieldNames[f])
		}
	}
	st.cols = names
	return nil
}

func (st *changeStream) appendRows(e *replication.RowsEvent) error {
	if err := st.mapColumns(e.Table); err != nil {
		return err
	}
	for _, row := range e.Rows {
		r, err := st.record(row)
		if err != nil {
			return fmt.Errorf("mysql: cdc: decode outbox row: %w", err)
		}
		st.records = append(st.records, r)
	}
	return nil
}

// record builds the driver.Record the Store's reads return for the same row.
func (st *changeStream) record(row []any) (driver.Record, error) {
	ix := &st.colIndex
	for _, i := range ix {
		if i >= len(row) {
			return driver.Record{}, fmt.Errorf("row has %d columns", len(row))
		}
	}
	d := rowDecoder{row: row, ix: ix}
	r := driver.Record{
		Event: core.Event{
			ID:               d.str(fID),
			AggregateType:    d.str(fAggregateType),
			AggregateID:      d.str(fAggregateID),
			AggregateVersion: d.int(fAggregateVersion),
			Type:             d.str(fType),
			SchemaID:         d.str(fSchemaID),
			PartitionKey:     d.str(fPartitionKey),
			Destination:      d.str(fDestination),
			Tenant:           d.str(fTenant),
			CausationID:      d.str(fCausationID),
			CorrelationID:    d.str(fCorrelationID),
		},
		Seq:           d.int(fSeq),
		Lane:          int(d.int(fLane)),
		CreatedAt:     d.time(fCreatedAt),
		PublishedAt:   d.time(fPublishedAt),
		Attempts:      int(d.int(fAttempts)),
		NextAttemptAt: d.time(fNextAttemptAt),
		LastError:     d.str(fLastError),
		ParkedAt:      d.time(fParkedAt),
	}
	switch p := row[ix[fPayload]].(type) {
	case []byte:
		r.Payload = append(make([]byte, 0, len(p)), p...) // p points into the packet buffer
	case string:
		r.Payload = []byte(p)
	default:
		d.fail(fPayload)
	}
	if d.err != nil {
		return driver.Record{}, d.err
	}
	var h []byte
	switch v := row[ix[fHeaders]].(type) {
	case []byte:
		h = v
	case string:
		h = []byte(v)
	}
	var err error
	if r.Headers, err = bridge.DecodeHeaders(string(h)); err != nil {
		return driver.Record{}, fmt.Errorf("headers of seq %d: %w", r.Seq, err)
	}
	return r, nil
}

// rowDecoder reads the fields of one rows-event row; the first error sticks.
type rowDecoder struct {
	row []any
	ix  *[numFields]int
	err error
}

func (d *rowDecoder) fail(f int) {
	if d.err == nil {
		d.err = fmt.Errorf("column %s: unexpected %T", fieldNames[f], d.row[d.ix[f]])
	}
}

func (d *rowDecoder) str(f int) string {
	switch x := d.row[d.ix[f]].(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case nil:
		return ""
	}
	d.fail(f)
	return ""
}

func (d *rowDecoder) int(f int) int64 {
	v, ok := asInt64(d.row[d.ix[f]])
	if !ok {
		d.fail(f)
	}
	return v
}

func (d *rowDecoder) time(f int) time.Time {
	t, err := asTime(d.row[d.ix[f]])
	if err != nil && d.err == nil {
		d.err = fmt.Errorf("column %s: %w", fieldNames[f], err)
	}
	return t
}

func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case int16:
		return int64(x), true
	case int8:
		return int64(x), true
	case int:
		return int64(x), true
	case uint64:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint8:
		return int64(x), true
	}
	return 0, false
}

func asTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case nil:
		return time.Time{}, nil
	case time.Time:
		return x.UTC(), nil
	case string:
		if strings.HasPrefix(x, "0000-00-00") {
			return time.Time{}, nil
		}
		t, err := time.ParseInLocation("2006-01-02 15:04:05.999999", x, time.UTC)
		if err != nil {
			return time.Time{}, err
		}
		return t, nil
	}
	return time.Time{}, fmt.Errorf("unexpected %T", v)
}
