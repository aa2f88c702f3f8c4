package logical

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outboxkit/outbox/adapters/postgres/internal/bridge"
	"github.com/outboxkit/outbox/core/driver"
)

// decoder turns pgoutput messages (protocol version 1, text tuples) into transactions of outbox
// records. Relations are remembered by id; inserts of other relations (a publication shared
// with other tables) are ignored.
type decoder struct {
	schema, table string
	partitioned   bool
	rels          map[uint32]*relation
	inTx          bool
	xid           uint32 // of the transaction being decoded, or the last one
	recs          []driver.Record
}

// relation is a RelationMessage: its column names in tuple order, and whether it is the outbox
// (or, for a partitioned outbox published without publish_via_partition_root, one of its
// partitions).
type relation struct {
	cols   []string
	outbox bool
}

// message decodes one pgoutput message; done is true (and tx complete) at a commit.
func (d *decoder) message(data []byte) (tx driver.ChangeTx, done bool, err error) {
	msg, err := parseMessage(data)
	if err != nil {
		return driver.ChangeTx{}, false, fmt.Errorf("pgoutput: %w", err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		r := &relation{cols: make([]string, len(m.Columns)), outbox: d.isOutbox(m.Namespace, m.RelationName)}
		for i, c := range m.Columns {
			r.cols[i] = c.Name
		}
		d.rels[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		d.inTx, d.xid, d.recs = true, m.Xid, nil
	case *pglogrepl.InsertMessage:
		r, ok := d.rels[m.RelationID]
		if !ok {
			return driver.ChangeTx{}, false, fmt.Errorf("pgoutput: insert into unknown relation %d", m.RelationID)
		}
		if !r.outbox {
			return driver.ChangeTx{}, false, nil
		}
		rec, err := r.record(m.Tuple)
		if err != nil {
			return driver.ChangeTx{}, false, fmt.Errorf("pgoutput: outbox row: %w", err)
		}
		d.recs = append(d.recs, rec)
	case *pglogrepl.CommitMessage:
		tx = driver.ChangeTx{Records: d.recs, Position: m.TransactionEndLSN.String()}
		d.inTx, d.recs = false, nil
		return tx, true, nil
	}
	return driver.ChangeTx{}, false, nil
}

// parseMessage is pglogrepl.Parse for the messages the decoder uses (relation, begin, insert,
// commit); it returns nil for every other type, unparsed, and an error instead of a panic for a
// malformed message. Fuzzing found that Parse indexes an empty message, and that a truncate
// message's 32-bit relation count makes it allocate up to 16 GiB before it fails.
func parseMessage(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("empty message")
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeInsert:
		// 'I', relation id (4 bytes), 'N', then the tuple.
		if len(data) > 6 && data[5] == 'N' {
			if err := checkTupleLengths(data[6:]); err != nil {
				return nil, err
			}
		}
	case pglogrepl.MessageTypeRelation, pglogrepl.MessageTypeBegin, pglogrepl.MessageTypeCommit:
	default:
		return nil, nil
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed message: %v", r)
		}
	}()
	return pglogrepl.Parse(data)
}

// checkTupleLengths refuses a TupleData whose column lengths run past its end before pglogrepl
// allocates them (fuzzing found a 4 GiB allocation from one corrupt length).
func checkTupleLengths(src []byte) error {
	if len(src) < 2 {
		return fmt.Errorf("short tuple")
	}
	n, low := int(binary.BigEndian.Uint16(src)), 2
	for i := 0; i < n; i++ {
		if low >= len(src) {
			return fmt.Errorf("short tuple: %d of %d columns", i, n)
		}
		kind := src[low]
		low++
		if kind != pglogrepl.TupleDataTypeText && kind != pglogrepl.TupleDataTypeBinary {
			continue
		}
		if len(src)-low < 4 {
			return fmt.Errorf("short tuple: column %d has no length", i)
		}
		l := int64(binary.BigEndian.Uint32(src[low:]))
		low += 4
		if l > int64(len(src)-low) {
			return fmt.Errorf("tuple column %d claims %d bytes, %d are left", i, l, len(src)-low)
		}
		low += int(l)
	}
	return nil
}

func (d *decoder) isOutbox(schema, name string) bool {
	if schema != d.schema {
		return false
	}
	if name == d.table {
		return true
	}
	if !d.partitioned {
		return false
	}
	rest, ok := strings.CutPrefix(name, d.table+"_p")
	if !ok || len(rest) != len(bridge.PartitionLayout) {
		return false
	}
	_, err := time.Parse(bridge.PartitionLayout, rest)
	return err == nil
}

// record decodes an outbox row from its text columns, as Admin.List would return it.
func (r *relation) record(t *pglogrepl.TupleData) (driver.Record, error) {
	if t == nil || len(t.Columns) != len(r.cols) {
		return driver.Record{}, fmt.Errorf("tuple has a different column count than its relation")
	}
	var rec driver.Record
	seen := 0
	for i, name := range r.cols {
		c := t.Columns[i]
		var text string
		isNull, binary := false, false
		switch c.DataType {
		case pglogrepl.TupleDataTypeText:
			text = string(c.Data)
		case pglogrepl.TupleDataTypeBinary:
			binary = true
		case pglogrepl.TupleDataTypeNull:
			isNull = true
		default:
			return driver.Record{}, fmt.Errorf("column %s: unexpected tuple data type %q", name, c.DataType)
		}
		var err error
		str := func(dst *string) {
			switch {
			case binary:
				*dst = string(c.Data) // text's binary format is its bytes
			case !isNull:
				*dst = text
			}
		}
		integer := func(dst *int64) {
			switch {
			case binary:
				*dst, err = binaryInt(c.Data)
			case !isNull:
				*dst, err = strconv.ParseInt(text, 10, 64)
			}
		}
		ts := func(dst *time.Time) {
			switch {
			case binary:
				var us int64
				if us, err = binaryInt(c.Data); err == nil && len(c.Data) == 8 {
					*dst = pgEpoch.Add(time.Duration(us) * time.Microsecond).UTC()
				} else if err == nil {
					err = fmt.Errorf("timestamptz of %d bytes", len(c.Data))
				}
			case !isNull:
				*dst, err = parseTimestamptz(text)
			}
		}
		switch name {
		case "seq":
			integer(&rec.Seq)
			seen++
		case "id":
			str(&rec.ID)
			seen++
		case "aggregate_type":
			str(&rec.AggregateType)
		case "aggregate_id":
			str(&rec.AggregateID)
		case "aggregate_version":
			integer(&rec.AggregateVersion)
		case "type":
			str(&rec.Type)
		case "schema_id":
			str(&rec.SchemaID)
		case "partition_key":
			str(&rec.PartitionKey)
		case "destination":
			str(&rec.Destination)
		case "payload":
			switch {
			case binary:
				if len(c.Data) > 0 {
					rec.Payload = c.Data // bytea's binary format is its bytes; Decode copied them
				}
			case !isNull:
				var b []byte
				b, err = decodeBytea(text)
				if len(b) > 0 {
					rec.Payload = b
				}
			}
		case "headers":
			raw := []byte(text)
			if binary {
				// jsonb's binary format: a version byte (1), then the JSON text.
				if len(c.Data) == 0 || c.Data[0] != 1 {
					err = fmt.Errorf("jsonb binary format version %v", c.Data[:min(len(c.Data), 1)])
					break
				}
				raw = c.Data[1:]
			}
			if (binary || !isNull) && string(raw) != "{}" {
				err = json.Unmarshal(raw, &rec.Headers)
				if len(rec.Headers) == 0 {
					rec.Headers = nil
				}
			}
		case "tenant":
			str(&rec.Tenant)
		case "causation_id":
			str(&rec.CausationID)
		case "correlation_id":
			str(&rec.CorrelationID)
		case "lane":
			var v int64
			integer(&v)
			rec.Lane = int(v)
			seen++
		case "created_at":
			ts(&rec.CreatedAt)
			seen++
		case "published_at":
			ts(&rec.PublishedAt)
		case "attempts":
			var v int64
			integer(&v)
			rec.Attempts = int(v)
		case "next_attempt_at":
			ts(&rec.NextAttemptAt)
		case "last_error":
			str(&rec.LastError)
		case "parked_at":
			ts(&rec.ParkedAt)
		}
		if err != nil {
			return driver.Record{}, fmt.Errorf("column %s: %w", name, err)
		}
	}
	if seen != 4 {
		return driver.Record{}, fmt.Errorf("relation lacks one of the columns seq, id, lane, created_at")
	}
	return rec, nil
}

// binaryInt decodes the binary send format of int2, int4 and int8 (big-endian).
func binaryInt(b []byte) (int64, error) {
	switch len(b) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	case 8:
		return int64(binary.BigEndian.Uint64(b)), nil
	}
	return 0, fmt.Errorf("integer of %d bytes", len(b))
}

// decodeBytea decodes bytea's text output: hex ("\x0a0b") or the older escape format.
func decodeBytea(s string) ([]byte, error) {
	if h, ok := strings.CutPrefix(s, `\x`); ok {
		return hex.DecodeString(h)
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			out = append(out, s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '\\' {
			out = append(out, '\\')
			i++
			continue
		}
		if i+4 > len(s) {
			return nil, fmt.Errorf("bad bytea escape at %d", i)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return nil, fmt.Errorf("bad bytea escape at %d: %w", i, err)
		}
		out = append(out, byte(v))
		i += 3
	}
	return out, nil
}

// parseTimestamptz parses timestamptz's ISO text output ("2026-11-30 06:48:51.123456+00"; the
// replication connection runs with TimeZone UTC), to microseconds in UTC.
func parseTimestamptz(s string) (time.Time, error) {
	var err error
	for _, layout := range []string{"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07:00:00"} {
		var t time.Time
		if t, err = time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamptz %q: %w", s, err)
}
