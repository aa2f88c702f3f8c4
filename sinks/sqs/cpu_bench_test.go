package sqs_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// cannedSQS is an http.RoundTripper answering every SendMessageBatch with all of its entries
// successful, without a network or a JSON parser: every message of BenchmarkSendCPU has the same
// body, so the answer (with that body's MD5, which the SDK checks) depends only on the number of
// entries. It keeps the client's CPU cost alone in the profile.
type cannedSQS struct{ answers [11][]byte }

func newCannedSQS(body string) *cannedSQS {
	sum := md5.Sum([]byte(body))
	c := &cannedSQS{}
	for n := range c.answers {
		var sb strings.Builder
		sb.WriteString(`{"Failed":[],"Successful":[`)
		for k := range n {
			if k > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(`{"Id":"` + strconv.Itoa(k) + `","MessageId":"m","MD5OfMessageBody":"` + hex.EncodeToString(sum[:]) + `"}`)
		}
		sb.WriteString("]}")
		c.answers[n] = []byte(sb.String())
	}
	return c
}

var idField = []byte(`"Id":`)

// idCounter counts the "Id": fields of a request body written to it (the SDK writes the body
// in one piece, so no field is split across writes).
type idCounter struct{ n int }

func (c *idCounter) Write(p []byte) (int, error) {
	c.n += bytes.Count(p, idField)
	return len(p), nil
}

func (s *cannedSQS) RoundTrip(r *http.Request) (*http.Response, error) {
	var c idCounter
	if _, err := io.CopyBuffer(&c, r.Body, make([]byte, 32<<10)); err != nil {
		return nil, err
	}
	_ = r.Body.Close()
	n := min(c.n, 10)
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(bytes.NewReader(s.answers[n])),
		ContentLength: int64(len(s.answers[n]))}, nil
}

// BenchmarkSendCPU measures the CPU cost per message of the relay → SQS path on the client side:
// Sink.Send of 500 messages (1 KiB bodies, 64 partition keys, the attributes the relay sends)
// through the real aws-sdk-go-v2 client (serialisation, SigV4 signing, response parsing and
// checksum validation) to an in-process transport that answers at once. One op is one message.
// Profile with:
//
//	go test -run '^$' -bench SendCPU -benchtime 20000x -count 5 -cpuprofile /tmp/sqs.cpu ./sinks/sqs/
func BenchmarkSendCPU(b *testing.B) {
	for _, fifo := range []bool{false, true} {
		name := "standard"
		url := "http://sqs.invalid/000000000000/bench"
		if fifo {
			name, url = "fifo", url+".fifo"
		}
		b.Run(name, func(b *testing.B) {
			payload := make([]byte, 1024)
			for i := range payload {
				payload[i] = 'a' + byte(i%26)
			}
			client := awssqs.NewFromConfig(aws.Config{Region: "us-east-1",
				Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
				HTTPClient:  &http.Client{Transport: newCannedSQS(string(payload))}},
				func(o *awssqs.Options) { o.BaseEndpoint = aws.String("http://sqs.invalid") })
			sink, err := sqs.New(client, nil)
			require.NoError(b, err)
			const batch = 500
			msgs := make([]core.Message, batch)
			for i := range msgs {
				msgs[i] = event(url, strconv.Itoa(i%64), i/64, payload)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				for k, err := range sink.Send(ctx, msgs[:min(batch, b.N-i)]) {
					if err != nil {
						b.Fatalf("message %d: %v", k, err)
					}
				}
			}
		})
	}
}
