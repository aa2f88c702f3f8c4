package core

import (
	"time"

	"github.com/outboxkit/outbox/core/driver"
)

// The identifiers below are defined in package driver, which adapters and sinks implement
// against, and are repeated here because applications use them too. Each is the same type or
// value as its driver counterpart (errors.Is and errors.As match either name); go doc
// github.com/outboxkit/outbox/core/driver documents them in full.

// Event is what a producer appends to the outbox inside its own transaction: ID, aggregate
// type/ID/version, Type, SchemaID, PartitionKey, Destination, Payload, Headers, Tenant,
// CausationID and CorrelationID. See driver.Event for each field's rule.
type Event = driver.Event

// Limits bound what one event may carry (OutboxOptions.Limits): MaxPayloadBytes (default
// 1 MiB), MaxHeaders (default 32) and MaxHeaderBytes (default 16 KiB).
type Limits = driver.Limits

// Upper bounds and defaults of Limits.
const (
	MaxLimitPayloadBytes   = driver.MaxLimitPayloadBytes
	MaxLimitHeaders        = driver.MaxLimitHeaders
	MaxLimitHeaderBytes    = driver.MaxLimitHeaderBytes
	DefaultMaxPayloadBytes = driver.DefaultMaxPayloadBytes
	DefaultMaxHeaders      = driver.DefaultMaxHeaders
	DefaultMaxHeaderBytes  = driver.DefaultMaxHeaderBytes
)

// DefaultLanes is the lane count of a new outbox; MaxLanes bounds it.
const (
	DefaultLanes = driver.DefaultLanes
	MaxLanes     = driver.MaxLanes
)

// Headers that Outbox.Write adds to every event so that a consumer can tell which events were
// written together (see driver.HeaderTxID).
const (
	HeaderTxID    = driver.HeaderTxID
	HeaderTxIndex = driver.HeaderTxIndex
	HeaderTxCount = driver.HeaderTxCount
)

// Outcome is what Inbox.Process did with a message.
type Outcome = driver.Outcome

// Outcomes of Inbox.Process. Applied and Stale are recorded; Duplicate reports the recorded one.
const (
	// Applied: the handler ran and its effect committed with the inbox record.
	Applied = driver.Applied
	// Duplicate: this consumer already processed this event ID with the same payload; nothing ran.
	Duplicate = driver.Duplicate
	// Stale: the message's entity version is not newer than the last applied one; it was
	// recorded and the handler did not run.
	Stale = driver.Stale
)

// MinTime and MaxTime bound every time the API accepts (InboxMessage.OccurredAt, a Prune
// horizon).
var (
	MinTime = driver.MinTime
	MaxTime = driver.MaxTime
)

// MaxClockSkew is how far in the future Inbox.Prune accepts a horizon; MaxPruneLimit bounds
// its limit.
const (
	MaxClockSkew  = driver.MaxClockSkew
	MaxPruneLimit = driver.MaxPruneLimit
)

// Retention is a CDC relay's measurement of the change log its database retains for it.
type Retention = driver.Retention

// Sentinel errors, matched with errors.Is. See driver for what each means.
var (
	ErrInvalidEvent       = driver.ErrInvalidEvent
	ErrDuplicateEvent     = driver.ErrDuplicateEvent
	ErrClaimLost          = driver.ErrClaimLost
	ErrPermanent          = driver.ErrPermanent
	ErrUnknownDestination = driver.ErrUnknownDestination
	ErrNotAcknowledged    = driver.ErrNotAcknowledged
	ErrDigestMismatch     = driver.ErrDigestMismatch
	ErrVersionGap         = driver.ErrVersionGap
	ErrBeyondRetention    = driver.ErrBeyondRetention
	ErrInvalidOptions     = driver.ErrInvalidOptions
	ErrFenced             = driver.ErrFenced
	ErrPositionLost       = driver.ErrPositionLost
	ErrRetentionExceeded  = driver.ErrRetentionExceeded
	ErrInvalidMessage     = driver.ErrInvalidMessage
	ErrInvalidHorizon     = driver.ErrInvalidHorizon
	ErrInvalidTx          = driver.ErrInvalidTx
	ErrNotRunning         = driver.ErrNotRunning
	ErrStreamStalled      = driver.ErrStreamStalled
	ErrLogUnavailable     = driver.ErrLogUnavailable
	ErrRelayRunning       = driver.ErrRelayRunning
	ErrBreakerOpen        = driver.ErrBreakerOpen
	ErrSchemaMismatch     = driver.ErrSchemaMismatch
	ErrNotMigrated        = driver.ErrNotMigrated
	ErrLaneCountChanged   = driver.ErrLaneCountChanged
	ErrResizeCDC          = driver.ErrResizeCDC
	ErrReplayNotFound     = driver.ErrReplayNotFound
	ErrReplayKeyPending   = driver.ErrReplayKeyPending
	ErrReplayCDC          = driver.ErrReplayCDC
	ErrReplayTooMany      = driver.ErrReplayTooMany
)

// Error types, matched with errors.As.
type (
	// ValidationError says which field of which event is invalid (ErrInvalidEvent).
	ValidationError = driver.ValidationError
	// MessageError says which field of an inbox message is invalid (ErrInvalidMessage).
	MessageError = driver.MessageError
	// BatchError says which message of an inbox batch failed.
	BatchError = driver.BatchError
	// OptionError names an invalid option (ErrInvalidOptions).
	OptionError = driver.OptionError
	// PositionLostError is ErrPositionLost with the lost position.
	PositionLostError = driver.PositionLostError
	// RetentionError is ErrRetentionExceeded with the measurement.
	RetentionError = driver.RetentionError
	// NotMigratedError is ErrNotMigrated with what the database lacks and the remedy.
	NotMigratedError = driver.NotMigratedError
	// ReplayError is a replay refusal with the offending IDs or key.
	ReplayError = driver.ReplayError
)

// Permanent marks err as a delivery error that retrying cannot fix: the relay parks the event
// at once. errors.Is(Permanent(err), ErrPermanent) and errors.Is(Permanent(err), err) hold.
func Permanent(err error) error { return driver.Permanent(err) }

// RetryAfter wraps err, a retryable delivery error, with the delay the broker asked for (an
// HTTP Retry-After, a throttling hint): the relay waits at least d, up to RetryPolicy.Max,
// before the next attempt of the event. errors.Is(RetryAfter(err, d), err) holds; d <= 0 returns err.
func RetryAfter(err error, d time.Duration) error { return driver.RetryAfter(err, d) }

// IsPermanent reports whether err is marked permanent (ErrPermanent in its chain).
func IsPermanent(err error) bool { return driver.IsPermanent(err) }
