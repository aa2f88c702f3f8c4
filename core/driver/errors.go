package driver

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Sentinel errors. Adapters and sinks wrap them (fmt.Errorf("sqlite: settle: %w", ErrClaimLost));
// callers test them with errors.Is.
var (
	// ErrInvalidEvent is wrapped by every *ValidationError: an event failed validation and nothing
	// of that Write call was written.
	ErrInvalidEvent = errors.New("outbox: invalid event")

	// ErrDuplicateEvent means an event with the same ID (or, when the adapter enforces it, the same
	// aggregate type, aggregate id, aggregate version and type) is already in the outbox.
	ErrDuplicateEvent = errors.New("outbox: duplicate event")

	// ErrClaimLost means a lane lease no longer belongs to the caller (another owner, a newer
	// generation, or an expired lease). The fenced call changed nothing.
	ErrClaimLost = errors.New("outbox: lane claim lost")

	// ErrPermanent marks a sink error that retrying cannot fix: the relay parks the event at once.
	ErrPermanent = errors.New("outbox: permanent delivery error")

	// ErrUnknownDestination means the router has no configured destination for an event. It is
	// permanent.
	ErrUnknownDestination = errors.New("outbox: unknown destination")

	// ErrNotAcknowledged is the outcome a sink reports for a message it did not get an
	// acknowledgement for (e.g. an entry missing from a batch response, or an event held back
	// because an earlier event of its partition key failed). It is retryable.
	ErrNotAcknowledged = errors.New("outbox: not acknowledged")

	// ErrDigestMismatch means an inbox already recorded this event ID with a different payload
	// digest. The message was not applied.
	ErrDigestMismatch = errors.New("inbox: event id seen with a different payload")

	// ErrVersionGap means a message's entity version skips past the next expected version and the
	// inbox's gap policy is GapReject. Nothing was recorded.
	ErrVersionGap = errors.New("inbox: entity version gap")

	// ErrBeyondRetention means a message is older than the consumer's retention horizon: its inbox
	// record may have been deleted, so it can be neither applied nor recognised as a duplicate.
	ErrBeyondRetention = errors.New("inbox: message older than the retention horizon")

	// ErrInvalidOptions is wrapped by errors from constructors given invalid options.
	ErrInvalidOptions = errors.New("outbox: invalid options")

	// ErrFenced means a newer publisher generation took the outbox over (driver.RelayStore's
	// AcquireGeneration): the caller's generation may no longer claim or renew lanes or write a
	// CDC checkpoint. The fenced call changed nothing; a relay that sees it stops publishing.
	ErrFenced = errors.New("outbox: publisher generation fenced")

	// ErrPositionLost means the change log no longer holds the position a CDC relay must resume
	// from (a purged binary log, a dropped or invalidated replication slot, another server). The
	// relay stops instead of skipping the gap; CDCRelay.Backfill republishes what the gap may hold.
	// It is wrapped by *PositionLostError.
	ErrPositionLost = errors.New("outbox: cdc position lost")

	// ErrRetentionExceeded means the change log the database retains for a CDC relay grew past
	// CDCOptions.MaxRetainedBytes. It is wrapped by *RetentionError.
	ErrRetentionExceeded = errors.New("outbox: cdc log retention over its cap")

	// ErrInvalidMessage is wrapped by Inbox.Process errors for a message (or consumer name) that
	// cannot be processed as given; *MessageError names the field. Nothing was recorded.
	ErrInvalidMessage = errors.New("inbox: invalid message")

	// ErrInvalidHorizon means Inbox.Prune was given a horizon outside [MinTime, now+MaxClockSkew].
	// Nothing was changed.
	ErrInvalidHorizon = errors.New("inbox: invalid retention horizon")

	// ErrInvalidTx means a store was given a transaction it cannot write in: a nil transaction,
	// one that has ended, or one of another store or database. Nothing was written.
	ErrInvalidTx = errors.New("outbox: invalid transaction")

	// ErrNotRunning is wrapped by Relay.Health and CDCRelay.Health while the relay is not
	// running (before Run acquired its publisher generation, or after it returned).
	ErrNotRunning = errors.New("outbox: relay not running")

	// ErrStreamStalled means a change stream received nothing from the database within its
	// liveness bound although it asked for an answer: the server or the network went silent
	// with the connection left open (a black-holed route, a vanished host, a stuck log
	// sender). Change sources wrap it (see each source's options for its bound); a CDC relay
	// closes such a stream and resumes from its checkpoint on a new one.
	ErrStreamStalled = errors.New("outbox: cdc change stream stalled")

	// ErrLogUnavailable is wrapped by CDCRelay.Health while the relay has no working change
	// stream: the last one failed (broken, reset or stalled: the cause is wrapped too) or the
	// database refused its marks, and the relay is reconnecting, keeping its lanes, to resume
	// from its checkpoint.
	ErrLogUnavailable = errors.New("outbox: cdc change log unavailable")

	// ErrRelayRunning means Run was called on a relay whose Run has not returned yet (for a
	// CDCRelay: Run or Backfill while its Run or Backfill has not returned).
	ErrRelayRunning = errors.New("outbox: relay already running")

	// ErrBreakerOpen is wrapped by Relay.Health while the relay's breaker pauses fetching after
	// BreakerThreshold sends in a row failed.
	ErrBreakerOpen = errors.New("outbox: relay breaker open")

	// ErrSchemaMismatch means the database schema does not match what the adapter expects (for
	// example a lane count other than the one recorded at migration).
	ErrSchemaMismatch = errors.New("outbox: schema mismatch")

	// ErrNotMigrated means the database lacks tables, functions or rows that the adapter's
	// migrations create: run the store's Migrate (or MigrateInbox/MigrateOutbox) once, or start
	// the relay daemon with migrate: true, or run outboxkit migrate. It wraps ErrSchemaMismatch;
	// adapters return it as a *NotMigratedError.
	ErrNotMigrated = fmt.Errorf("%w: not migrated", ErrSchemaMismatch)

	// ErrLaneCountChanged means the outbox's lane count is no longer the one a writer computed
	// its records' lanes with: LaneResizer.ResizeLanes changed it since. The refused Insert
	// wrote nothing (see LaneInserter). It wraps ErrSchemaMismatch.
	ErrLaneCountChanged = fmt.Errorf("%w: lane count changed", ErrSchemaMismatch)

	// ErrResizeCDC means ResizeLanes was refused because the outbox's publisher generation is a
	// CDC relay's, which holds every lane of the count it started with: stop it, resize, and
	// start a relay again. Nothing was changed.
	ErrResizeCDC = errors.New("outbox: lanes resize: the publisher is a CDC relay")
)

// MigrateRemedy is what a *NotMigratedError tells the reader to do.
const MigrateRemedy = "run the store's Migrate once (the relay daemon: migrate: true in its config, or outboxkit migrate)"

// NotMigratedError is the one error every adapter returns for a database its migrations have
// not (or not completely) run on: a missing table, function, schema or recorded row. Its text
// says what is missing once and names the remedy (MigrateRemedy); an adapter wraps it at most
// with one prefix naming itself and the operation, and core returns it as it is.
// errors.Is(err, ErrNotMigrated) and errors.Is(err, ErrSchemaMismatch) are true for it, and Err
// (the database's error, if any) stays reachable with errors.As.
type NotMigratedError struct {
	// Missing says what the database lacks (e.g. "outbox lane count", "table inbox"); when
	// empty, Err's text says it.
	Missing string
	// Err is the database's error, or nil.
	Err error
}

func (e *NotMigratedError) Error() string {
	what := e.Missing
	switch {
	case what != "" && e.Err != nil:
		what += ": " + e.Err.Error()
	case e.Err != nil:
		what = e.Err.Error()
	}
	if what == "" {
		return "database not migrated: " + MigrateRemedy
	}
	return "database not migrated (" + what + "): " + MigrateRemedy
}

// Unwrap makes errors.Is(err, ErrNotMigrated) true and keeps Err reachable.
func (e *NotMigratedError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrNotMigrated}
	}
	return []error{ErrNotMigrated, e.Err}
}

// ValidationError says which field of which event (its index in the Write call) is invalid.
// errors.Is(err, ErrInvalidEvent) is true for it.
type ValidationError struct {
	Index  int    // index of the event in the Write call
	Field  string // Go field name, e.g. "AggregateID" or "Headers"
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid event %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidEvent) true.
func (e *ValidationError) Unwrap() error { return ErrInvalidEvent }

// MessageError names the field of an inbox message (or "consumer" for the consumer name) that
// Inbox.Process refuses. errors.Is(err, ErrInvalidMessage) is true for it.
type MessageError struct {
	Field  string // InboxMessage field name, or "consumer"
	Reason string
}

func (e *MessageError) Error() string {
	return fmt.Sprintf("inbox: invalid message: %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidMessage) true.
func (e *MessageError) Unwrap() error { return ErrInvalidMessage }

// BatchError is Inbox.ProcessBatch's error for the message at Index: Err is the error
// Process would have returned for it. errors.Is and errors.As see Err through it.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("inbox: batch message %d: %v", e.Index, e.Err)
}

// Unwrap returns Err.
func (e *BatchError) Unwrap() error { return e.Err }

// OptionError names the option that is invalid. errors.Is(err, ErrInvalidOptions) is true for it.
type OptionError struct {
	Field  string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("outbox: invalid option %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidOptions) true.
func (e *OptionError) Unwrap() error { return ErrInvalidOptions }

// LanesLostError is returned by RelayStore.Settle when one or more of the given leases are no
// longer held. errors.Is(err, ErrClaimLost) is true for it; Settle changed nothing.
type LanesLostError struct {
	Lanes []int
}

func (e *LanesLostError) Error() string {
	parts := make([]string, len(e.Lanes))
	for i, l := range e.Lanes {
		parts[i] = fmt.Sprint(l)
	}
	return "outbox: lane claim lost: lanes " + strings.Join(parts, ",")
}

// Unwrap makes errors.Is(err, ErrClaimLost) true.
func (e *LanesLostError) Unwrap() error { return ErrClaimLost }

// Permanent wraps err so that IsPermanent reports true: the relay parks the event instead of
// retrying it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{e.err, ErrPermanent} }

// RetryAfter wraps err, a retryable delivery error, with the delay the broker asked for before
// the next attempt (an HTTP answer's Retry-After, a broker's throttling hint). The relays then
// wait at least d, but never longer than their RetryPolicy.Max, before they try the event again,
// where their own backoff would be shorter. errors.Is(RetryAfter(err, d), err) holds, and so
// does errors.As to err's own types. RetryAfter(nil, d) is nil; a d of 0 or less returns err.
func RetryAfter(err error, d time.Duration) error {
	if err == nil || d <= 0 {
		return err
	}
	return &retryAfterError{err: err, after: d}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfterOf returns the delay RetryAfter put in err's chain, or 0 when there is none.
func RetryAfterOf(err error) time.Duration {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after
	}
	return 0
}

// IsPermanent reports whether a delivery error must not be retried: it wraps ErrPermanent or
// ErrUnknownDestination, or some error in its chain has a method Permanent() bool that returns
// true. Every other error is retryable: when in doubt the relay retries, because a duplicate is
// allowed and a loss is not.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrPermanent) || errors.Is(err, ErrUnknownDestination) {
		return true
	}
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// PositionLostError names the gap a CDC relay cannot stream across: the checkpoint it had and
// what the log offers now. errors.Is(err, ErrPositionLost) is true for it.
type PositionLostError struct {
	Source     string // the source identity of the checkpoint
	Checkpoint string // the position the relay needed (its last checkpoint)
	Available  string // the oldest position the log still holds, or what replaced it ("" unknown)
	Reason     string // what the database said
}

func (e *PositionLostError) Error() string {
	return fmt.Sprintf("outbox: cdc position lost: source %s: checkpoint %q, log now starts at %q: %s (run Backfill)",
		e.Source, e.Checkpoint, e.Available, e.Reason)
}

// Unwrap makes errors.Is(err, ErrPositionLost) true.
func (e *PositionLostError) Unwrap() error { return ErrPositionLost }

// RetentionError reports a change log retained past its cap. errors.Is(err, ErrRetentionExceeded)
// is true for it.
type RetentionError struct {
	Retention Retention
	Cap       int64
}

func (e *RetentionError) Error() string {
	return fmt.Sprintf("outbox: cdc log retention %d bytes is over its cap of %d bytes", e.Retention.RetainedBytes, e.Cap)
}

// Unwrap makes errors.Is(err, ErrRetentionExceeded) true.
func (e *RetentionError) Unwrap() error { return ErrRetentionExceeded }
