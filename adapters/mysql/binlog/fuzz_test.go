package binlog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzParsePosition: a CDC position parses only from the forms String writes, and a parsed
// position prints to a text that parses to the same position.
func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"file:binlog.000003:1234", "gtid:0-1-30;file:binlog.000003:1234",
		"gtid:3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7-9;file:mysql-bin.000010:157", "gtid:;file:b:4",
		"file::1", "file:b:4294967296", "gtid:x", "file:b:-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePosition(s)
		if err != nil {
			return
		}
		again, err := parsePosition(p.String())
		require.NoError(t, err)
		require.Equal(t, p, again)
	})
}

// FuzzBinlogRow: an outbox row as go-mysql's replication hands it over (columns typed int64,
// string, []byte, time.Time or nil, depending on the column type and binlog metadata) decodes to
// the record it holds, or to an error, never to a panic.
func FuzzBinlogRow(f *testing.F) {
	f.Add(int64(1), "e1", "order", "42", []byte(`{}`), []byte(`{"k":"v"}`), "2026-11-30 06:48:51.123456", uint8(0))
	f.Add(int64(-1), "", "", "", []byte(nil), []byte(`{`), "0000-00-00 00:00:00", uint8(0xff))
	f.Add(int64(7), "e", "a", "b", []byte{0xff}, []byte(`null`), "2026-13-01", uint8(0x55))
	f.Fuzz(func(t *testing.T, seq int64, id, aggType, aggID string, payload, headers []byte, created string, kinds uint8) {
		// Each bit of kinds picks another Go type for one group of columns.
		pick := func(bit uint, a, b any) any {
			if kinds&(1<<bit) != 0 {
				return b
			}
			return a
		}
		row := make([]any, numFields)
		row[fSeq] = pick(0, seq, int32(seq))
		row[fID] = pick(1, id, []byte(id))
		row[fAggregateType] = aggType
		row[fAggregateID] = pick(1, aggID, []byte(aggID))
		row[fAggregateVersion] = pick(2, int64(0), uint64(seq))
		row[fType] = "t"
		row[fSchemaID] = pick(3, "", nil)
		row[fPartitionKey] = aggType + "/" + aggID
		row[fDestination] = pick(3, "", nil)
		row[fPayload] = pick(4, payload, string(payload))
		row[fHeaders] = pick(5, headers, string(headers))
		row[fLane] = pick(6, int64(3), int8(3))
		row[fCreatedAt] = pick(7, any(created), any(time.Unix(seq%(1<<33), 0)))
		row[fAttempts] = int64(0)
		row[fLastError] = ""
		st := &changeStream{}
		for i := range st.colIndex {
			st.colIndex[i] = i
		}
		rec, err := st.record(row)
		if err != nil {
			return
		}
		require.Equal(t, id, rec.ID)
		require.Equal(t, aggID, rec.AggregateID)
		require.Equal(t, string(payload), string(rec.Payload))
		require.Equal(t, 3, rec.Lane)
		require.Equal(t, time.UTC, rec.CreatedAt.Location())
	})
}
