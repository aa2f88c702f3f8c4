package sns_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/internal/wire"
	"github.com/outboxkit/outbox/sinks/sns"
)

// TestConformance runs the sink suite against the emulator: a FIFO topic with a FIFO queue
// subscribed (ordered, with deduplication ids), and a standard topic with a standard queue,
// both with raw message delivery; the suite reads the queue. The failure hooks: a topic that
// does not exist (permanent), and a 503 answer to every request that carries the event
// (retryable). The FIFO sink sends at most 9 entries per request: the emulator publishes the
// 10th entry of a full batch second (see TestFIFOTopicToFIFOQueueWithRawDelivery).
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{true, false} {
		name := map[bool]string{true: "fifo", false: "standard"}[fifo]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conformance.RunSink(t, conformance.SinkHarness{
				New: func(t *testing.T) conformance.SinkFixture {
					e := setup(t)
					topic, url := e.subscribed(t, fifo, true)
					outage := &outage{base: http.DefaultTransport}
					client := awssns.NewFromConfig(aws.Config{
						Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
						HTTPClient: &http.Client{Transport: outage},
					}, func(o *awssns.Options) { o.BaseEndpoint = aws.String(testkit.Need(t, testkit.AWSEndpoint)) })
					o := &sns.Options{MaxRequestBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)}
					if fifo {
						o.MaxBatchEntries = 9
					}
					sink, err := sns.New(client, o)
					require.NoError(t, err)
					return conformance.SinkFixture{
						Sink:        sink,
						Destination: topic,
						Received:    e.readBack(url, fifo),
						RejectPermanent: func(m *core.Message) {
							m.Destination = strings.TrimSuffix(topic, ".fifo") + "-missing"
							if fifo {
								m.Destination += ".fifo"
							}
						},
						RejectRetryable: func(m *core.Message) { outage.add(m.ID) },
					}
				},
				Ordered:         fifo,
				DedupID:         fifo,
				MaxMessageBytes: 64 << 10,
				ErrTooLarge:     sns.ErrMessageTooLarge,
			})
		})
	}
}

// readBack returns a SinkFixture.Received of the subscribed queue url: it receives (and
// deletes at once, so that a FIFO group hands out its next message) and decodes what the queue
// holds.
func (e *env) readBack(url string, fifo bool) func(context.Context, int) ([]conformance.ReceivedMessage, error) {
	var got []conformance.ReceivedMessage
	seen := map[string]bool{}
	return func(ctx context.Context, atLeast int) ([]conformance.ReceivedMessage, error) {
		for len(got) < atLeast && ctx.Err() == nil {
			out, err := e.sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
				QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 5,
				MessageAttributeNames:       []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			})
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				return nil, err
			}
			var del []types.DeleteMessageBatchRequestEntry
			for _, m := range out.Messages {
				del = append(del, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(len(del))), ReceiptHandle: m.ReceiptHandle})
				if seen[aws.ToString(m.MessageId)] {
					continue
				}
				seen[aws.ToString(m.MessageId)] = true
				d, err := wire.Decode(aws.ToString(m.Body), func(name string) (string, bool) {
					v, ok := m.MessageAttributes[name]
					return aws.ToString(v.StringValue), ok
				})
				if err != nil {
					return nil, err
				}
				r := conformance.ReceivedMessage{EventID: d.Event.ID, Payload: d.Event.Payload, Headers: d.Event.Headers,
					Key: d.Event.PartitionKey, DedupID: m.Attributes["MessageDeduplicationId"]}
				if fifo {
					r.Key = m.Attributes["MessageGroupId"]
				}
				got = append(got, r)
			}
			if len(del) > 0 {
				if _, err := e.sqs.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: del}); err != nil && ctx.Err() == nil {
					return nil, err
				}
			}
		}
		return slices.Clone(got), nil
	}
}

// outage answers 503 Service Unavailable, without forwarding it, to every request whose body
// carries one of the event IDs added.
type outage struct {
	base http.RoundTripper
	mu   sync.Mutex
	ids  [][]byte
}

func (o *outage) add(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ids = append(o.ids, []byte(id))
}

func (o *outage) RoundTrip(r *http.Request) (*http.Response, error) {
	o.mu.Lock()
	ids := o.ids
	o.mu.Unlock()
	if len(ids) == 0 || r.Body == nil {
		return o.base.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if bytes.Contains(body, id) {
			return &http.Response{
				StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"text/xml"}},
				Body: io.NopCloser(strings.NewReader(`<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Receiver</Type>` +
					`<Code>ServiceUnavailable</Code><Message>conformance: injected outage</Message></Error><RequestId>0</RequestId></ErrorResponse>`)),
				Request: r,
			}, nil
		}
	}
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	return o.base.RoundTrip(r)
}
