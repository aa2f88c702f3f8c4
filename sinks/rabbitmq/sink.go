package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/batcher"
)

// DefaultSource is the default cloudEvents:source.
const DefaultSource = "outboxkit"

// Defaults of Options.
const (
	DefaultConcurrency     = 8
	DefaultConfirmTimeout  = 30 * time.Second
	DefaultMaxMessageBytes = 128 << 20 // RabbitMQ's own default max_message_size (3.8 and later)
)

// maxBatch is the most messages one channel has in flight (published, confirm not yet
// seen): a batch of sinks/batcher, and the capacity of the channel's returns buffer (every
// basic.return of the batch must fit in it: amqp091 drops a notification it cannot deliver
// within 5s).
const maxBatch = 256

// Options configures a Sink. The zero value (or nil) is ready to use.
type Options struct {
	// Config configures the connection: TLS (TLSClientConfig), Heartbeat, Vhost, SASL,
	// Properties (e.g. "connection_name"), Dial. Default: amqp091's defaults (10s heartbeat,
	// 30s dial timeout). Config.Recovery must be nil: the sink redials itself (see the
	// package documentation).
	Config *amqp.Config
	// Source is the CloudEvents source (cloudEvents:source) of every message. Default
	// DefaultSource.
	Source string
	// ContentType is the content-type property of messages whose event has no
	// "content-type" header. Default "": none.
	ContentType string
	// Concurrency is the most channels publishing at once within one Send call, each one
	// batch of up to 256 messages of one destination. Default DefaultConcurrency (8).
	Concurrency int
	// ConfirmTimeout bounds the wait for a batch's publisher confirms; the messages not
	// confirmed by then fail with the retryable ErrConfirmTimeout and the channel is closed.
	// Default DefaultConfirmTimeout (30s).
	ConfirmTimeout time.Duration
	// MaxMessageBytes is the largest message (payload, headers and properties) the sink
	// publishes; a larger one fails with the permanent ErrMessageTooLarge and is not sent
	// (the broker would close the channel over it). Keep it at or below the broker's
	// max_message_size. Default DefaultMaxMessageBytes (128 MiB, the broker's default).
	MaxMessageBytes int
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// Sink publishes messages to RabbitMQ with publisher confirms: core.Message.Destination
// names the exchange and routing key (see the package documentation).
type Sink struct {
	d    dialer
	o    Options
	log  *slog.Logger
	pool chan *pubChannel // idle channels in confirm mode
}

var _ core.Sink = (*Sink)(nil)

// pubChannel is a channel in confirm mode with its listeners.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// New returns a sink that publishes to the broker at url (amqp://user:password@host:port/vhost
// or amqps://...). It dials on the first Send, not here. Close it after its last Send. opts
// may be nil.
func New(url string, opts *Options) (*Sink, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	cfg, err := config(url, o.Config)
	if err != nil {
		return nil, err
	}
	if o.Source == "" {
		o.Source = DefaultSource
	}
	switch {
	case o.Concurrency == 0:
		o.Concurrency = DefaultConcurrency
	case o.Concurrency < 0:
		return nil, &core.OptionError{Field: "Concurrency", Reason: "must not be negative (0 means the default, 8)"}
	}
	switch {
	case o.ConfirmTimeout == 0:
		o.ConfirmTimeout = DefaultConfirmTimeout
	case o.ConfirmTimeout < 0:
		return nil, &core.OptionError{Field: "ConfirmTimeout", Reason: "must not be negative (0 means the default, 30s)"}
	}
	switch {
	case o.MaxMessageBytes == 0:
		o.MaxMessageBytes = DefaultMaxMessageBytes
	case o.MaxMessageBytes < 0:
		return nil, &core.OptionError{Field: "MaxMessageBytes", Reason: "must not be negative (0 means the default, 128 MiB)"}
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Sink{d: dialer{url: url, cfg: cfg, log: log, name: "rabbitmq"}, o: o, log: log,
		pool: make(chan *pubChannel, o.Concurrency)}, nil
}

// config checks url and the connection configuration.
func config(url string, c *amqp.Config) (amqp.Config, error) {
	if url == "" {
		return amqp.Config{}, &core.OptionError{Field: "url", Reason: "required: amqp://user:password@host:5672/vhost"}
	}
	if _, err := amqp.ParseURI(url); err != nil {
		// Not err's text: it may quote the URL, password included.
		return amqp.Config{}, &core.OptionError{Field: "url", Reason: "not an amqp:// or amqps:// URL (scheme, host, port from 1 to 65535, vhost)"}
	}
	var cfg amqp.Config
	if c != nil {
		cfg = *c
	}
	if cfg.Recovery != nil {
		return amqp.Config{}, &core.OptionError{Field: "Config.Recovery", Reason: "must be nil: the sink and the consumer redial themselves, and a silent recovery would hide the channel closes that make in-flight messages unacknowledged"}
	}
	return cfg, nil
}

// Close closes the connection. Send fails with ErrClosed afterwards.
func (s *Sink) Close() error {
	for {
		select {
		case pc := <-s.pool:
			_ = pc.ch.Close()
			continue
		default:
		}
		break
	}
	return s.d.close()
}

// route splits a destination into exchange and routing key: "exchange/routing-key" (split at
// the first "/"), "/routing-key" for the default exchange, and a name without "/" for the
// default exchange with that routing key: the queue of that name.
func route(dest string) (exchange, key string, err error) {
	if dest == "" {
		return "", "", errors.New("empty destination")
	}
	exchange, key, ok := strings.Cut(dest, "/")
	if !ok {
		exchange, key = "", dest
	}
	if len(exchange) > 255 || len(key) > 255 {
		return "", "", errors.New("exchange name and routing key are at most 255 bytes each")
	}
	return exchange, key, nil
}

// Send implements core.Sink. Every message is published with mandatory set and persistent
// delivery on a channel in confirm mode, and is acknowledged once the broker confirmed it
// (basic.ack, no basic.return). Messages of one destination go in batches of up to 256 on one
// channel, in order; the batches of a partition key run one after another
// (package sinks/batcher), so one key is never in flight on two channels.
func (s *Sink) Send(ctx context.Context, msgs []core.Message) []error {
	if len(msgs) == 0 {
		return nil
	}
	pubs := make([]amqp.Publishing, len(msgs))
	items := make([]batcher.Item, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		items[i] = batcher.Item{Group: m.GroupID, Dest: m.Destination}
		if _, _, err := route(m.Destination); err != nil {
			items[i].Err = core.Permanent(fmt.Errorf("rabbitmq: event %s: %w: %q: %w", m.ID, core.ErrUnknownDestination, m.Destination, err))
			continue
		}
		p, size := publishing(m, s.o.Source, s.o.ContentType)
		if size > s.o.MaxMessageBytes {
			items[i].Err = core.Permanent(fmt.Errorf("rabbitmq: event %s: %w: about %d bytes, limit %d", m.ID, ErrMessageTooLarge, size, s.o.MaxMessageBytes))
			continue
		}
		pubs[i] = p
	}
	return batcher.Run(ctx, items, batcher.Options{Concurrency: s.o.Concurrency, MaxEntries: maxBatch},
		func(ctx context.Context, dest string, idx []int) []error {
			res := s.publish(ctx, dest, msgs, pubs, idx)
			for _, err := range res {
				if err != nil {
					s.log.Warn("rabbitmq_publish_failed", "destination", dest, "messages", len(idx), "permanent", core.IsPermanent(err), "error", err)
					break
				}
			}
			return res
		})
}

// channel returns an idle channel of the current connection, or opens one.
func (s *Sink) channel(ctx context.Context) (*pubChannel, error) {
	conn, err := s.d.connection(ctx)
	if err != nil {
		return nil, err
	}
	for {
		select {
		case pc := <-s.pool:
			if pc.conn == conn && !pc.ch.IsClosed() {
				return pc, nil
			}
			go func() { _ = pc.ch.Close() }()
			continue
		default:
		}
		break
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: opening a channel: %w", ErrUnavailable, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: confirm mode: %w", ErrUnavailable, err)
	}
	return &pubChannel{conn: conn, ch: ch, returns: ch.NotifyReturn(make(chan amqp.Return, maxBatch)),
		closes: ch.NotifyClose(make(chan *amqp.Error, 1))}, nil
}

// release puts pc back in the pool when it is clean (every confirm seen), else closes it.
func (s *Sink) release(pc *pubChannel, clean bool) {
	if clean && !pc.ch.IsClosed() {
		select {
		case s.pool <- pc:
			return
		default:
		}
	}
	go func() { _ = pc.ch.Close() }()
}

// publish sends the messages idx (one destination, in order) on one channel and waits for
// their confirms.
func (s *Sink) publish(ctx context.Context, dest string, msgs []core.Message, pubs []amqp.Publishing, idx []int) []error {
	res := make([]error, len(idx))
	fail := func(from int, err error) {
		for k := from; k < len(idx); k++ {
			if res[k] == nil {
				res[k] = fmt.Errorf("rabbitmq: event %s: %w", msgs[idx[k]].ID, err)
			}
		}
	}
	pc, err := s.channel(ctx)
	if err != nil {
		fail(0, err)
		return res
	}
	exchange, key, _ := route(dest)
	dcs := make([]*amqp.DeferredConfirmation, 0, len(idx))
	var pubErr error
	for _, i := range idx {
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pubs[i])
		if err != nil {
			pubErr = err
			break
		}
		dcs = append(dcs, dc)
	}
	clean := pubErr == nil
	timer := time.NewTimer(s.o.ConfirmTimeout)
	defer timer.Stop()
	returned := map[string]int{} // message-id -> basic.returns not yet matched
	var returnText map[string]string
	drain := func() {
		for {
			select {
			case r, ok := <-pc.returns:
				if !ok {
					return
				}
				returned[r.MessageId]++
				if returnText == nil {
					returnText = map[string]string{}
				}
				returnText[r.MessageId] = fmt.Sprintf("%d %s (exchange %q, routing key %q)", r.ReplyCode, r.ReplyText, r.Exchange, r.RoutingKey)
			default:
				return
			}
		}
	}
	for k, dc := range dcs {
		select {
		case <-dc.Done():
		case <-ctx.Done():
			fail(k, ctx.Err())
			s.release(pc, false)
			return res
		case <-timer.C:
			fail(k, fmt.Errorf("%w (%v)", ErrConfirmTimeout, s.o.ConfirmTimeout))
			s.release(pc, false)
			return res
		}
		// A basic.return reaches the returns buffer before the basic.ack of its message.
		drain()
		id := msgs[idx[k]].ID
		if !dc.Acked() {
			select {
			case cerr, ok := <-pc.closes:
				// The channel closed: this message and every later one are unconfirmed.
				fail(k, closeError(cerr, ok, exchange))
				s.release(pc, false)
				return res
			default:
			}
			if pc.ch.IsClosed() {
				fail(k, ErrChannelClosed)
				s.release(pc, false)
				return res
			}
			res[k] = fmt.Errorf("rabbitmq: event %s: %w", id, ErrNacked)
			continue
		}
		if returned[id] > 0 {
			returned[id]--
			res[k] = core.Permanent(fmt.Errorf("rabbitmq: event %s: %w: %s", id, ErrUnroutable, returnText[id]))
			continue
		}
	}
	if pubErr != nil {
		if ctx.Err() != nil {
			fail(len(dcs), ctx.Err()) // not published: the call was cancelled
		} else {
			fail(len(dcs), fmt.Errorf("%w: %w", ErrChannelClosed, pubErr))
		}
	}
	s.release(pc, clean)
	return res
}

// closeError is the outcome of the messages a channel close left unconfirmed: permanent when
// the broker closed the channel because the exchange does not exist (404) or may not be
// written (403) — every message of the batch goes to that exchange — retryable otherwise.
func closeError(cerr *amqp.Error, ok bool, exchange string) error {
	if !ok || cerr == nil {
		return ErrChannelClosed
	}
	err := fmt.Errorf("%w: %w", ErrChannelClosed, cerr)
	switch cerr.Code {
	case amqp.NotFound:
		return core.Permanent(fmt.Errorf("%w: exchange %q: %w", core.ErrUnknownDestination, exchange, err))
	case amqp.AccessRefused:
		return core.Permanent(err)
	}
	return err
}
