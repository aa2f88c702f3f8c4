package driver

import (
	"fmt"
	"time"
)

// Outcome is what Inbox.Process did with a message.
type Outcome int

// Outcomes of Inbox.Process. Applied and Stale are recorded; Duplicate reports the recorded one.
const (
	// Applied: the handler ran and its effect committed with the inbox record.
	Applied Outcome = iota + 1
	// Duplicate: this consumer already processed this event ID with the same payload; nothing ran.
	Duplicate
	// Stale: the message's entity version is not newer than the last applied one; it was recorded
	// and the handler did not run.
	Stale
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Inbox field bounds.
const (
	MaxPositionLen = 1024
	// MaxEntityKeyLen bounds the entity keys of InboxStore.LockVersion and SetVersion: an
	// entity (MaxNameLen) behind its inbox's source and tenant (MaxNameLen each) and two
	// separators.
	MaxEntityKeyLen = 3*MaxNameLen + 2
	// MaxClockSkew is how far in the future Inbox.Prune accepts a horizon.
	MaxClockSkew = time.Minute
	// MaxPruneLimit bounds Inbox.Prune's limit.
	MaxPruneLimit = 100_000
)

// MinTime and MaxTime bound every time the public API accepts (InboxMessage.OccurredAt, a
// Prune horizon): every adapter stores times in this range exactly, to the microsecond.
var (
	MinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// CheckTime reports why t is outside [MinTime, MaxTime], or "".
func CheckTime(t time.Time) string {
	if t.Before(MinTime) || t.After(MaxTime) {
		return "outside 1970-01-01 to 9999-12-31 UTC"
	}
	return ""
}

// CheckConsumer returns a *MessageError when name is not a valid inbox consumer name: text
// (CheckText) of 1 to 255 bytes. Inbox.Process applies it; consumers built on an Inbox (such as
// the SQS consumer) apply it at construction.
func CheckConsumer(name string) error {
	if r := CheckTextLen(name, MaxNameLen, true); r != "" {
		return &MessageError{Field: "consumer", Reason: r}
	}
	return nil
}

// CheckInboxPrune checks the arguments of an inbox prune (Inbox.Prune,
// core.Operator.PruneInbox) and returns the batch size: a *MessageError for a bad consumer,
// an error wrapping ErrInvalidHorizon for a before outside [MinTime, now+MaxClockSkew], an
// *OptionError for a limit above MaxPruneLimit; limit <= 0 means DefaultPruneLimit.
func CheckInboxPrune(consumer string, before time.Time, limit int) (int, error) {
	if err := CheckConsumer(consumer); err != nil {
		return 0, err
	}
	if r := CheckTime(before); r != "" {
		return 0, fmt.Errorf("%w: %s is %s", ErrInvalidHorizon, before.UTC().Format(time.RFC3339Nano), r)
	}
	if now := time.Now(); before.After(now.Add(MaxClockSkew)) {
		return 0, fmt.Errorf("%w: %s is in the future (now %s, allowed skew %s)", ErrInvalidHorizon,
			before.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano), MaxClockSkew)
	}
	if limit > MaxPruneLimit {
		return 0, &OptionError{Field: "limit", Reason: fmt.Sprintf("must be at most %d", MaxPruneLimit)}
	}
	return PruneLimit(limit), nil
}
