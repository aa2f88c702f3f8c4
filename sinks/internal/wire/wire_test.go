package wire_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

func fullMessage(payload []byte) core.Message {
	return core.Message{
		Record: driver.Record{Event: core.Event{
			ID: "01J-id", AggregateType: "order", AggregateID: "42/a b", AggregateVersion: 7, Type: "order.created",
			SchemaID: "order.v1", PartitionKey: "order/42/a b", Payload: payload,
			Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "x=1", "k": "v"},
			Tenant:  "acme", CausationID: "c-1", CorrelationID: "r-1",
		}, CreatedAt: time.Date(2026, 11, 30, 5, 0, 0, 123456000, time.UTC)},
		Destination: "q", DedupID: "01J-id", GroupID: "order/42/a b",
	}
}

func attrFunc(e wire.Encoded) func(string) (string, bool) {
	m := map[string]string{}
	for _, a := range e.Attrs {
		m[a.Name] = a.Value
	}
	return func(n string) (string, bool) { v, ok := m[n]; return v, ok }
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for name, payload := range map[string][]byte{
		"json":    []byte(`{"a":1,"s":"é€😀"}`),
		"binary":  {0, 1, 2, 0xff, 0xfe},
		"cr":      []byte("a\r\nb"),
		"control": []byte("a\x01b"),
		"empty":   {},
	} {
		t.Run(name, func(t *testing.T) {
			m := fullMessage(payload)
			e, err := wire.Encode(&m, nil)
			require.NoError(t, err)
			require.Len(t, e.Attrs, 10)
			require.True(t, wire.IsSafeText([]byte(e.Body)))
			require.NotEmpty(t, e.Body)
			d, err := wire.Decode(e.Body, attrFunc(e))
			require.NoError(t, err)
			require.Nil(t, d.ClaimCheck)
			require.Equal(t, m.CreatedAt, d.CreatedAt)
			want := m.Event
			require.Equal(t, string(want.Payload), string(d.Event.Payload))
			want.Payload, d.Event.Payload = nil, nil
			require.Equal(t, want, d.Event)
		})
	}
}

func TestMinimalEventAndSize(t *testing.T) {
	t.Parallel()
	m := core.Message{Record: driver.Record{Event: core.Event{ID: "e", AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte("hi")}}}
	e, err := wire.Encode(&m, nil)
	require.NoError(t, err)
	require.Len(t, e.Attrs, 4)
	size := len("hi")
	for _, a := range e.Attrs {
		size += len(a.Name) + len(a.DataType) + len(a.Value)
	}
	require.Equal(t, size, e.Size())
	require.Equal(t, "hi", e.Body)
}

func TestClaimCheckReference(t *testing.T) {
	t.Parallel()
	payload := []byte(strings.Repeat("x", 1000))
	m := fullMessage(payload)
	ref := wire.NewClaimCheck("bkt", "p/", payload)
	require.Equal(t, "p/"+ref.SHA256, ref.Key)
	e, err := wire.Encode(&m, &ref)
	require.NoError(t, err)
	d, err := wire.Decode(e.Body, attrFunc(e))
	require.NoError(t, err)
	require.NotNil(t, d.ClaimCheck)
	require.Equal(t, ref, *d.ClaimCheck)
	require.NoError(t, d.ClaimCheck.Verify(payload))
	tampered := append([]byte(nil), payload...)
	tampered[3] = 'y'
	require.ErrorIs(t, d.ClaimCheck.Verify(tampered), wire.ErrClaimCheckDigest)
	require.ErrorIs(t, d.ClaimCheck.Verify(payload[1:]), wire.ErrClaimCheckDigest)
}

func TestDecodeRejectsForeignMessages(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	_, err := wire.Decode("hello", none)
	require.ErrorIs(t, err, wire.ErrUndecodable)
	m := fullMessage([]byte("x"))
	e, err := wire.Encode(&m, nil)
	require.NoError(t, err)
	attrs := attrFunc(e)
	bad := func(name, v string) func(string) (string, bool) {
		return func(n string) (string, bool) {
			if n == name {
				return v, true
			}
			return attrs(n)
		}
	}
	for _, f := range []func(string) (string, bool){
		bad(wire.AttrMeta, `{"v":2}`), bad(wire.AttrMeta, `not json`), bad(wire.AttrAggregate, "noslash"),
		bad(wire.AttrAggregateVersion, "x"), bad(wire.AttrMeta, `{"v":1,"encoding":"rot13"}`),
		bad(wire.AttrMeta, `{"v":1,"encoding":"s3"}`),
	} {
		_, err := wire.Decode(e.Body, f)
		require.ErrorIs(t, err, wire.ErrUndecodable)
	}
	_, err = wire.Decode("!!!", bad(wire.AttrMeta, `{"v":1,"encoding":"base64"}`))
	require.ErrorIs(t, err, wire.ErrUndecodable)
}

func TestFIFOIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, "order/42", wire.GroupID("order/42"))
	h := wire.GroupID("order/4 2")
	require.True(t, strings.HasPrefix(h, "sha256-"))
	require.Len(t, h, 71)
	require.Equal(t, h, wire.GroupID("order/4 2"))
	require.NotEqual(t, h, wire.GroupID("order/4  2"))
	require.True(t, strings.HasPrefix(wire.GroupID(strings.Repeat("a", 129)), "sha256-"))
	require.True(t, strings.HasPrefix(wire.GroupID("é"), "sha256-"))
	m := core.Message{Record: driver.Record{Event: core.Event{ID: "id-1"}}}
	require.Equal(t, "id-1", wire.DedupID(&m))
	m.DedupID = "d-1"
	require.Equal(t, "d-1", wire.DedupID(&m))
}

func TestIsSafeText(t *testing.T) {
	t.Parallel()
	require.True(t, wire.IsSafeText([]byte("a\tb\nc é \U0010FFFF")))
	for _, s := range []string{"\x00", "\r", "\x0b", "\xff", "\uFFFE", "\xed\xa0\x80"} {
		require.False(t, wire.IsSafeText([]byte(s)), "%q", s)
	}
}

// requireCanonicalMeta checks that the outbox.meta attribute holds exactly the bytes
// encoding/json gives for its Meta (the format's reference encoding).
func requireCanonicalMeta(t *testing.T, e wire.Encoded) {
	t.Helper()
	raw, ok := attrFunc(e)(wire.AttrMeta)
	require.True(t, ok)
	var m wire.Meta
	require.NoError(t, json.Unmarshal([]byte(raw), &m))
	want, err := json.Marshal(m)
	require.NoError(t, err)
	require.Equal(t, string(want), raw)
}

// The meta attribute is byte for byte what encoding/json writes, for every optional field and
// for strings encoding/json escapes (HTML characters, quotes, controls, U+2028, non-ASCII).
func TestMetaIsCanonicalJSON(t *testing.T) {
	base := core.Message{Record: driver.Record{Event: core.Event{ID: "id", Type: "t", AggregateType: "a", AggregateID: "1"}}}
	ref := wire.NewClaimCheck("bucket", "p/<&>", []byte("x"))
	cases := map[string]func(m *core.Message) *wire.ClaimCheck{
		"minimal": func(m *core.Message) *wire.ClaimCheck { return nil },
		"all":     func(m *core.Message) *wire.ClaimCheck { full := fullMessage([]byte("{}")); *m = full; return nil },
		"created": func(m *core.Message) *wire.ClaimCheck {
			m.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
			return nil
		},
		"escapes": func(m *core.Message) *wire.ClaimCheck { m.PartitionKey = "a<b>&\"c\\\u2028\u2029é\x01\t"; return nil },
		"headers": func(m *core.Message) *wire.ClaimCheck {
			m.Headers = map[string]string{"z": "1", "a<": "&", "": "", "é": "\u2028", "traceparent": "tp"}
			return nil
		},
		"empty_tp": func(m *core.Message) *wire.ClaimCheck { m.Headers = map[string]string{"traceparent": ""}; return nil },
		"only_tp":  func(m *core.Message) *wire.ClaimCheck { m.Headers = map[string]string{"traceparent": "tp"}; return nil },
		"many": func(m *core.Message) *wire.ClaimCheck {
			m.Headers = map[string]string{}
			for i := range 20 {
				m.Headers[string(rune('a'+i))+"k"] = "v"
			}
			return nil
		},
		"base64":      func(m *core.Message) *wire.ClaimCheck { m.Payload = []byte{0, 1, 2}; return nil },
		"empty":       func(m *core.Message) *wire.ClaimCheck { m.Payload = nil; return nil },
		"claim_check": func(m *core.Message) *wire.ClaimCheck { return &ref },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			m := base
			m.Payload = []byte("p")
			r := mod(&m)
			e, err := wire.Encode(&m, r)
			require.NoError(t, err)
			requireCanonicalMeta(t, e)
		})
	}
}

// TestTxGroupHeadersTravel: the transaction group headers that Outbox.Write adds come back from
// the SQS/SNS wire format unchanged.
func TestTxGroupHeadersTravel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := memory.New(nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](ctx, store, nil)
	require.NoError(t, err)
	var evs []core.Event
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
		evs, err = ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t"},
			core.Event{AggregateType: "a", AggregateID: "2", Type: "t", Headers: map[string]string{"k": "v"}})
		return err
	}))
	for i, ev := range evs {
		m := core.Message{Record: driver.Record{Event: ev}, Destination: "q", DedupID: ev.ID, GroupID: ev.PartitionKey}
		e, err := wire.Encode(&m, nil)
		require.NoError(t, err)
		d, err := wire.Decode(e.Body, attrFunc(e))
		require.NoError(t, err)
		require.Equal(t, evs[0].Headers[core.HeaderTxID], d.Event.Headers[core.HeaderTxID])
		require.Equal(t, strconv.Itoa(i), d.Event.Headers[core.HeaderTxIndex])
		require.Equal(t, "2", d.Event.Headers[core.HeaderTxCount])
		require.Equal(t, ev.Headers, d.Event.Headers)
	}
}
