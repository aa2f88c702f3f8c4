package sqlite

import (
	"database/sql"
	"encoding/json"
	"time"
)

// Times are stored as INTEGER unix microseconds, UTC. NULL is the zero time.

// nowMicros returns t in unix microseconds, or the current time when t is zero. SQLite runs in
// this process, so "the database clock" is this process's clock (time.Now).
func nowMicros(t time.Time) int64 {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UnixMicro()
}

// nullMicros returns t as a nullable microsecond value: nil for the zero time.
func nullMicros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// encodeHeaders stores headers as a JSON object; no headers is NULL.
func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

func decodeHeaders(v sql.NullString) (map[string]string, error) {
	if !v.Valid || v.String == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(v.String), &h); err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, nil
	}
	return h, nil
}

// payloadArg binds a payload as a BLOB; an empty payload is stored as an empty BLOB.
func payloadArg(p []byte) any {
	if p == nil {
		return []byte{}
	}
	return p
}
