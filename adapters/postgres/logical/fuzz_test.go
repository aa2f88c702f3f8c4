package logical

import (
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

// The outbox's columns in table order, as a RelationMessage lists them.
var fuzzCols = strings.Fields(`seq id aggregate_type aggregate_id aggregate_version type schema_id partition_key
	destination payload headers tenant causation_id correlation_id lane created_at published_at attempts
	next_attempt_at last_error parked_at`)

// pgoutput message encoders (protocol version 1) for seeds.
func relationMsg(id uint32, schema, table string, cols []string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, schema...), 0)
	b = append(append(b, table...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		b = binary.BigEndian.AppendUint32(b, 25) // text
		b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	}
	return b
}

// insertMsg encodes an insert of text columns; a nil value is NULL.
func insertMsg(id uint32, vals []*string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
		b = append(b, *v...)
	}
	return b
}

func beginMsg() []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, 0x16B3748)
	b = binary.BigEndian.AppendUint64(b, 0)
	return binary.BigEndian.AppendUint32(b, 7)
}

func TestFuzzSeedDecodes(t *testing.T) {
	t.Parallel()
	d := fuzzDecoder(t)
	_, _, err := d.message(insertMsg(1, row("1", "e1", "order", "42", `\x7b7d`, `{"k":"v"}`, "2026-11-30 06:48:51.123456+00")))
	require.NoError(t, err)
	require.Len(t, d.recs, 1)
	require.Equal(t, []byte("{}"), d.recs[0].Payload)
	require.Equal(t, map[string]string{"k": "v"}, d.recs[0].Headers)
}

// A truncate message claiming 2^31 relations is ignored, not parsed: pglogrepl would allocate
// its relation ids (8 GiB) before noticing the message is short. TotalAlloc counts the whole
// process, and other tests' goroutines allocate meanwhile (1.1 MB was seen in one window), so
// the bound is far above that noise and far below what parsing would take.
func TestTruncateMessageIsNotParsed(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	d := fuzzDecoder(t)
	_, _, err := d.message([]byte("T\x7f\xff\xff\xff\x00\x00\x00\x00\x01"))
	require.NoError(t, err)
	runtime.ReadMemStats(&after)
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20))
}

func fuzzDecoder(t testing.TB) *decoder {
	d := &decoder{schema: "public", table: "outbox", rels: map[uint32]*relation{}}
	if _, _, err := d.message(relationMsg(1, "public", "outbox", fuzzCols)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.message(beginMsg()); err != nil {
		t.Fatal(err)
	}
	return d
}

func row(seq, id, aggType, aggID, payload, headers, created string) []*string {
	vals := make([]*string, len(fuzzCols))
	set := map[string]string{"seq": seq, "id": id, "aggregate_type": aggType, "aggregate_id": aggID,
		"aggregate_version": "0", "type": "t", "partition_key": aggType + "/" + aggID, "payload": payload,
		"headers": headers, "lane": "3", "created_at": created, "attempts": "0", "last_error": ""}
	for i, c := range fuzzCols {
		if v, ok := set[c]; ok {
			vals[i] = &v
		}
	}
	return vals
}

// FuzzPgoutputMessage: any pgoutput message (after the outbox's relation and a begin) decodes
// without panicking, into a record or an error.
func FuzzPgoutputMessage(f *testing.F) {
	f.Add(insertMsg(1, row("1", "e1", "order", "42", `\x7b7d`, `{"k":"v"}`, "2026-11-30 06:48:51.123456+00")))
	f.Add(insertMsg(1, row("x", "e1", "order", "42", `\x7`, `{`, "2026-13-30")))
	f.Add(insertMsg(2, nil))
	f.Add([]byte{'C', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(relationMsg(1, "public", "outbox", []string{"seq"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := fuzzDecoder(t)
		_, _, _ = d.message(data)
	})
}

// FuzzPgoutputTuple: the text columns of an outbox row decode to the record they encode, or to
// an error, never to a panic.
func FuzzPgoutputTuple(f *testing.F) {
	f.Add("1", "e1", "order", "42", `\x7b7d`, `{"k":"v"}`, "2026-11-30 06:48:51.123456+00")
	f.Add("-9223372036854775808", "e", "a", "b", `\\000abc\001`, `{}`, "1970-01-01 00:00:00+00")
	f.Add("1", "e", "a", "b", `\x`, `[]`, "294277-01-01 00:00:00+00")
	f.Add("99999999999999999999", "", "", "", `\`, `null`, "infinity")
	f.Fuzz(func(t *testing.T, seq, id, aggType, aggID, payload, headers, created string) {
		d := fuzzDecoder(t)
		_, _, err := d.message(insertMsg(1, row(seq, id, aggType, aggID, payload, headers, created)))
		if err != nil {
			return
		}
		require.Len(t, d.recs, 1)
		rec := d.recs[0]
		require.Equal(t, id, rec.ID)
		require.Equal(t, aggType, rec.AggregateType)
		require.Equal(t, aggID, rec.AggregateID)
		require.Equal(t, 3, rec.Lane)
	})
}

// FuzzLSN: a CDC position (an LSN as the relay checkpoints it) parses only from its own text
// form, and printing a parsed position gives a text that parses to the same position.
func FuzzLSN(f *testing.F) {
	f.Add("0/16B3748")
	f.Add("FFFFFFFF/FFFFFFFF")
	f.Add("16B3748")
	f.Add("0/")
	f.Fuzz(func(t *testing.T, s string) {
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			return
		}
		again, err := pglogrepl.ParseLSN(lsn.String())
		require.NoError(t, err)
		require.Equal(t, lsn, again)
	})
}
