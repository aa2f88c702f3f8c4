package sqs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// fakeS3 serves every GET with an object of size bytes and counts the requests.
func fakeS3(t testing.TB, size int) (*s3.Client, *atomic.Int64) {
	t.Helper()
	var gets atomic.Int64
	body := strings.Repeat("x", size)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	client := s3.New(s3.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	})
	return client, &gets
}

func testConsumer(t testing.TB, name string, opts *ConsumerOptions) (*Consumer[*memory.Tx], error) {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	client := awssqs.New(awssqs.Options{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")})
	return NewConsumer(client, "https://queue.example/123/q", inbox, name,
		func(context.Context, *memory.Tx, *Delivery) error { return nil }, opts)
}

// claimChecked returns an SQS message whose payload is claim-checked in bucket with a claimed
// size.
func claimChecked(t testing.TB, bucket string, size int64) *types.Message {
	t.Helper()
	sum := sha256.Sum256(nil)
	ref := wire.ClaimCheck{Bucket: bucket, Key: "k", SHA256: hex.EncodeToString(sum[:]), Size: size}
	enc, err := wire.Encode(&core.Message{Record: driver.Record{Event: core.Event{
		ID: "e1", Type: "t", AggregateType: "a", AggregateID: "1", PartitionKey: "a/1"}}}, &ref)
	require.NoError(t, err)
	m := &types.Message{Body: aws.String(enc.Body), MessageId: aws.String("m1"), MessageAttributes: map[string]types.MessageAttributeValue{}}
	for _, a := range enc.Attrs {
		m.MessageAttributes[a.Name] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(a.Value)}
	}
	return m
}

func TestClaimCheckBucketsDenyByDefault(t *testing.T) {
	t.Parallel()
	client, gets := fakeS3(t, 0)
	c, err := testConsumer(t, "c", &ConsumerOptions{S3: client})
	require.NoError(t, err)
	_, err = c.decode(context.Background(), claimChecked(t, "attacker-bucket", 0))
	require.ErrorIs(t, err, ErrClaimCheckBucket)
	require.Zero(t, gets.Load(), "no S3 request for a bucket that is not allowed")

	c, err = testConsumer(t, "c", &ConsumerOptions{S3: client, ClaimCheckBuckets: []string{"mine"}})
	require.NoError(t, err)
	_, err = c.decode(context.Background(), claimChecked(t, "attacker-bucket", 0))
	require.ErrorIs(t, err, ErrClaimCheckBucket)
	d, err := c.decode(context.Background(), claimChecked(t, "mine", 0))
	require.NoError(t, err)
	require.Empty(t, d.Event.Payload)
}

func TestClaimCheckSizeCheckedBeforeReading(t *testing.T) {
	t.Parallel()
	client, gets := fakeS3(t, 64<<10)
	c, err := testConsumer(t, "c", &ConsumerOptions{S3: client, ClaimCheckBuckets: []string{"mine"}, MaxClaimCheckBytes: 1 << 20})
	require.NoError(t, err)
	// A reference claiming 1 TiB is refused before any request.
	_, err = c.decode(context.Background(), claimChecked(t, "mine", 1<<40))
	require.ErrorIs(t, err, ErrClaimCheckTooLarge)
	require.Zero(t, gets.Load())
	// A reference claiming 10 bytes of a 64 KiB object fails on the object's length.
	_, err = c.decode(context.Background(), claimChecked(t, "mine", 10))
	require.ErrorIs(t, err, ErrClaimCheckDigest)
	require.Contains(t, err.Error(), "has 65536 bytes, want 10")

	_, err = testConsumer(t, "c", &ConsumerOptions{MaxClaimCheckBytes: core.MaxLimitPayloadBytes + 1})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}

// NewConsumer refuses the names Inbox.Process refuses, instead of dead-lettering every message.
func TestNewConsumerValidatesNameAndBounds(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "a\nb", strings.Repeat("n", 300), "bad\u0085", "x\xff"} {
		_, err := testConsumer(t, name, nil)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe, "%q", name)
		require.Equal(t, "consumer", oe.Field)
		require.Error(t, driver.CheckConsumer(name))
	}
	for _, o := range []ConsumerOptions{{Concurrency: MaxConcurrency + 1}, {Pollers: MaxPollers + 1}, {Concurrency: 1 << 40}} {
		_, err := testConsumer(t, "c", &o)
		require.ErrorIs(t, err, core.ErrInvalidOptions, "%+v", o)
	}
}

// FuzzConsumerDecode: the consumer's decode (SQS attributes or an SNS envelope in the body)
// never panics, never fetches a claim check from a bucket it was not given, and fails only with
// the documented errors.
func FuzzConsumerDecode(f *testing.F) {
	ok := claimChecked(f, "mine", 0)
	meta := aws.ToString(ok.MessageAttributes[wire.AttrMeta].StringValue)
	f.Add(aws.ToString(ok.Body), "e1", "t", "a/1", meta)
	f.Add(`{"Type":"Notification","Message":"hello","MessageAttributes":{"outbox.id":{"Type":"String","Value":"e1"},"outbox.type":{"Type":"String","Value":"t"},"outbox.aggregate":{"Type":"String","Value":"a/1"},"outbox.meta":{"Type":"String","Value":"{\"v\":1}"}}}`, "", "", "", "")
	f.Add("hello", "e1", "t", "a/1", `{"v":1,"encoding":"s3","claim_check":{"bucket":"other","key":"k","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":1099511627776}}`)
	f.Add(" {", "e1", "t", "a", `{"v":1}`)
	client, gets := fakeS3(f, 0)
	c, err := testConsumer(f, "c", &ConsumerOptions{S3: client, ClaimCheckBuckets: []string{"mine"}, MaxClaimCheckBytes: 1 << 10})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body, id, typ, agg, meta string) {
		m := &types.Message{Body: aws.String(body), MessageId: aws.String("m"), MessageAttributes: map[string]types.MessageAttributeValue{}}
		for name, v := range map[string]string{wire.AttrID: id, wire.AttrType: typ, wire.AttrAggregate: agg, wire.AttrMeta: meta} {
			if v != "" {
				m.MessageAttributes[name] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
			}
		}
		before := gets.Load()
		d, err := c.decode(context.Background(), m)
		if err != nil {
			require.True(t, errors.Is(err, ErrUndecodable) || errors.Is(err, ErrClaimCheckBucket) ||
				errors.Is(err, ErrClaimCheckTooLarge) || errors.Is(err, ErrClaimCheckDigest), "%v", err)
			if errors.Is(err, ErrClaimCheckBucket) || errors.Is(err, ErrClaimCheckTooLarge) {
				require.Equal(t, before, gets.Load(), "no S3 request before the checks")
			}
			return
		}
		require.NotEmpty(t, d.Event.ID)
		require.NotNil(t, d.Event.Payload)
	})
}
