package sqs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

const (
	testRegion = "us-east-1"
	testKey    = "test"
	testSecret = "test"
)

// endpoint returns the emulator endpoint, skipping (or failing under CI) when it is unset.
func endpoint(t testing.TB) string {
	t.Helper()
	return testkit.Need(t, testkit.AWSEndpoint)
}

// counter counts requests per AWS operation (X-Amz-Target for JSON protocols).
type counter struct {
	base http.RoundTripper
	sendBatch,
	receive atomic.Int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	switch t := r.Header.Get("X-Amz-Target"); {
	case strings.HasSuffix(t, ".SendMessageBatch"):
		c.sendBatch.Add(1)
	case strings.HasSuffix(t, ".ReceiveMessage"):
		c.receive.Add(1)
	}
	return c.base.RoundTrip(r)
}

type env struct {
	ep   string
	sqs  *awssqs.Client
	s3   *s3.Client
	reqs *counter
}

func awsConfig(reqs *counter) aws.Config {
	return aws.Config{
		Region:      testRegion,
		Credentials: credentials.NewStaticCredentialsProvider(testKey, testSecret, ""),
		HTTPClient:  &http.Client{Transport: reqs},
	}
}

func setup(t testing.TB) *env {
	t.Helper()
	ep := endpoint(t)
	reqs := &counter{base: http.DefaultTransport}
	cfg := awsConfig(reqs)
	return &env{
		ep:   ep,
		sqs:  awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) }),
		s3:   s3.NewFromConfig(cfg, func(o *s3.Options) { o.BaseEndpoint = aws.String(ep); o.UsePathStyle = true }),
		reqs: reqs,
	}
}

func randName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func (e *env) queue(t testing.TB, name string, attrs map[string]string) string {
	t.Helper()
	if strings.HasSuffix(name, ".fifo") {
		if attrs == nil {
			attrs = map[string]string{}
		}
		attrs["FifoQueue"] = "true"
	}
	out, err := e.sqs.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(t, err)
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = e.sqs.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return url
}

func (e *env) queueARN(t testing.TB, url string) string {
	t.Helper()
	out, err := e.sqs.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

func (e *env) bucket(t testing.TB) string {
	t.Helper()
	name := randName("obk")
	_, err := e.s3.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(name)})
	require.NoError(t, err)
	return name
}

// receive reads and deletes up to n messages (all attributes) within a bounded wait; it returns
// what it got.
func (e *env) receive(t testing.TB, url string, n int, wait time.Duration) []types.Message {
	t.Helper()
	var got []types.Message
	seen := map[string]bool{}
	deadline := time.Now().Add(wait)
	for len(got) < n && time.Now().Before(deadline) {
		// A short visibility timeout: when the SDK retries a receive whose first answer was lost
		// (a cold or loaded emulator), the messages of the lost answer come back soon; seen
		// drops them when both answers arrived.
		out, err := e.sqs.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: int32(min(10, n-len(got))), WaitTimeSeconds: 1,
			VisibilityTimeout:           5,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err)
		for _, m := range out.Messages {
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				got = append(got, m)
			}
		}
		if len(out.Messages) > 0 {
			// Delete at once: a FIFO group hands out its next message only then.
			entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
			for k, m := range out.Messages {
				entries[k] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(k)), ReceiptHandle: m.ReceiptHandle}
			}
			_, err := e.sqs.DeleteMessageBatch(context.Background(), &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			require.NoError(t, err)
		}
	}
	return got
}

// count returns the queue's visible plus in-flight messages.
func (e *env) count(t testing.TB, url string) (visible, inflight int) {
	t.Helper()
	out, err := e.sqs.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	require.NoError(t, err)
	atoi := func(s string) int {
		n := 0
		for _, c := range s {
			n = n*10 + int(c-'0')
		}
		return n
	}
	return atoi(out.Attributes["ApproximateNumberOfMessages"]), atoi(out.Attributes["ApproximateNumberOfMessagesNotVisible"])
}

func attr(m types.Message, name string) string {
	v, ok := m.MessageAttributes[name]
	if !ok {
		return ""
	}
	return aws.ToString(v.StringValue)
}

// event builds message i of group g for dest.
func event(dest, g string, i int, payload []byte) core.Message {
	id := randName("ev")
	return core.Message{
		Record: driver.Record{Event: core.Event{
			ID: id, AggregateType: "order", AggregateID: g, AggregateVersion: int64(i + 1), Type: "order.updated",
			SchemaID: "order.v1", PartitionKey: "order/" + g, Payload: payload, Tenant: "acme",
			CausationID: "cause-" + id, CorrelationID: "corr-1",
			Headers: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "x-app": "test"},
		}, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)},
		Destination: dest, DedupID: id, GroupID: "order/" + g,
	}
}
