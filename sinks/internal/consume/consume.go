// Package consume is what the SQS and Kafka consumers share: the Handler signature, the inbox
// version gate option (NoVersionGate; the default is core.EventEntity), the core.InboxMessage
// of a decoded delivery (core.InboxMessageOf), running deliveries through the inbox with the handler in its transaction (a panic
// turned into the broker's error), and the one decision that follows each attempt (Decide):
// acknowledge once the inbox transaction committed, leave the message for redelivery, send it
// to the dead-letter path, or hand it back on shutdown.
//
// Each broker keeps its own Delivery type (the broker's coordinates of a message), its own
// decoding of the wire format, and its own mechanics of acknowledging (SQS deletes and
// visibility, Kafka partition workers and offset commits) and of dead-lettering (an SQS
// queue's redrive policy, a Kafka dead-letter topic).
package consume

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Handler applies a delivery's effect in tx, the transaction that records it in the inbox. D
// is the broker's Delivery type; sqs.Handler and kafka.Handler are this type.
type Handler[TTx, D any] func(ctx context.Context, tx TTx, d *D) error

// EntityFunc maps an event to the inbox's version gate (core.InboxMessage Entity and Version;
// version 0 disables the gate).
type EntityFunc = func(ev *core.Event) (entity string, version int64)

// NoVersionGate is an EntityFunc that turns the inbox's version gate off.
func NoVersionGate(*core.Event) (string, int64) { return "", 0 }

// Message is the inbox message of a delivered event (core.InboxMessageOf) with the version
// gate entity gives it (core.EventEntity when entity is nil).
func Message(ev *core.Event, createdAt time.Time, entity EntityFunc, position string) core.InboxMessage {
	m := core.InboxMessageOf(ev, createdAt, position)
	if entity != nil {
		m.Entity, m.Version = entity(ev)
	}
	return m
}

// Action is what a consumer does with a message after an attempt at it.
type Action int

const (
	// Ack: the inbox transaction committed (Applied, Duplicate or Stale). Acknowledge the
	// message (delete it, commit its offset); never before.
	Ack Action = iota
	// Retry: the attempt failed in a way a later attempt may not (a handler error or panic, the
	// database, core.ErrVersionGap). Leave the message for redelivery: nothing of it was
	// recorded.
	Retry
	// DeadLetter: no attempt can succeed (IsPoison: Poison, a schema rejection, ...). Send it to the broker's dead-letter path
	// (a dead-letter topic at once; on SQS, the queue's redrive policy once maxReceiveCount is
	// reached), never acknowledge it as processed.
	DeadLetter
	// Release: the attempt was cut short by the consumer's shutdown. Hand the message back
	// (nothing of it was recorded); it is no failure of the message.
	Release
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case DeadLetter:
		return "dead-letter"
	case Release:
		return "release"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decide is the action after an attempt that ended with err (nil: the inbox transaction
// committed) while the consumer ran with ctx: Ack for nil, Release once ctx is done (an
// attempt interrupted by shutdown fails with whatever the database or handler made of the
// cancellation), DeadLetter for a poison message (IsPoison), Retry for any other error.
func Decide(ctx context.Context, err error) Action {
	switch {
	case err == nil:
		return Ack
	case ctx.Err() != nil:
		return Release
	case IsPoison(err):
		return DeadLetter
	default:
		return Retry
	}
}

// IsPoison reports whether err means that no attempt at the message can succeed: the message
// is not an outbox message (an error marked with Poison), the inbox refuses it
// (core.ErrInvalidMessage), its event ID was recorded with another payload
// (core.ErrDigestMismatch), it is older than the consumer's retention horizon
// (core.ErrBeyondRetention), its payload is rejected by the inbox's schema check
// (core.ErrSchemaRejected, core.InboxOptions.Schemas), its tenant is not one the inbox
// accepts (core.ErrTenantRefused, core.InboxOptions.Tenants), or it cannot be decrypted (a
// destroyed key, a tampered or moved ciphertext: core.ErrUndecryptable,
// core.InboxOptions.Decrypter).
func IsPoison(err error) bool {
	var p *poison
	return errors.As(err, &p) || errors.Is(err, core.ErrInvalidMessage) ||
		errors.Is(err, core.ErrDigestMismatch) || errors.Is(err, core.ErrBeyondRetention) ||
		errors.Is(err, core.ErrSchemaRejected) || errors.Is(err, core.ErrTenantRefused) ||
		errors.Is(err, core.ErrUndecryptable)
}

// Poison marks err, the failure to decode a message, as one that no attempt can get past.
// The result's text is err's and errors.Is and errors.As see err through it. Poison(nil) is nil.
func Poison(err error) error {
	if err == nil {
		return nil
	}
	return &poison{err}
}

type poison struct{ err error }

func (p *poison) Error() string { return p.err.Error() }
func (p *poison) Unwrap() error { return p.err }

// Processor runs a broker's deliveries through an inbox, the handler in the inbox's
// transaction.
type Processor[TTx, D any] struct {
	inbox    *core.Inbox[TTx]
	consumer string
	handler  Handler[TTx, D]
	event    func(d *D) *core.Event
	panicErr error
}

// NewProcessor returns the processor of consumer (the inbox's consumer name) on inbox with
// handler. event gives the core.Event a delivery carries (the Delivery's Event field): the
// handler reads the inbox's payload there, which is the plaintext when the inbox decrypts
// (core.InboxOptions.Decrypter). panicErr is the broker's ErrHandlerPanic: a panicking handler
// fails its attempt with an error wrapping it. A nil inbox, handler or event, or a consumer
// name that driver.CheckConsumer refuses (Inbox.Process would refuse every message), is a
// *core.OptionError naming the argument: "inbox", "consumer", "handler" or "event".
func NewProcessor[TTx, D any](inbox *core.Inbox[TTx], consumer string, handler Handler[TTx, D], event func(d *D) *core.Event, panicErr error) (*Processor[TTx, D], error) {
	switch {
	case inbox == nil:
		return nil, &core.OptionError{Field: "inbox", Reason: "must not be nil"}
	case driver.CheckConsumer(consumer) != nil:
		reason := driver.CheckConsumer(consumer).Error()
		var me *core.MessageError
		if errors.As(driver.CheckConsumer(consumer), &me) {
			reason = me.Reason
		}
		return nil, &core.OptionError{Field: "consumer", Reason: reason}
	case handler == nil:
		return nil, &core.OptionError{Field: "handler", Reason: "must not be nil"}
	case event == nil:
		return nil, &core.OptionError{Field: "event", Reason: "must not be nil"}
	}
	return &Processor[TTx, D]{inbox: inbox, consumer: consumer, handler: handler, event: event, panicErr: panicErr}, nil
}

// Process runs msg, the inbox message of d, through the inbox (core.Inbox.Process) with the
// handler on d in the inbox's transaction. A nil error means the transaction committed; the
// result's outcome is Applied, Duplicate or Stale. Decide says what to do next.
func (p *Processor[TTx, D]) Process(ctx context.Context, d *D, msg core.InboxMessage) (core.InboxResult, error) {
	return p.inbox.Process(ctx, p.consumer, msg, func(ctx context.Context, tx TTx, m core.InboxMessage) error {
		p.decrypted(d, msg.Payload, m.Payload)
		return p.handle(ctx, tx, d)
	})
}

// ProcessBatch runs msgs, the inbox messages of ds, through the inbox in one transaction
// (core.Inbox.ProcessBatch), the handler on ds[i] for each Applied message. A failure of one
// message is a *core.BatchError naming it; nothing of the batch was recorded then.
func (p *Processor[TTx, D]) ProcessBatch(ctx context.Context, ds []*D, msgs []core.InboxMessage) ([]core.InboxResult, error) {
	return p.inbox.ProcessBatch(ctx, p.consumer, msgs, func(ctx context.Context, tx TTx, i int, m core.InboxMessage) error {
		p.decrypted(ds[i], msgs[i].Payload, m.Payload)
		return p.handle(ctx, tx, ds[i])
	})
}

// decrypted hands the handler the plaintext that the inbox decrypted
// (core.InboxOptions.Decrypter): when the inbox's payload is not the delivered one, it becomes
// the Payload of d's event, so that handlers read plaintext without a change.
func (p *Processor[TTx, D]) decrypted(d *D, delivered, payload []byte) {
	if len(payload) == len(delivered) && (len(payload) == 0 || &payload[0] == &delivered[0]) {
		return // as delivered: no Decrypter
	}
	p.event(d).Payload = payload
}

// handle runs the handler on d; a panic fails the attempt like an error (the inbox
// transaction rolls back) and the consumer goes on with the other messages.
func (p *Processor[TTx, D]) handle(ctx context.Context, tx TTx, d *D) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", p.panicErr, r)
		}
	}()
	return p.handler(ctx, tx, d)
}

// Outcomes counts the inbox outcomes of a consumer's messages.
type Outcomes struct {
	Applied, Duplicate, Stale atomic.Uint64
}

// Add counts one message of outcome o and returns the outcome's metric name: "applied",
// "duplicate" or "stale" ("" for anything else, which is not counted).
func (c *Outcomes) Add(o core.Outcome) string {
	switch o {
	case core.Applied:
		c.Applied.Add(1)
		return "applied"
	case core.Duplicate:
		c.Duplicate.Add(1)
		return "duplicate"
	case core.Stale:
		c.Stale.Add(1)
		return "stale"
	}
	return ""
}
