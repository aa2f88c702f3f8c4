package sns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

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

// ErrMessageTooLarge: a message does not fit in Options.MaxRequestBytes and no claim check is
// configured (or even its claim-check reference does not fit). The outcome is permanent.
// It is the same error as sqs.ErrMessageTooLarge.
var ErrMessageTooLarge = wire.ErrMessageTooLarge

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// MaxRequestBytes bounds the size of one PublishBatch request (the sum, over its entries,
	// of the message plus every attribute's name, data type and value) and therefore of one
	// message. A larger message goes to S3 when ClaimCheck is set and is a permanent
	// ErrMessageTooLarge otherwise. Default 256 KiB (SNS's limit); at most 1 MiB.
	MaxRequestBytes int
	// MaxBatchEntries is the most entries of one PublishBatch request, 1 to 10. Default 10.
	MaxBatchEntries int
	// Concurrency is the most requests one Send call has in flight (batches of different
	// groups; one group never has two). Default 8.
	Concurrency int
	// StrictGroupOrder puts at most one message of a group in each request; see
	// sqs.Options.StrictGroupOrder. Default false.
	StrictGroupOrder bool
	// ClaimCheck, when set, stores payloads that do not fit in a message in S3. Default off.
	ClaimCheck *ClaimCheck
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// ClaimCheck configures the claim check; see sqs.ClaimCheck.
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

// Sink publishes messages to SNS topics: core.Message.Destination is the topic ARN.
type Sink struct {
	client *awssns.Client
	cfg    sinkkit.Config
	log    *slog.Logger
}

var _ core.Sink = (*Sink)(nil)

// New returns a sink that publishes with client. opts may be nil.
func New(client *awssns.Client, opts *Options) (*Sink, error) {
	if client == nil {
		return nil, &core.OptionError{Field: "client", Reason: "must not be nil"}
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	s := sinkkit.Settings{MaxRequestBytes: o.MaxRequestBytes, MaxBatchEntries: o.MaxBatchEntries,
		Concurrency: o.Concurrency, StrictGroupOrder: o.StrictGroupOrder, Logger: o.Logger}
	if c := o.ClaimCheck; c != nil {
		s.ClaimCheck, s.S3, s.Bucket, s.Prefix, s.Threshold = true, c.Client, c.Bucket, c.Prefix, c.Threshold
	}
	cfg, log, err := sinkkit.Configure("sns", s)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg, log: log}, nil
}

// IsFIFO reports whether a topic ARN (or name) names a FIFO topic.
func IsFIFO(topicARN string) bool { return strings.HasSuffix(topicARN, ".fifo") }

// Send implements core.Sink.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	return sinkkit.Send(ctx, &s.cfg, msgs, s.publishBatch)
}

// permanentCodes are the request error codes that no retry can fix.
var permanentCodes = map[string]bool{
	"NotFound": true, "NotFoundException": true, "InvalidParameter": true, "InvalidParameterException": true,
	"InvalidParameterValue": true, "InvalidParameterValueException": true, "ValidationException": true,
}

func (s *Sink) publishBatch(ctx context.Context, topicARN string, es []sinkkit.Entry) []error {
	fifo := IsFIFO(topicARN)
	in := &awssns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: make([]types.PublishBatchRequestEntry, len(es))}
	for k, e := range es {
		attrs := make(map[string]types.MessageAttributeValue, len(e.Enc.Attrs))
		for _, a := range e.Enc.Attrs {
			attrs[a.Name] = types.MessageAttributeValue{DataType: aws.String(a.DataType), StringValue: aws.String(a.Value)}
		}
		en := types.PublishBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), Message: aws.String(e.Enc.Body), MessageAttributes: attrs}
		if fifo {
			en.MessageGroupId = aws.String(wire.GroupID(e.Msg.GroupID))
			en.MessageDeduplicationId = aws.String(wire.DedupID(e.Msg))
		}
		in.PublishBatchRequestEntries[k] = en
	}
	out, err := s.client.PublishBatch(ctx, in)
	if err != nil {
		err = sinkkit.Classify("sns", "publish batch", err, permanentCodes)
		var nf *types.NotFoundException
		if errors.As(err, &nf) && !core.IsPermanent(err) {
			err = core.Permanent(err)
		}
		s.log.Warn("sns_publish_batch_failed", "topic_arn", topicARN, "entries", len(es), "permanent", core.IsPermanent(err), "error", err)
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
			res[k] = fmt.Errorf("sns: event %s: %w", es[k].Msg.ID,
				&sinkkit.EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault})
		}
	}
	return res
}
