package sqs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/internal/sinkkit"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Options configures a Sink: the options the SQS and SNS sinks share (awssink.Options, with
// the request limits awssink.MaxBatchEntries, awssink.MaxRequestBytesLimit and the defaults).
// The zero value (or nil) is ready to use.
type Options = awssink.Options

// ClaimCheck configures the claim check (awssink.ClaimCheck).
type ClaimCheck = awssink.ClaimCheck

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
	cfg, log, err := sinkkit.Configure("sqs", opts)
	if err != nil {
		return nil, err
	}
	return &Sink{client: client, cfg: cfg, log: log}, nil
}

// IsFIFO reports whether a queue URL (or name) names a FIFO queue.
func IsFIFO(queueURL string) bool { return sinkkit.IsFIFO(queueURL) }

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

// attrMaps builds the entries' attributes, pointing into the encoded entries.
var attrMaps = sinkkit.NewAttrMaps(func(a *wire.Attr) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: sinkkit.DataType(a.DataType), StringValue: &a.Value}
})

func (s *Sink) sendBatch(ctx context.Context, queueURL string, es []sinkkit.Entry) []error {
	fifo := IsFIFO(queueURL)
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: make([]types.SendMessageBatchRequestEntry, len(es))}
	// The request points into the encoded entries (they outlive the call) and to shared
	// constant strings, rather than allocating a *string per field (sinkkit.EntryID).
	var fifoIDs []string
	if fifo {
		fifoIDs = make([]string, 2*len(es))
	}
	attrs, release := attrMaps.Fill(es)
	defer release()
	for k, e := range es {
		en := types.SendMessageBatchRequestEntry{Id: sinkkit.EntryID(k), MessageBody: &e.Enc.Body, MessageAttributes: attrs[k]}
		if fifo {
			fifoIDs[2*k], fifoIDs[2*k+1] = wire.GroupID(e.Msg.GroupID), wire.DedupID(e.Msg)
			en.MessageGroupId, en.MessageDeduplicationId = &fifoIDs[2*k], &fifoIDs[2*k+1]
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
