package sqs_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/wire"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// BenchmarkSinkVsBareBatchLoop sends the same N messages (1 KiB bodies, 64 partition keys)
// three ways in every iteration, interleaved, against the emulator:
//
//   - sink: the Sink as the relay drives it (Send calls of 500 messages, default options),
//   - sink_c1: the same with Concurrency 1 (no parallel requests),
//   - bare: a hand-written sequential SendMessageBatch loop of 10 entries with the same bodies
//     and attributes (built with the same wire encoder, inside the timed section).
//
// It reports msgs/s for each. Run:
//
//	OUTBOXKIT_AWS_ENDPOINT=... go test -run '^$' -bench SinkVsBare -benchtime 3x ./sinks/sqs/
func BenchmarkSinkVsBareBatchLoop(b *testing.B) {
	for _, fifo := range []bool{false, true} {
		b.Run(fmt.Sprint("fifo=", fifo), func(b *testing.B) { benchSinkVsBare(b, fifo) })
	}
}

func benchSinkVsBare(b *testing.B, fifo bool) {
	const n, relayBatch, keys = 5000, 500, 64
	e := setup(b)
	name := randName("bench")
	if fifo {
		name += ".fifo"
	}
	url := e.queue(b, name, nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(b, err)
	sink1, err := sqs.New(e.sqs, &sqs.Options{Concurrency: 1})
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	mk := func() []core.Message {
		msgs := make([]core.Message, n)
		for i := range msgs {
			msgs[i] = event(url, strconv.Itoa(i%keys), i/keys, payload)
		}
		return msgs
	}
	bare := func(msgs []core.Message) time.Duration {
		start := time.Now()
		entries := make([]types.SendMessageBatchRequestEntry, 0, n)
		for i := range msgs {
			enc, err := wire.Encode(&msgs[i], nil)
			require.NoError(b, err)
			attrs := map[string]types.MessageAttributeValue{}
			for _, a := range enc.Attrs {
				attrs[a.Name] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(a.Value)}
			}
			en := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i % 10)), MessageBody: aws.String(enc.Body), MessageAttributes: attrs}
			if fifo {
				en.MessageGroupId = aws.String(msgs[i].GroupID)
				en.MessageDeduplicationId = aws.String(msgs[i].ID)
			}
			entries = append(entries, en)
		}
		for i := 0; i < len(entries); i += 10 {
			out, err := e.sqs.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries[i:min(i+10, len(entries))]})
			require.NoError(b, err)
			require.Empty(b, out.Failed)
		}
		return time.Since(start)
	}
	viaSink := func(s *sqs.Sink, msgs []core.Message) time.Duration {
		start := time.Now()
		for i := 0; i < len(msgs); i += relayBatch {
			chunk := msgs[i:min(i+relayBatch, len(msgs))]
			for _, err := range s.Send(context.Background(), chunk) {
				require.NoError(b, err)
			}
		}
		return time.Since(start)
	}
	var elapsedSink, elapsedSink1, elapsedBare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			elapsedSink += viaSink(sink, mk())
			elapsedSink1 += viaSink(sink1, mk())
			elapsedBare += bare(mk())
		} else {
			elapsedBare += bare(mk())
			elapsedSink1 += viaSink(sink1, mk())
			elapsedSink += viaSink(sink, mk())
		}
		b.StopTimer()
		_, err := e.sqs.PurgeQueue(context.Background(), &awssqs.PurgeQueueInput{QueueUrl: aws.String(url)})
		require.NoError(b, err)
		b.StartTimer()
	}
	total := float64(n * b.N)
	b.ReportMetric(total/elapsedSink.Seconds(), "sink_msgs/s")
	b.ReportMetric(total/elapsedSink1.Seconds(), "sink_c1_msgs/s")
	b.ReportMetric(total/elapsedBare.Seconds(), "bare_msgs/s")
}
