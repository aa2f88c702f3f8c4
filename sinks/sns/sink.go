package sns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/internal/sinkkit"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// ErrMessageTooLarge: a message does not fit in Options.MaxRequestBytes and no claim check is
// configured (or even its claim-check reference does not fit). The outcome is permanent.
// It is the same error as sqs.ErrMessageTooLarge.
var ErrMessageTooLarge = wire.ErrMessageTooLarge

// Options configures a Sink: the options the SQS and SNS sinks share (awssink.Options, with
// the request limits awssink.MaxBatchEntries, awssink.MaxRequestBytesLimit and the defaults).
// The zero value (or nil) is ready to use.
type Options = awssink.Options

// ClaimCheck configures the claim check (awssink.ClaimCheck).
type ClaimCheck = awssink.ClaimCheck

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
	cfg, log, err := sinkkit.Configure("sns", opts)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg, log: log}, nil
}

// IsFIFO reports whether a topic ARN (or name) names a FIFO topic.
func IsFIFO(topicARN string) bool { return sinkkit.IsFIFO(topicARN) }

// Send implements core.Sink.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	return sinkkit.Send(ctx, &s.cfg, msgs, s.publishBatch)
}

// permanentCodes are the request error codes that no retry can fix.
var permanentCodes = map[string]bool{
	"NotFound": true, "NotFoundException": true, "InvalidParameter": true, "InvalidParameterException": true,
	"InvalidParameterValue": true, "InvalidParameterValueException": true, "ValidationException": true,
}

// attrMaps builds the entries' attributes, pointing into the encoded entries.
var attrMaps = sinkkit.NewAttrMaps(func(a *wire.Attr) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: sinkkit.DataType(a.DataType), StringValue: &a.Value}
})

func (s *Sink) publishBatch(ctx context.Context, topicARN string, es []sinkkit.Entry) []error {
	fifo := IsFIFO(topicARN)
	in := &awssns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: make([]types.PublishBatchRequestEntry, len(es))}
	// The request points into the encoded entries (they outlive the call) and to shared
	// constant strings, rather than allocating a *string per field (sinkkit.EntryID).
	var fifoIDs []string
	if fifo {
		fifoIDs = make([]string, 2*len(es))
	}
	attrs, release := attrMaps.Fill(es)
	defer release()
	for k, e := range es {
		en := types.PublishBatchRequestEntry{Id: sinkkit.EntryID(k), Message: &e.Enc.Body, MessageAttributes: attrs[k]}
		if fifo {
			fifoIDs[2*k], fifoIDs[2*k+1] = wire.GroupID(e.Msg.GroupID), wire.DedupID(e.Msg)
			en.MessageGroupId, en.MessageDeduplicationId = &fifoIDs[2*k], &fifoIDs[2*k+1]
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
