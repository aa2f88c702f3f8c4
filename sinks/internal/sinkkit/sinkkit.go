// Package sinkkit is what the SQS and SNS sinks share: encoding messages (with the optional
// claim check), planning and running batches (package sinks/batcher), and classifying AWS errors.
package sinkkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/batcher"
	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// Config is a sink's configuration as Configure validated it from awssink.Options.
type Config struct {
	Name        string // "sqs" or "sns", prefixes errors
	MaxBytes    int
	MaxEntries  int
	Concurrency int
	OnePerGroup bool
	// RequestTimeout bounds each request (awssink.Options.RequestTimeout).
	RequestTimeout time.Duration
	// Unordered is batcher.Options.Unordered: the standard (non-FIFO) destinations, with
	// awssink.Options.UnorderedStandard; nil otherwise.
	Unordered func(dest string) bool
	// Claim check; S3 nil means off.
	S3        *s3.Client
	Bucket    string
	Prefix    string
	Threshold int // payloads above this many bytes always go to S3; 0: only when needed
}

// Configure validates opts (nil means the zero value; errors name the option), applies the
// defaults and returns the sink's Config and logger.
func Configure(name string, opts *awssink.Options) (Config, *slog.Logger, error) {
	var o awssink.Options
	if opts != nil {
		o = *opts
	}
	cfg := Config{Name: name, MaxBytes: o.MaxRequestBytes, MaxEntries: o.MaxBatchEntries,
		Concurrency: o.Concurrency, OnePerGroup: o.StrictGroupOrder, RequestTimeout: o.RequestTimeout}
	if o.UnorderedStandard {
		cfg.Unordered = func(dest string) bool { return !IsFIFO(dest) }
	}
	switch {
	case cfg.MaxBytes == 0:
		cfg.MaxBytes = awssink.DefaultMaxRequestBytes
	case cfg.MaxBytes < 1024 || cfg.MaxBytes > awssink.MaxRequestBytesLimit:
		return cfg, nil, &core.OptionError{Field: "MaxRequestBytes", Reason: "must be between 1 KiB and 1 MiB"}
	}
	switch {
	case cfg.MaxEntries == 0:
		cfg.MaxEntries = awssink.MaxBatchEntries
	case cfg.MaxEntries < 1 || cfg.MaxEntries > awssink.MaxBatchEntries:
		return cfg, nil, &core.OptionError{Field: "MaxBatchEntries", Reason: "must be between 1 and 10"}
	}
	switch {
	case cfg.Concurrency == 0:
		cfg.Concurrency = awssink.DefaultConcurrency
	case cfg.Concurrency < 0:
		return cfg, nil, &core.OptionError{Field: "Concurrency", Reason: "must not be negative"}
	}
	switch {
	case cfg.RequestTimeout == 0:
		cfg.RequestTimeout = awssink.DefaultRequestTimeout
	case cfg.RequestTimeout < 0 || cfg.RequestTimeout > awssink.MaxRequestTimeout:
		return cfg, nil, &core.OptionError{Field: "RequestTimeout", Reason: fmt.Sprintf("must be between 0 (default) and %v", awssink.MaxRequestTimeout)}
	}
	if c := o.ClaimCheck; c != nil {
		switch {
		case c.Client == nil:
			return cfg, nil, &core.OptionError{Field: "ClaimCheck.Client", Reason: "must not be nil"}
		case c.Bucket == "":
			return cfg, nil, &core.OptionError{Field: "ClaimCheck.Bucket", Reason: "required"}
		case c.Threshold < 0:
			return cfg, nil, &core.OptionError{Field: "ClaimCheck.Threshold", Reason: "must not be negative"}
		}
		cfg.S3, cfg.Bucket, cfg.Prefix, cfg.Threshold = c.Client, c.Bucket, c.Prefix, c.Threshold
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return cfg, log, nil
}

// IsFIFO reports whether a queue URL or topic ARN (or a name) names a FIFO queue or topic.
func IsFIFO(dest string) bool { return strings.HasSuffix(dest, ".fifo") }

// Entry is one message of a request.
type Entry struct {
	Index int // in the Send call
	Msg   *core.Message
	Enc   *wire.Encoded
}

// Sender sends one request of entries (all for dest) and returns one outcome per entry.
type Sender func(ctx context.Context, dest string, entries []Entry) []error

type prepared struct {
	enc wire.Encoded
	ref *wire.ClaimCheck // upload of the message's payload needed before sending
}

// Send encodes msgs, plans batches and runs them with sender, keeping the sink contract.
func Send(ctx context.Context, cfg *Config, msgs []core.Message, sender Sender) []error {
	if len(msgs) == 0 {
		return nil
	}
	preps := make([]prepared, len(msgs))
	items := make([]batcher.Item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		p, err := cfg.prepare(m)
		if err != nil {
			items[i].Err = core.Permanent(fmt.Errorf("%s: event %s: %w", cfg.Name, m.ID, err))
			continue
		}
		if m.Destination == "" {
			items[i].Err = core.Permanent(fmt.Errorf("%s: event %s: %w: empty destination", cfg.Name, m.ID, core.ErrUnknownDestination))
			continue
		}
		preps[i] = p
		items[i].Size = p.enc.Size()
	}
	return batcher.Run(ctx, items, batcher.Options{
		MaxEntries: cfg.MaxEntries, MaxBytes: cfg.MaxBytes, Concurrency: cfg.Concurrency, OnePerGroup: cfg.OnePerGroup,
		Unordered: cfg.Unordered,
	}, func(ctx context.Context, dest string, idx []int) []error {
		res := make([]error, len(idx))
		entries := make([]Entry, 0, len(idx))
		pos := make([]int, 0, len(idx))
		held := map[string]bool{}
		for k, i := range idx {
			m := &msgs[i]
			if held[m.GroupID] {
				res[k] = core.ErrNotAcknowledged
				continue
			}
			if p := &preps[i]; p.ref != nil {
				if err := wire.PutClaimCheck(ctx, cfg.S3, p.ref, &m.Event); err != nil {
					res[k] = fmt.Errorf("%s: event %s: %w", cfg.Name, m.ID, err)
					held[m.GroupID] = true
					continue
				}
			}
			entries = append(entries, Entry{Index: i, Msg: m, Enc: &preps[i].enc})
			pos = append(pos, k)
		}
		if len(entries) == 0 {
			return res
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
		out := sender(rctx, dest, entries)
		cancel()
		for e, k := range pos {
			res[k] = out[e]
		}
		return res
	})
}

func (cfg *Config) prepare(m *core.Message) (prepared, error) {
	if cfg.S3 != nil && cfg.Threshold > 0 && len(m.Payload) > cfg.Threshold {
		return cfg.claimCheck(m)
	}
	enc, err := wire.Encode(m, nil)
	if err != nil {
		return prepared{}, err
	}
	if enc.Size() <= cfg.MaxBytes {
		return prepared{enc: enc}, nil
	}
	if cfg.S3 == nil {
		return prepared{}, fmt.Errorf("%w: %d bytes, limit %d (no claim check configured)", wire.ErrMessageTooLarge, enc.Size(), cfg.MaxBytes)
	}
	return cfg.claimCheck(m)
}

func (cfg *Config) claimCheck(m *core.Message) (prepared, error) {
	ref := wire.NewClaimCheck(cfg.Bucket, cfg.Prefix, m.Payload)
	enc, err := wire.Encode(m, &ref)
	if err != nil {
		return prepared{}, err
	}
	if enc.Size() > cfg.MaxBytes {
		return prepared{}, fmt.Errorf("%w: %d bytes even with the payload in S3, limit %d", wire.ErrMessageTooLarge, enc.Size(), cfg.MaxBytes)
	}
	return prepared{enc: enc, ref: &ref}, nil
}

// EntryError is a per-entry failure reported in a batch response.
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("entry failed: %s: %s (sender fault: %t)", e.Code, e.Message, e.SenderFault)
}

// Permanent makes core.IsPermanent true for sender faults (invalid or oversize entries) except
// throttling; service faults are retryable.
func (e *EntryError) Permanent() bool {
	return e.SenderFault && !throttling[e.Code]
}

var throttling = map[string]bool{
	"Throttling": true, "ThrottlingException": true, "ThrottledException": true, "RequestThrottled": true,
	"TooManyRequestsException": true, "RequestLimitExceeded": true, "KmsThrottled": true,
	"KMSThrottlingException": true, "SlowDown": true,
}

// Classify wraps a request error: permanent when its API error code is in permanent (or the
// error is one of the typed errors the caller tested), else as is (retryable: throttling, 5xx,
// timeouts, cancellation, anything unknown).
func Classify(name, op string, err error, permanent map[string]bool) error {
	err = fmt.Errorf("%s: %s: %w", name, op, err)
	var ae smithy.APIError
	if errors.As(err, &ae) && permanent[ae.ErrorCode()] {
		return core.Permanent(err)
	}
	return err
}

// EntryIndex parses the Id of a batch response entry (the sinks number entries 0..n-1) and
// reports whether it names one of the n entries sent. An unknown Id acknowledges nothing.
func EntryIndex(id *string, n int) (int, bool) {
	k, err := strconv.Atoi(aws.ToString(id))
	return k, err == nil && k >= 0 && k < n
}
