package wire_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// FuzzWriteAcceptedIsEncoded: whatever core accepts at Write (Normalize), the SQS and SNS wire
// format encodes, as text those services carry, and decodes back to the same event. A text rule
// in core weaker than the wire format would park such events forever.
func FuzzWriteAcceptedIsEncoded(f *testing.F) {
	f.Add("id-1", "order", "42", "order.created", "", "", "", "", "k", "v", []byte(`{"a":1}`))
	f.Add("", "order", "a b/c", "t", "pk", "dest", "acme", "corr", "traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", []byte{0, 0xff})
	f.Add("x", "a", "\uFFFE", "t", "\u0085", "", "\uFDD0", "\U0001FFFF", "h", "\uFFFF", []byte(nil))
	f.Add("x", "a", "é€😀\uFFFD", "t", "", "", "", "", "h", "\t", []byte("\r\n"))
	f.Add("x", "a", "b", "t", "<k&\"\\>", "", "", "", "h<\u2028>", "v&\u2029\x7f\u00e9", []byte("x"))
	f.Fuzz(func(t *testing.T, id, aggType, aggID, typ, pk, dest, tenant, corr, hk, hv string, payload []byte) {
		ev := core.Event{ID: id, AggregateType: aggType, AggregateID: aggID, AggregateVersion: int64(len(payload)),
			Type: typ, PartitionKey: pk, Destination: dest, Tenant: tenant, CorrelationID: corr, CausationID: corr,
			SchemaID: typ, Payload: payload}
		if hk != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		n, err := driver.Normalize(0, ev, core.Limits{})
		if err != nil {
			require.ErrorIs(t, err, core.ErrInvalidEvent)
			return
		}
		m := &core.Message{Record: driver.Record{Event: n, CreatedAt: time.Date(2026, 12, 1, 0, 0, 0, 1000, time.UTC)}}
		enc, err := wire.Encode(m, nil)
		require.NoError(t, err, "an event Write accepted must encode")
		require.True(t, wire.IsSafeText([]byte(enc.Body)))
		for _, a := range enc.Attrs {
			require.True(t, wire.IsSafeText([]byte(a.Value)), "attribute %s", a.Name)
		}
		requireCanonicalMeta(t, enc)
		dec, err := wire.Decode(enc.Body, attrs(enc))
		require.NoError(t, err)
		want := n
		want.Destination = "" // the logical destination is routing, not part of the message
		if len(want.Payload) == 0 {
			want.Payload = []byte{}
		}
		require.Equal(t, want, dec.Event)
		require.Equal(t, m.CreatedAt, dec.CreatedAt)
	})
}

func attrs(e wire.Encoded) func(string) (string, bool) {
	m := map[string]string{}
	for _, a := range e.Attrs {
		m[a.Name] = a.Value
	}
	return func(n string) (string, bool) { v, ok := m[n]; return v, ok }
}

// FuzzDecode: Decode never panics on any received message, and a decoded message that
// re-encodes reaches a fixed point after one round (decoding is the inverse of encoding).
func FuzzDecode(f *testing.F) {
	seed := fullMessage([]byte(`{"a":1}`))
	enc, err := wire.Encode(&seed, nil)
	if err != nil {
		f.Fatal(err)
	}
	get := attrs(enc)
	meta, _ := get(wire.AttrMeta)
	f.Add(enc.Body, "01J-id", "order.created", "order/42", "7", meta, "00-trace")
	f.Add("-", "id", "t", "a/b", "", `{"v":1,"encoding":"empty"}`, "")
	f.Add("AAEC", "id", "t", "a/b", "", `{"v":1,"encoding":"base64","headers":{"k":"v"},"created_at":"2026-01-01T00:00:00.5Z"}`, "")
	f.Add("{}", "id", "t", "a/b", "1", `{"v":1,"encoding":"s3","claim_check":{"bucket":"bkt","key":"k","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0}}`, "")
	f.Add("x", "id", "t", "/b", "-1", `{"v":2}`, "")
	f.Fuzz(func(t *testing.T, body, id, typ, agg, version, meta, trace string) {
		a := map[string]string{wire.AttrID: id, wire.AttrType: typ, wire.AttrAggregate: agg, wire.AttrMeta: meta,
			wire.AttrAggregateVersion: version, wire.AttrTraceparent: trace}
		get := func(n string) (string, bool) { v, ok := a[n]; return v, ok && (v != "" || n == wire.AttrMeta) }
		d1, err := wire.Decode(body, get)
		if err != nil {
			require.ErrorIs(t, err, wire.ErrUndecodable)
			return
		}
		if d1.ClaimCheck != nil {
			require.NoError(t, d1.ClaimCheck.Validate())
			return
		}
		m := &core.Message{Record: driver.Record{Event: d1.Event, CreatedAt: d1.CreatedAt}}
		e1, err := wire.Encode(m, nil)
		if err != nil {
			return // a received message need not be one this encoder would send
		}
		d2, err := wire.Decode(e1.Body, attrs(e1))
		require.NoError(t, err)
		e2, err := wire.Encode(&core.Message{Record: driver.Record{Event: d2.Event, CreatedAt: d2.CreatedAt}}, nil)
		require.NoError(t, err)
		d3, err := wire.Decode(e2.Body, attrs(e2))
		require.NoError(t, err)
		require.Equal(t, d2, d3)
	})
}

// FuzzClaimCheck: a claim-check reference from a received message is validated before use, and
// Verify accepts a payload only when its size and SHA-256 match.
func FuzzClaimCheck(f *testing.F) {
	ok := wire.NewClaimCheck("bucket", "prefix/", []byte("payload"))
	b, _ := json.Marshal(ok)
	f.Add(b, []byte("payload"))
	f.Add([]byte(`{"bucket":"b","key":"","sha256":"zz","size":-1}`), []byte(nil))
	f.Add([]byte(`{"bucket":"UPPER","key":"k\u0000","sha256":"E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855","size":1099511627776}`), []byte{})
	f.Fuzz(func(t *testing.T, raw, payload []byte) {
		var c wire.ClaimCheck
		if json.Unmarshal(raw, &c) != nil || c.Validate() != nil {
			return
		}
		require.GreaterOrEqual(t, c.Size, int64(0))
		require.Len(t, c.SHA256, 64)
		if err := c.Verify(payload); err == nil {
			ref := wire.NewClaimCheck(c.Bucket, "", payload)
			require.Equal(t, int64(len(payload)), c.Size)
			require.Equal(t, ref.SHA256, strings.ToLower(c.SHA256))
		} else {
			require.ErrorIs(t, err, wire.ErrClaimCheckDigest)
		}
	})
}
