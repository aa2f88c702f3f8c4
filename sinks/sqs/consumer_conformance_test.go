package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// TestConsumerConformance runs the consumer suite against the SQS consumer on the emulator: a
// standard queue whose redrive policy (maxReceiveCount 3) is the dead-letter path, the sink of
// this package to publish, and the in-memory inbox.
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	e := setup(t)
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		url, dlq := dlqPair(t, e, randName("conformance"), 3)
		sink, err := sqs.New(e.sqs, nil)
		require.NoError(t, err)
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: url,
			Sink:        sink,
			PublishUndecodable: func(ctx context.Context) error {
				_, err := e.sqs.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("not an outbox message")})
				return err
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				c, err := sqs.NewConsumer(e.sqs, url, inbox, consumer, func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
					return h(ctx, tx, &d.Event)
				}, &sqs.ConsumerOptions{WaitTime: time.Second, VisibilityTimeout: 2 * time.Second, ExtendEvery: 500 * time.Millisecond,
					Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				t.Cleanup(func() {
					cancel()
					require.NoError(t, <-done)
				})
			},
			Pending:     func(ctx context.Context) (int, error) { return queueSize(ctx, e, url) },
			DeadLetters: func(ctx context.Context) (int, error) { return queueSize(ctx, e, dlq) },
		}
	})
	conformance.RunConsumer(t, h)
}

// queueSize returns the queue's visible plus in-flight messages.
func queueSize(ctx context.Context, e *env, url string) (int, error) {
	out, err := e.sqs.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		v, err := strconv.Atoi(out.Attributes[string(a)])
		if err != nil {
			return 0, fmt.Errorf("queue attribute %s: %w", a, err)
		}
		n += v
	}
	return n, nil
}
