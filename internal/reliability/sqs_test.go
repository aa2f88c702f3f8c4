package reliability_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// sqsTarget injects the faults between the relays and the SQS emulator
// (OUTBOXKIT_AWS_ENDPOINT) instead of the database: the relays' SQS sink reaches the emulator
// through the proxy, the outbox is the memory adapter, the queue is FIFO. The sink's failed
// sends are the relay's to retry (per-event backoff from 1 s, the breaker), with the AWS SDK's
// default retryer under it, as a deployment would have them. After each fault every event
// committed before its end must be acknowledged within twice the fault plus 15 s (the backoff
// a fault built up); in the end the queue, read back with a client that bypasses the proxy,
// holds every event once (the FIFO queue deduplicates by event ID), in version order per key.
func sqsTarget(t *testing.T, hold time.Duration) faultTarget {
	ep := testkit.Need(t, testkit.AWSEndpoint)
	u, err := url.Parse(ep)
	require.NoError(t, err)
	direct := sqsClient(ep)
	q, err := direct.CreateQueue(t.Context(), &awssqs.CreateQueueInput{QueueName: aws.String(randomName("okr-") + ".fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	queueURL := aws.ToString(q.QueueUrl)
	t.Cleanup(func() {
		_, _ = direct.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(queueURL)})
	})
	proxy := newProxy(t, u.Host)
	sink, err := sqs.New(sqsClient("http://"+proxy.Listen), &sqs.Options{Logger: quiet})
	require.NoError(t, err)
	d := memoryDB(t, 16)
	d.route = queueURL
	store := d.relayStore(t, "")
	bound := 2*hold + 15*time.Second
	return faultTarget{
		run: func(ctx context.Context) faultResult {
			return injectFaults(ctx, d, store, recording(sink), proxy, hold, 50*time.Millisecond, bound)
		},
		check: func(t *testing.T, res faultResult) {
			checkFaults(t, res, bound, len(faults), "relay restarts")
			rep := readQueue(t, direct, queueURL, res.events)
			t.Logf("the queue: %s", rep)
			require.Zero(t, rep.Lost, "lost: acknowledged by the sink but not in the queue, or never sent")
			require.Zero(t, rep.Unknown)
			require.Zero(t, rep.Duplicates, "the FIFO queue deduplicates by event ID")
			require.Zero(t, rep.Regressions, "the queue keeps version order per key")
		},
	}
}

// readQueue receives (and deletes) every message of the queue and checks them against evs.
func readQueue(t *testing.T, c *awssqs.Client, queueURL string, evs []committed) report {
	ctx := t.Context()
	keyOf := map[string]string{}
	for _, ev := range evs {
		keyOf[ev.id] = ev.key
	}
	queued := newRecorder(0)
	// The emulator may lose an answer under load (the SDK retries the request): a lost receive
	// leaves its messages in flight, blocking their FIFO groups, until their visibility ends,
	// and a lost delete brings one back. So: a short visibility, patience longer than it, and
	// each SQS message counted once (a second SQS message of one event is still a duplicate).
	const visibility = 5
	seen := map[string]bool{}
	for last := time.Now(); len(queued.ids) < len(evs) && time.Since(last) < (visibility+7)*time.Second; {
		out, err := c.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL),
			MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: visibility, MessageAttributeNames: []string{"All"}})
		require.NoError(t, err)
		if len(out.Messages) == 0 {
			continue
		}
		last = time.Now()
		del := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(queueURL)}
		for i, m := range out.Messages {
			del.Entries = append(del.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			if seen[aws.ToString(m.MessageId)] {
				continue
			}
			seen[aws.ToString(m.MessageId)] = true
			id := aws.ToString(m.MessageAttributes["outbox.id"].StringValue)
			v, err := strconv.ParseInt(aws.ToString(m.MessageAttributes["outbox.aggregate_version"].StringValue), 10, 64)
			require.NoError(t, err)
			queued.got = append(queued.got, delivery{id, keyOf[id], v})
			queued.ids[id] = true
		}
		_, err = c.DeleteMessageBatch(ctx, del)
		require.NoError(t, err)
	}
	return queued.check(evs)
}

func sqsClient(endpoint string) *awssqs.Client {
	return awssqs.NewFromConfig(aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient:  &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
}
