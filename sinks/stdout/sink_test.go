package stdout_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/stdout"
)

func msg(id string, payload []byte, headers map[string]string) core.Message {
	return core.Message{Record: driver.Record{Event: driver.Event{ID: id, AggregateType: "order", AggregateID: "42", AggregateVersion: 3,
		Type: "order.placed", Payload: payload, Headers: headers}, CreatedAt: time.Date(2026, 12, 5, 8, 4, 6, 1000, time.UTC)},
		Destination: "orders", GroupID: "order/42", DedupID: id}
}

// Each message is one CloudEvents structured-mode line: compact JSON payloads embed as data,
// anything else is data_base64, an empty payload has neither.
func TestLines(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := stdout.New(&out, &stdout.Options{Source: "shop"})
	errs := s.Send(t.Context(), []core.Message{
		msg("e1", []byte(`{"total":1250,"note":"<a&b>"}`), map[string]string{"traceparent": "00-x"}),
		msg("e2", []byte("plain text"), nil),
		msg("e3", []byte("{\n  \"pretty\": true\n}"), map[string]string{"content-type": "application/json"}),
		msg("e4", nil, nil),
	})
	require.Equal(t, []error{nil, nil, nil, nil}, errs)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, `{"specversion":"1.0","id":"e1","source":"shop","type":"order.placed","subject":"order/42",`+
		`"time":"2026-12-05T08:04:06.000001Z","datacontenttype":"application/json","destination":"orders","partitionkey":"order/42",`+
		`"aggregatetype":"order","aggregateid":"42","aggregateversion":3,"headers":{"traceparent":"00-x"},"data":{"total":1250,"note":"<a&b>"}}`, lines[0])
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &raw))
	require.Equal(t, "cGxhaW4gdGV4dA==", raw["data_base64"])
	require.NotContains(t, raw, "data")
	require.NotContains(t, raw, "datacontenttype", "no content type is known for a non-JSON payload")
	l, err := stdout.DecodeLine([]byte(lines[2]))
	require.NoError(t, err)
	require.Equal(t, "{\n  \"pretty\": true\n}", string(l.Payload()), "JSON with whitespace travels byte for byte, in data_base64")
	require.Equal(t, "application/json", l.DataContentType)
	raw = nil
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &raw))
	require.NotContains(t, raw, "data")
	require.NotContains(t, raw, "data_base64")

	_, err = stdout.DecodeLine([]byte(`{"id":"x"}`))
	require.ErrorIs(t, err, stdout.ErrBadLine)
}

// shortWriter writes n bytes, then fails.
type shortWriter struct {
	bytes.Buffer
	n int
}

func (w *shortWriter) Write(p []byte) (int, error) {
	k := min(len(p), w.n)
	w.Buffer.Write(p[:k])
	if k < len(p) {
		return k, errors.New("disk full")
	}
	return k, nil
}

// A short write acknowledges exactly the messages whose lines were written whole; a cancelled
// context writes nothing.
func TestShortWriteAndCancel(t *testing.T) {
	t.Parallel()
	var probe bytes.Buffer
	m := []core.Message{msg("e1", []byte(`1`), nil), msg("e2", []byte(`2`), nil), msg("e3", []byte(`3`), nil)}
	require.Equal(t, []error{nil}, stdout.New(&probe, nil).Send(t.Context(), m[:1]))
	one := probe.Len()
	w := &shortWriter{n: one + one/2} // the first line and half of the second
	errs := stdout.New(w, nil).Send(t.Context(), m)
	require.NoError(t, errs[0])
	require.ErrorContains(t, errs[1], "disk full")
	require.ErrorContains(t, errs[2], "disk full")
	require.False(t, core.IsPermanent(errs[1]), "a failed write is retryable")
	require.NoError(t, core.CheckOutcomes(m, errs))

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out bytes.Buffer
	errs = stdout.New(&out, nil).Send(ctx, m)
	for _, err := range errs {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.Zero(t, out.Len())
}
