package wire

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// PutClaimCheck stores payload in S3 under ref. The key is content-addressed, so storing the
// same payload again (a resend) writes the same object.
func PutClaimCheck(ctx context.Context, client *s3.Client, ref *ClaimCheck, payload []byte) error {
	_, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(ref.Bucket),
		Key:           aws.String(ref.Key),
		Body:          bytes.NewReader(payload),
		ContentLength: aws.Int64(int64(len(payload))),
		ContentType:   aws.String("application/octet-stream"),
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
