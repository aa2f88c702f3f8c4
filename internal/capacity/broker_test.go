package capacity_test

import (
	"context"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/capacity"
)

func TestMain(m *testing.M) {
	capacity.MaybeServeChild()
	os.Exit(m.Run())
}

// The sampled delays have the model's median and 99th percentile.
func TestLatencyQuantiles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := make([]time.Duration, 200000)
	for i := range d {
		d[i] = capacity.Model.Sample(r)
	}
	slices.Sort(d)
	p50, p99 := d[len(d)/2], d[len(d)*99/100]
	require.InEpsilon(t, float64(capacity.Model.P50), float64(p50), 0.03, "p50 %v", p50)
	require.InEpsilon(t, float64(capacity.Model.P99), float64(p99), 0.05, "p99 %v", p99)
	require.Zero(t, capacity.Latency{}.Sample(r))
}

func sqsClient(endpoint string) *awssqs.Client {
	return awssqs.NewFromConfig(aws.Config{Region: "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", "")},
		func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}

// The broker answers the SDK's SendMessageBatch with every entry successful and MD5s that pass
// the SDK's checksum validation; other operations get a typed error.
func TestBrokerAnswersSendMessageBatch(t *testing.T) {
	b, err := capacity.NewBroker(capacity.Latency{}, "", 1)
	require.NoError(t, err)
	srv := httptest.NewServer(b)
	defer srv.Close()
	c := sqsClient(srv.URL)
	ctx := context.Background()
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(srv.URL + "/000000000000/q")}
	for k := range 10 {
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)),
			MessageBody:       aws.String("body é " + strconv.Itoa(k)),
			MessageAttributes: map[string]types.MessageAttributeValue{"a": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
	}
	out, err := c.SendMessageBatch(ctx, in)
	require.NoError(t, err)
	require.Empty(t, out.Failed)
	require.Len(t, out.Successful, 10)
	for k, s := range out.Successful {
		require.Equal(t, strconv.Itoa(k), aws.ToString(s.Id))
	}
	reqs, entries := b.Counts()
	require.Equal(t, int64(1), reqs)
	require.Equal(t, int64(10), entries)
	_, err = c.PurgeQueue(ctx, &awssqs.PurgeQueueInput{QueueUrl: in.QueueUrl})
	require.ErrorContains(t, err, "UnsupportedOperation")
}

// A child broker process starts, answers and stops with the test.
func TestChildBroker(t *testing.T) {
	ep := capacity.StartChild(t, capacity.Latency{P50: time.Millisecond, P99: 2 * time.Millisecond}, "")
	out, err := sqsClient(ep).SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{
		QueueUrl: aws.String(ep + "/000000000000/q"),
		Entries:  []types.SendMessageBatchRequestEntry{{Id: aws.String("0"), MessageBody: aws.String("x")}}})
	require.NoError(t, err)
	require.Len(t, out.Successful, 1)
}
