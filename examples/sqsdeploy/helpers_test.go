package sqsdeploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
)

func dsn(tb testing.TB) string {
	return testkit.Need(tb, testkit.PostgresDSN)
}

func awsEndpoint(tb testing.TB) string {
	return testkit.Need(tb, testkit.AWSEndpoint)
}

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// schema creates a fresh schema, dropped when the test ends, and returns its name.
func schema(tb testing.TB, admin *pgxpool.Pool, prefix string) string {
	tb.Helper()
	name := randName(prefix)
	_, err := admin.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
	require.NoError(tb, err)
	tb.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			tb.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func pool(tb testing.TB, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dsn(tb))
	require.NoError(tb, err)
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(tb, err)
	tb.Cleanup(p.Close)
	return p
}

// awsConfig is a static configuration for the emulator; transport may be nil.
func awsConfig(transport http.RoundTripper) aws.Config {
	if transport == nil {
		transport = http.DefaultTransport
	}
	return aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: transport},
	}
}

func sqsClient(ep string, transport http.RoundTripper) *awssqs.Client {
	return awssqs.NewFromConfig(awsConfig(transport), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) })
}

func snsClient(ep string) *awssns.Client {
	return awssns.NewFromConfig(awsConfig(nil), func(o *awssns.Options) { o.BaseEndpoint = aws.String(ep) })
}

// queue creates an SQS queue (FIFO when the name ends in ".fifo"), deleted when the test ends.
func queue(tb testing.TB, c *awssqs.Client, name string) (url, arn string) {
	tb.Helper()
	ctx := context.Background()
	attrs := map[string]string{}
	if strings.HasSuffix(name, ".fifo") {
		attrs["FifoQueue"] = "true"
	}
	out, err := c.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	require.NoError(tb, err)
	url = aws.ToString(out.QueueUrl)
	tb.Cleanup(func() {
		_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	qa, err := c.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(tb, err)
	return url, qa.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// fifoTopicToQueue creates an SNS FIFO topic and an SQS FIFO queue subscribed to it with raw
// message delivery, the deployment's broker setup.
func fifoTopicToQueue(tb testing.TB, sq *awssqs.Client, sn *awssns.Client) (topicARN, queueURL string) {
	tb.Helper()
	ctx := context.Background()
	name := randName("orders-") + ".fifo"
	queueURL, queueARN := queue(tb, sq, name)
	tp, err := sn.CreateTopic(ctx, &awssns.CreateTopicInput{Name: aws.String(name), Attributes: map[string]string{"FifoTopic": "true"}})
	require.NoError(tb, err)
	topicARN = aws.ToString(tp.TopicArn)
	tb.Cleanup(func() {
		_, _ = sn.DeleteTopic(context.Background(), &awssns.DeleteTopicInput{TopicArn: aws.String(topicARN)})
	})
	_, err = sn.Subscribe(ctx, &awssns.SubscribeInput{TopicArn: aws.String(topicARN), Protocol: aws.String("sqs"),
		Endpoint: aws.String(queueARN), Attributes: map[string]string{"RawMessageDelivery": "true"}})
	require.NoError(tb, err)
	return topicARN, queueURL
}

// testLogger sends logs to t.Log (shown for failed tests and with -v). Stop everything that
// logs through it before the test returns.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
