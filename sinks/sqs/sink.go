package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/internal/sinkkit"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Size limits of a request.
const (
	DefaultMaxRequestBytes = sinkkit.DefaultMaxRequestBytes
	MaxRequestBytesLimit   = sinkkit.MaxRequestBytesLimit
	MaxBatchEntries        = sinkkit.MaxBatchEntries
	DefaultConcurrency     = sinkkit.DefaultConcurrency
)

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// MaxRequestBytes bounds the size of one request (the sum, over its entries, of the body
	// plus every attribute's name, data type and value) and therefore of one message. A
	// message larger than this goes to S3 when ClaimCheck is set and is a permanent
	// ErrMessageTooLarge otherwise. Default 256 KiB; at most 1 MiB (SQS's limit). Keep it at or
	// below the queues' MaximumMessageSize.
	MaxRequestBytes int
	// MaxBatchEntries is the most entries of one SendMessageBatch request, 1 to 10. Default 10.
	MaxBatchEntries int
	// Concurrency is the most requests one Send call has in flight (batches of different
	// groups; one group never has two). Default 8.
	Concurrency int
	// StrictGroupOrder puts at most one message of a group in each request. SQS handles the
	// entries of a request independently: without this option, when an entry fails, later
	// entries of its group in the SAME request may have been accepted (the sink reports them
	// not acknowledged, so they are resent: duplicates, and possibly out of order). The sink
	// checks sizes and characters before sending, so such failures are rare. Default false.
	StrictGroupOrder bool
	// ClaimCheck, when set, stores payloads that do not fit in a message in S3. Default off.
	ClaimCheck *ClaimCheck
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// ClaimCheck configures the claim check: a payload is stored in S3 under Prefix + the hex
// SHA-256 of its bytes, and the message carries the reference (bucket, key, digest, size)
// instead. Objects are never deleted by the sink (several messages may share one): expire them
// with a bucket lifecycle rule longer than the longest redelivery window.
type ClaimCheck struct {
	// Client is the S3 client. Required.
	Client *s3.Client
	// Bucket is the bucket. Required.
	Bucket string
	// Prefix is prepended to every key. Default "".
	Prefix string
	// Threshold: payloads larger than this many bytes always go to S3. Default 0: only the
	// payloads whose message would exceed MaxRequestBytes.
	Threshold int
}

// Sink sends messages to SQS queues: core.Message.Destination is the queue URL.
type Sink struct {
	client *awssqs.Client
	cfg    sinkkit.Config
	log    *slog.Logger
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink that sends with client. opts may be nil.
func New(client *awssqs.Client, opts *Options) (*Sink, error) {
	if client == nil {
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	}
	cfg, log, err := config("sqs", opts)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg, log: log}, nil
}

func config(name string, opts *Options) (sinkkit.Config, *slog.Logger, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	s := sinkkit.Settings{MaxRequestBytes: o.MaxRequestBytes, MaxBatchEntries: o.MaxBatchEntries,
		Concurrency: o.Concurrency, StrictGroupOrder: o.StrictGroupOrder, Logger: o.Logger}
	if c := o.ClaimCheck; c != nil {
		s.ClaimCheck, s.S3, s.Bucket, s.Prefix, s.Threshold = true, c.Client, c.Bucket, c.Prefix, c.Threshold
	}
	return sinkkit.Configure(name, s)
}

// IsFIFO reports whether a queue URL (or name) names a FIFO queue.
func IsFIFO(queueURL string) bool { return strings.HasSuffix(queueURL, ".fifo") }

// Send implements core.Sink.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	return sinkkit.Send(ctx, &s.cfg, msgs, s.sendBatch)
}

// permanentCodes are the request error codes that no retry can fix.
var permanentCodes = map[string]bool{
	"AWS.SimpleQueueService.NonExistentQueue": true, "QueueDoesNotExist": true,
	"InvalidParameterValue": true, "InvalidMessageContents": true, "InvalidAttributeName": true,
	"InvalidAttributeValue": true, "MissingParameter": true, "InvalidAddress": true,
	"UnsupportedOperation": true, "AWS.SimpleQueueService.UnsupportedOperation": true,
	"AWS.SimpleQueueService.NonExistentQueue;Sender": true,
}

func (s *Sink) sendBatch(ctx context.Context, queueURL string, es []sinkkit.Entry) []error {
	fifo := IsFIFO(queueURL)
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: make([]types.SendMessageBatchRequestEntry, len(es))}
	for k, e := range es {
		attrs := make(map[string]types.MessageAttributeValue, len(e.Enc.Attrs))
		for _, a := range e.Enc.Attrs {
			attrs[a.Name] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(a.Value)}
		}
		en := types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), MessageBody: aws.String(e.Enc.Body), MessageAttributes: attrs}
		if fifo {
			en.MessageGroupId = aws.String(wire.GroupID(e.Msg.GroupID))
			en.MessageDeduplicationId = aws.String(wire.DedupID(e.Msg))
		}
		in.Entries[k] = en
	}
	out, err := s.client.SendMessageBatch(ctx, in)
	if err != nil {
		err = sinkkit.Classify("sqs", "send message batch", err, permanentCodes)
		var qe *types.QueueDoesNotExist
		if errors.As(err, &qe) && !core.IsPermanent(err) {
			err = core.Permanent(err)
		}
		s.log.Warn("sqs_send_batch_failed", "queue_url", queueURL, "entries", len(es), "permanent", core.IsPermanent(err), "error", err)
		return core.Outcomes(len(es), err)
	}
	res := core.Outcomes(len(es), core.ErrNotAcknowledged)
	for _, ok := range out.Successful {
		if k, good := sinkkit.EntryIndex(ok.Id, len(es)); good {
			res[k] = nil
		}
	}
	for _, f := range out.Failed {
		if k, good := sinkkit.EntryIndex(f.Id, len(es)); good {
			res[k] = errorf(es[k], &sinkkit.EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault})
		}
	}
	return res
}

func errorf(e sinkkit.Entry, ee *sinkkit.EntryError) error {
	return fmt.Errorf("sqs: event %s: %w", e.Msg.ID, ee)
}
