package wire_test

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/encryption"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// fixedKey is a KeyProvider whose every tenant's current key is id; it wraps a data key as
// itself (enough for encryption.Parse, which decrypts nothing).
type fixedKey struct{ id string }

func (k fixedKey) CurrentKey(context.Context, string) (string, error) { return k.id, nil }
func (k fixedKey) WrapKey(_ context.Context, _, _ string, dk []byte) ([]byte, error) {
	return bytes.Clone(dk), nil
}
func (k fixedKey) UnwrapKey(_ context.Context, _, _ string, w []byte) ([]byte, error) {
	return bytes.Clone(w), nil
}

// encrypt returns m with its payload sealed by keys.
func encrypt(t *testing.T, keys encryption.KeyProvider, m core.Message) core.Message {
	t.Helper()
	c, err := encryption.New(encryption.Options{Keys: keys})
	require.NoError(t, err)
	evs := []core.Event{m.Event}
	require.NoError(t, c.EncryptPayloads(t.Context(), evs))
	m.Event = evs[0]
	require.True(t, encryption.IsEnvelope(m.Payload))
	return m
}

func metaSize(md map[string]string) int {
	n := 0
	for k, v := range md {
		n += len(k) + len(v)
	}
	return n
}

func TestClaimCheckObjectMeta(t *testing.T) {
	t.Parallel()
	payload := []byte(strings.Repeat("x", 1000))

	// A clear payload without a content-type header.
	m := fullMessage(payload)
	ref := wire.NewClaimCheck("bkt", "p/", m.Payload)
	require.Equal(t, wire.ObjectMeta{ContentType: "application/octet-stream", Metadata: map[string]string{
		"outboxkit-sha256":       ref.SHA256,
		"outboxkit-content-type": "application/octet-stream",
		"outboxkit-event-id":     "01J-id",
		"outboxkit-type":         "order.created",
		"outboxkit-schema-id":    "order.v1",
	}}, wire.ObjectMetaOf(&ref, &m.Event))

	// With a content-type header, and without a schema id.
	m.Headers["content-type"] = "application/json; charset=utf-8"
	m.SchemaID = ""
	got := wire.ObjectMetaOf(&ref, &m.Event)
	require.Equal(t, "application/json; charset=utf-8", got.ContentType)
	require.Equal(t, "application/json; charset=utf-8", got.Metadata["outboxkit-content-type"])
	require.NotContains(t, got.Metadata, "outboxkit-schema-id")
	require.NotContains(t, got.Metadata, "outboxkit-encryption")
	require.NotContains(t, got.Metadata, "outboxkit-key-id")
	require.Equal(t, got, wire.ObjectMetaOf(&ref, &m.Event), "a pure function: a resend writes the same")

	// A content type that is not printable ASCII is left out; the object is octet-stream.
	m.Headers["content-type"] = "text/plain; name=\u00e9t\u00e9"
	got = wire.ObjectMetaOf(&ref, &m.Event)
	require.Equal(t, "application/octet-stream", got.ContentType)
	require.NotContains(t, got.Metadata, "outboxkit-content-type")
	require.Equal(t, "01J-id", got.Metadata["outboxkit-event-id"])

	// An envelope of package encryption (a keyring file's current key).
	path := filepath.Join(t.TempDir(), "keyring.json")
	keyID, err := encryption.RotateKey(path, "acme", time.Now())
	require.NoError(t, err)
	kr, err := encryption.OpenKeyring(path)
	require.NoError(t, err)
	m = fullMessage(payload)
	m.Headers["content-type"] = "application/json"
	enc := encrypt(t, kr, m)
	ref = wire.NewClaimCheck("bkt", "p/", enc.Payload)
	require.Equal(t, wire.ObjectMeta{ContentType: "application/octet-stream", Metadata: map[string]string{
		"outboxkit-sha256":       ref.SHA256,
		"outboxkit-encryption":   "aes-256-gcm/v1",
		"outboxkit-content-type": "application/json", // of the plaintext
		"outboxkit-event-id":     "01J-id",
		"outboxkit-type":         "order.created",
		"outboxkit-schema-id":    "order.v1",
		"outboxkit-key-id":       keyID,
	}}, wire.ObjectMetaOf(&ref, &enc.Event))

	// Something that starts like an envelope but does not parse is described as clear.
	m.Payload = []byte("\x00OKE\x09 not an envelope")
	ref = wire.NewClaimCheck("bkt", "p/", m.Payload)
	got = wire.ObjectMetaOf(&ref, &m.Event)
	require.Equal(t, "application/json", got.ContentType)
	require.NotContains(t, got.Metadata, "outboxkit-encryption")
}

// Every field at the core's longest: a key ID of up to 952 bytes fits in S3's 2 KB of user
// metadata, a longer one (envelopes allow 2048) is left out whole, never truncated; so is a key
// ID that is not printable ASCII. The other fields are always there.
func TestClaimCheckObjectMetaLongKeyID(t *testing.T) {
	t.Parallel()
	m := fullMessage([]byte("payload"))
	m.ID = strings.Repeat("i", 128)
	m.Type = strings.Repeat("t", 255)
	m.SchemaID = strings.Repeat("s", 255)
	m.Headers["content-type"] = strings.Repeat("c", 255)
	for _, tc := range []struct {
		keyID string
		kept  bool
	}{
		{strings.Repeat("k", 952), true},
		{strings.Repeat("k", 953), false},
		{strings.Repeat("k", 2048), false},
		{"arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab", true},
		{"cl\u00e9", false},
		{"trailing ", false},
	} {
		enc := encrypt(t, fixedKey{tc.keyID}, m)
		ref := wire.NewClaimCheck("bkt", "", enc.Payload)
		got := wire.ObjectMetaOf(&ref, &enc.Event)
		require.LessOrEqual(t, metaSize(got.Metadata), wire.MaxObjectMetaBytes)
		require.Len(t, got.Metadata, 6+btoi(tc.kept), "key ID of %d bytes", len(tc.keyID))
		require.Equal(t, "aes-256-gcm/v1", got.Metadata["outboxkit-encryption"])
		require.Equal(t, m.ID, got.Metadata["outboxkit-event-id"])
		require.Equal(t, m.SchemaID, got.Metadata["outboxkit-schema-id"])
		if tc.kept {
			require.Equal(t, tc.keyID, got.Metadata["outboxkit-key-id"])
		} else {
			require.NotContains(t, got.Metadata, "outboxkit-key-id")
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
