package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/ce"
)

// FuzzKafkaWriteAcceptedIsEncoded: whatever core accepts at Write (Normalize), the Kafka record
// format (CloudEvents binary mode) carries and decodes back to the same event.
func FuzzKafkaWriteAcceptedIsEncoded(f *testing.F) {
	f.Add("id-1", "order", "42", "order.created", "", "acme", "k", "v", []byte(`{"a":1}`))
	f.Add("", "order", "a b/c", "t", "pk", "", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", []byte{0, 0xff})
	f.Add("x", "a", "é€😀\uFFFD", "t", "", "", "content-type", "application/json", []byte(nil))
	f.Fuzz(func(t *testing.T, id, aggType, aggID, typ, pk, tenant, hk, hv string, payload []byte) {
		ev := core.Event{ID: id, AggregateType: aggType, AggregateID: aggID, AggregateVersion: int64(len(payload)),
			Type: typ, PartitionKey: pk, Tenant: tenant, CausationID: tenant, CorrelationID: aggID, SchemaID: typ, Payload: payload}
		if hk != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		n, err := driver.Normalize(0, ev, core.Limits{})
		if err != nil {
			return
		}
		m := &core.Message{Record: driver.Record{Event: n, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 1000, time.UTC)}, GroupID: n.PartitionKey}
		r := &kgo.Record{Key: []byte(n.PartitionKey), Value: n.Payload, Headers: encodeHeaders(m, "outboxkit", "")}
		got, created, err := decodeRecord(r)
		require.NoError(t, err)
		want := n
		special := hk == ce.EventHeaderContentType || hk == ce.EventHeaderTraceparent || hk == ce.EventHeaderTracestate
		if special && want.Headers != nil && want.Headers[hk] == "" {
			delete(want.Headers, hk) // empty values of the headers with their own attribute are left out
			if len(want.Headers) == 0 {
				want.Headers = nil
			}
			if got.Headers != nil && len(got.Headers) == 0 {
				got.Headers = nil
			}
		}
		require.Equal(t, want, got)
		require.Equal(t, m.CreatedAt, created)
	})
}

// FuzzKafkaDecodeRecord: any record's headers decode without panicking, to an event that has the
// required fields, or to ErrUndecodable.
func FuzzKafkaDecodeRecord(f *testing.F) {
	f.Add("1.0", "e", "t", "order", "42", "3", "2026-12-01T00:00:00Z", "outbox.h.k", "v")
	f.Add("0.3", "", "", "", "", "-1", "yesterday", "outbox.h.", "")
	f.Add("1.0", "e", "t", "a", "b", "x", "", "ce_tracestate", "a=b")
	f.Fuzz(func(t *testing.T, spec, id, typ, aggType, aggID, version, at, key, val string) {
		hs := []kgo.RecordHeader{}
		for k, v := range map[string]string{HeaderSpecVersion: spec, HeaderID: id, HeaderType: typ, HeaderAggregateType: aggType,
			HeaderAggregateID: aggID, HeaderAggregateVersion: version, HeaderTime: at, key: val} {
			if v != "" {
				hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
		ev, _, err := decodeRecord(&kgo.Record{Topic: "t", Headers: hs, Value: []byte("p")})
		if err != nil {
			require.ErrorIs(t, err, ErrUndecodable)
			return
		}
		require.NotEmpty(t, ev.ID)
		require.NotEmpty(t, ev.Type)
		require.NotEmpty(t, ev.AggregateType)
		require.NotEmpty(t, ev.AggregateID)
	})
}

// NewConsumer refuses the names Inbox.Process refuses, instead of failing every record.
func TestNewConsumerRefusesNamesTheInboxRefuses(t *testing.T) {
	t.Parallel()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	for _, name := range []string{"a\nb", strings.Repeat("n", 300), "x\u0085"} {
		_, err := NewConsumer("g", []string{"t"}, inbox, name, func(context.Context, *memory.Tx, *Delivery) error { return nil }, nil)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%q", name)
		require.Equal(t, "consumer", oe.Field)
	}
}
