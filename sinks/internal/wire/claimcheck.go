package wire

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/encryption"
)

// S3 user metadata keys of a claim-check object (sent as x-amz-meta-<key>; S3 returns them
// lower-case). See ObjectMetaOf for when each is present.
const (
	MetaSHA256      = "outboxkit-sha256"       // lowercase hex SHA-256 of the object's bytes
	MetaEncryption  = "outboxkit-encryption"   // EncryptionAES256GCMv1 when the payload is an envelope
	MetaContentType = "outboxkit-content-type" // the event's content type (of the plaintext)
	MetaEventID     = "outboxkit-event-id"     // the event ID
	MetaType        = "outboxkit-type"         // the event type
	MetaSchemaID    = "outboxkit-schema-id"    // the event's SchemaID, when set
	MetaKeyID       = "outboxkit-key-id"       // the envelope's key ID
)

// EncryptionAES256GCMv1 is the MetaEncryption value of a version 1 envelope of package
// encryption (AES-256-GCM).
const EncryptionAES256GCMv1 = "aes-256-gcm/v1"

// DefaultContentType is the content type of a payload whose event has no usable
// "content-type" header, and the S3 Content-Type of every encrypted payload.
const DefaultContentType = "application/octet-stream"

// HeaderContentType is the event header that names the payload's content type (the one the
// CloudEvents sinks send as datacontenttype).
const HeaderContentType = "content-type"

// MaxObjectMetaBytes is S3's bound on the user metadata of an object: the bytes of every key
// and value together.
const MaxObjectMetaBytes = 2048

// ObjectMeta is what a claim-check object carries besides its bytes.
type ObjectMeta struct {
	ContentType string            // the object's S3 Content-Type
	Metadata    map[string]string // its S3 user metadata, keys above
}

// ObjectMetaOf returns the metadata of the claim-check object ref of ev's payload. It is a pure
// function of its arguments, so a resend writes the same metadata.
//
// The content type is the event's "content-type" header when set, else DefaultContentType.
// It is the object's Content-Type, except for an envelope of package encryption (the payload
// starts with its magic and encryption.Parse reads its header): the object then holds
// ciphertext, its Content-Type is DefaultContentType, MetaContentType still names the
// plaintext's type, and MetaEncryption and MetaKeyID describe the envelope. A payload that
// starts like an envelope but does not parse is described as a clear one.
//
// The fields are added in the order of the constants above; a field is left out when its
// value is empty, is not printable ASCII (0x20-0x7E, no space at either end: S3 user metadata
// travels as HTTP headers) or would take the keys and values over MaxObjectMetaBytes. Nothing
// is truncated. With the core's limits on events the fields before MetaKeyID take at most
// 1,080 bytes, so only a key ID (up to 2048 bytes) is ever left out for size, and one of up
// to 952 bytes never is. An unusable content-type header leaves MetaContentType out and the
// Content-Type DefaultContentType.
func ObjectMetaOf(ref *ClaimCheck, ev *core.Event) ObjectMeta {
	om := ObjectMeta{ContentType: DefaultContentType, Metadata: make(map[string]string, 7)}
	contentType := DefaultContentType
	if ct := ev.Headers[HeaderContentType]; ct != "" {
		contentType = ct
	}
	var encAlg, keyID string
	if env, err := encryption.Parse(ev.Payload); err == nil {
		encAlg, keyID = EncryptionAES256GCMv1, env.KeyID
	} else if metaValueOK(contentType) {
		om.ContentType = contentType
	}
	size := 0
	for _, f := range [...]struct{ k, v string }{
		{MetaSHA256, ref.SHA256},
		{MetaEncryption, encAlg},
		{MetaContentType, contentType},
		{MetaEventID, ev.ID},
		{MetaType, ev.Type},
		{MetaSchemaID, ev.SchemaID},
		{MetaKeyID, keyID},
	} {
		if !metaValueOK(f.v) || size+len(f.k)+len(f.v) > MaxObjectMetaBytes {
			continue
		}
		om.Metadata[f.k] = f.v
		size += len(f.k) + len(f.v)
	}
	return om
}

// metaValueOK reports whether v can be an S3 user metadata value (or Content-Type) as is:
// not empty, printable ASCII, no space at either end (HTTP trims those).
func metaValueOK(v string) bool {
	if v == "" || v[0] == ' ' || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// PutClaimCheck stores ev's payload in S3 under ref, with the Content-Type and user metadata
// of ObjectMetaOf. The key is content-addressed, so storing the same payload again (a resend)
// writes the same object.
func PutClaimCheck(ctx context.Context, client *s3.Client, ref *ClaimCheck, ev *core.Event) error {
	om := ObjectMetaOf(ref, ev)
	_, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(ref.Bucket),
		Key:           aws.String(ref.Key),
		Body:          bytes.NewReader(ev.Payload),
		ContentLength: aws.Int64(int64(len(ev.Payload))),
		ContentType:   aws.String(om.ContentType),
		Metadata:      om.Metadata,
	})
	if err != nil {
		return fmt.Errorf("claim check: put s3://%s/%s: %w", ref.Bucket, ref.Key, err)
	}
	return nil
}

// FetchClaimCheck reads the payload ref points to and verifies its size and SHA-256 digest
// (ErrClaimCheckDigest when they do not match). A reference claiming more than maxBytes fails
// with ErrClaimCheckTooLarge before any request; an object whose length differs from the claimed
// size fails before its body is read; at most the claimed size plus one byte is ever read.
func FetchClaimCheck(ctx context.Context, client *s3.Client, ref *ClaimCheck, maxBytes int64) ([]byte, error) {
	if ref.Size > maxBytes {
		return nil, fmt.Errorf("%w: s3://%s/%s claims %d bytes, the limit is %d", ErrClaimCheckTooLarge, ref.Bucket, ref.Key, ref.Size, maxBytes)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(ref.Bucket), Key: aws.String(ref.Key)})
	if err != nil {
		return nil, fmt.Errorf("claim check: get s3://%s/%s: %w", ref.Bucket, ref.Key, err)
	}
	defer out.Body.Close()
	if out.ContentLength != nil && *out.ContentLength != ref.Size {
		return nil, fmt.Errorf("%w: s3://%s/%s has %d bytes, want %d", ErrClaimCheckDigest, ref.Bucket, ref.Key, *out.ContentLength, ref.Size)
	}
	b, err := io.ReadAll(io.LimitReader(out.Body, ref.Size+1))
	if err != nil {
		return nil, fmt.Errorf("claim check: read s3://%s/%s: %w", ref.Bucket, ref.Key, err)
	}
	if err := ref.Verify(b); err != nil {
		return nil, err
	}
	return b, nil
}
