package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core/driver"
)

// The parameters of Operator's commands (see driver for each field's rule).
type (
	// ReplayParams selects the published events of a Replay: IDs, or PartitionKey with Since.
	ReplayParams = driver.ReplayParams
	// ResetLanesParams selects the lanes of a ResetLanes: exactly one of Lanes, Owner and All.
	ResetLanesParams = driver.ResetLanesParams
	// PruneParams bounds an audited Cleanup: PublishedBefore, BelowSeq and the batch size.
	PruneParams = driver.PruneParams
	// AuditEntry is one row of the outbox's audit table: who ran which command with which
	// arguments, and how many rows it changed.
	AuditEntry = driver.AuditEntry
	// AuditListParams selects audit rows: at or after Since, the latest Limit.
	AuditListParams = driver.AuditListParams
)

// MaxReplay is the most events one Replay puts back (one transaction).
const MaxReplay = driver.MaxReplay

// ErrPermissionDenied means the database refused a statement for the role's privileges; the
// SQL adapters' errors wrap it (see driver.ErrPermissionDenied).
var ErrPermissionDenied = driver.ErrPermissionDenied

// OperatorOptions configures an Operator. Zero fields take their defaults.
type OperatorOptions struct {
	// Logger receives a warning when waking the relays after a command failed (a lost wake-up
	// costs latency only: relays poll). Default slog.Default().
	Logger *slog.Logger
	// StatusDestinations is how many of the oldest pending records Status breaks down by
	// destination. Default 10,000.
	StatusDestinations int
	// StatusRateWindow is the window of Status's publish rate. Default one minute.
	StatusRateWindow time.Duration
	// StatusRateRecords is the most published records Status reads for its publish rate
	// (beyond, the rate of the most recent ones). Default 10,000.
	StatusRateRecords int
}

// Operator runs the operator commands on an outbox: Replay, Unpark, Cleanup, ResetLanes,
// ResizeLanes and PruneInbox, each audited (its AuditEntry written in the transaction of its
// change), AuditLog, and Status. It holds each command's rules once, for every adapter:
// argument checks, the refusal of a CDC publisher, the order of the steps in one transaction
// of the store (driver.OperatorTx), the audit row, and waking the relays after a change they
// must deliver (through driver.Notifier, flushed when the store is a driver.Flusher). It is
// safe for concurrent use; `outboxkit` runs its commands with it.
type Operator struct {
	store driver.OperatorStore
	o     OperatorOptions
}

// NewOperator returns an Operator on store (every adapter of this module implements
// driver.OperatorStore). opts may be nil.
func NewOperator(store driver.OperatorStore, opts *OperatorOptions) (*Operator, error) {
	if store == nil {
		return nil, &OptionError{Field: "store", Reason: "must not be nil"}
	}
	var o OperatorOptions
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := driver.CheckCount("StatusDestinations", o.StatusDestinations, statusMaxRecords); err != nil {
		return nil, err
	}
	if err := driver.CheckCount("StatusRateRecords", o.StatusRateRecords, statusMaxRecords); err != nil {
		return nil, err
	}
	if o.StatusRateWindow < 0 {
		return nil, &OptionError{Field: "StatusRateWindow", Reason: "must not be negative"}
	}
	if o.StatusDestinations == 0 {
		o.StatusDestinations = 10_000
	}
	if o.StatusRateRecords == 0 {
		o.StatusRateRecords = 10_000
	}
	if o.StatusRateWindow == 0 {
		o.StatusRateWindow = time.Minute
	}
	return &Operator{store: store, o: o}, nil
}

// statusMaxRecords bounds OperatorOptions.StatusDestinations and StatusRateRecords.
const statusMaxRecords = 1_000_000

// refusal marks an error Operator itself decided (a refused command) inside a transaction, so
// that it is returned as it is, without the command's prefix.
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// fail is a command's error: a refusal as it is, anything else (the store's) after the
// command's name.
func fail(command string, err error) error {
	if r, ok := errors.AsType[*refusal](err); ok {
		return r.err
	}
	return storeError("outbox: "+command, err)
}

// Replay puts the published events of p back to pending (as never attempted) in one
// transaction, and returns how many. Replayed events keep their Seq, so a polling relay
// delivers them again in their original order, and cleanup's watermark (the lowest unpublished
// Seq) holds back behind them until they are published again. The transaction's steps:
// driver.OperatorTx.BeginReplay (the lane count, no resize or cleanup until the end), the
// publisher (a CDC relay's generation is refused: it delivers what the database log carries
// and would not see the rows again), the rows of p selected and locked, the refusals of
// driver.CheckReplayTargets, the rows requeued in their key's lane under the current count, and
// p.Audit (when not nil) written with Rows set. The relays are woken afterwards.
//
// Replay changes nothing and returns an error wrapping ErrReplayNotFound, ErrReplayKeyPending,
// ErrReplayCDC or ErrReplayTooMany (a *ReplayError) when p selects an unknown or pruned ID, a
// key with unpublished events, a CDC-published outbox, or too many events; p must give IDs or
// a PartitionKey (an *OptionError otherwise).
func (o *Operator) Replay(ctx context.Context, p ReplayParams) (int, error) {
	ids, err := driver.CheckReplay(p)
	if err != nil {
		return 0, err
	}
	p.IDs = ids
	var n int64
	err = o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		n = 0
		lanes, err := tx.BeginReplay(ctx)
		if err != nil {
			return err
		}
		pub, err := tx.Publisher(ctx)
		if err != nil {
			return err
		}
		if pub.Kind == driver.KindCDC {
			return &refusal{&ReplayError{Err: ErrReplayCDC, Detail: fmt.Sprintf("generation %d held by %q", pub.Generation, pub.Holder)}}
		}
		targets, err := tx.ReplayTargets(ctx, p, MaxReplay+1)
		if err != nil {
			return err
		}
		if _, err := driver.CheckReplayTargets(ids, p.PartitionKey, targets, func(key string) (bool, error) {
			return tx.KeyUnpublished(ctx, key)
		}); err != nil {
			if _, refused := errors.AsType[*ReplayError](err); refused {
				return &refusal{err}
			}
			return err
		}
		for i := range targets {
			targets[i].Lane = driver.LaneOf(targets[i].PartitionKey, lanes)
		}
		if n, err = tx.Requeue(ctx, targets); err != nil {
			return err
		}
		return o.audit(ctx, tx, p.Audit, n)
	})
	if err != nil {
		return 0, fail("replay", err)
	}
	if n > 0 {
		o.wake(ctx)
	}
	return int(n), nil
}

// Unpark releases the parked keys (as driver.Admin.Unpark: ParkedAt, NextAttemptAt and
// Attempts of their unpublished records cleared) in one transaction, writes audit (when not
// nil, Rows set to the records changed) in it, and returns how many records changed. The
// relays are woken afterwards, so that they deliver the keys' records again in order.
func (o *Operator) Unpark(ctx context.Context, keys []string, audit *AuditEntry) (int, error) {
	var total int64
	err := o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		total = 0
		for _, k := range keys {
			n, err := tx.Unpark(ctx, k)
			if err != nil {
				return err
			}
			total += n
		}
		return o.audit(ctx, tx, audit, total)
	})
	if err != nil {
		return 0, fail("unpark", err)
	}
	if total > 0 {
		o.wake(ctx)
	}
	return int(total), nil
}

// Cleanup deletes, in one transaction, every row driver.Pruner.PruneOutbox would delete under p
// (in batches of p.BatchSize(); partitions are not dropped: CleanupOutbox does that), writes
// audit (Rows set) in it, and returns how many rows it deleted.
func (o *Operator) Cleanup(ctx context.Context, p PruneParams, audit AuditEntry) (int, error) {
	var total int64
	err := o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		total = 0
		for {
			n, err := tx.PruneOutbox(ctx, p)
			if err != nil {
				return err
			}
			total += n
			if n < int64(p.BatchSize()) {
				return o.audit(ctx, tx, &audit, total)
			}
		}
	})
	if err != nil {
		return 0, fail("prune outbox", err)
	}
	return int(total), nil
}

// ResetLanes ends, in one transaction with audit (Rows set to the lanes changed), the leases of
// the lanes p selects that have an owner (a valid or an expired lease; free lanes are left
// alone): owner and sign of life (driver.Liveness) cleared, lease expired, generation
// incremented. Whatever the old owner settles or renews afterwards is refused (its lease no
// longer matches: driver.RelayStore.Settle's fencing) and any relay may claim the lanes at its
// next claim. It returns how many lanes it changed. p is checked first against the lane count
// (driver.CheckResetLanes): a bad selection returns an *OptionError and changes nothing.
func (o *Operator) ResetLanes(ctx context.Context, p ResetLanesParams, audit AuditEntry) (int, error) {
	count, err := o.store.LaneCount(ctx)
	if err != nil {
		return 0, fail("reset lanes", err)
	}
	lanes, err := driver.CheckResetLanes(p, count)
	if err != nil {
		return 0, err
	}
	p.Lanes = lanes
	var n int64
	err = o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		var err error
		if n, err = tx.ResetLanes(ctx, p); err != nil {
			return err
		}
		return o.audit(ctx, tx, &audit, n)
	})
	if err != nil {
		return 0, fail("reset lanes", err)
	}
	return int(n), nil
}

// ResizeLanes changes the outbox's lane count to lanes in one transaction (see
// driver.LaneResizer for the whole contract): driver.OperatorTx.BeginResize (the writers in
// flight waited for, new ones held back), the publisher (a CDC relay's generation is refused
// with an error wrapping ErrResizeCDC: it holds every lane of the count it started with),
// every lease ended and every unpublished row moved to its key's lane under the new count
// (OperatorTx.ResizeLanes), and audit written with Rows set to the rows moved. It returns how
// many rows it moved; the relays are woken afterwards (they claim the new lanes at their next
// maintenance round).
//
// lanes outside [1, MaxLanes] returns an *OptionError and changes nothing; lanes equal to the
// current count changes nothing, writes no audit row and returns 0.
func (o *Operator) ResizeLanes(ctx context.Context, lanes int, audit AuditEntry) (int, error) {
	if err := driver.CheckResizeLanes(lanes); err != nil {
		return 0, err
	}
	var moved int64
	var changed bool
	err := o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		moved, changed = 0, false
		old, err := tx.BeginResize(ctx)
		if err != nil || old == lanes {
			return err
		}
		pub, err := tx.Publisher(ctx)
		if err != nil {
			return err
		}
		if pub.Kind == driver.KindCDC {
			return &refusal{fmt.Errorf("%w: generation %d held by %q", ErrResizeCDC, pub.Generation, pub.Holder)}
		}
		if moved, err = tx.ResizeLanes(ctx, old, lanes); err != nil {
			return err
		}
		changed = true
		return o.audit(ctx, tx, &audit, moved)
	})
	if err != nil {
		return 0, fail("resize lanes", err)
	}
	if changed {
		o.wake(ctx)
	}
	return int(moved), nil
}

// PruneInbox is Inbox.Prune of the consumer's records older than before (the same checks:
// driver.CheckInboxPrune; the same retention rule: driver.InboxStore.PruneInbox), audited. The
// audit row is written in the transaction that raises the horizon, with Rows -1, and its Rows
// set to the records deleted in the transaction of the last deletion (limit records per
// transaction): the horizon never moves without its audit row, and a row left at -1 says the
// horizon was raised but the deletions did not finish (a later prune deletes the rest). On a
// driver.SingleWriter store all of it runs in one transaction, Rows set at once. It returns how
// many records it deleted.
func (o *Operator) PruneInbox(ctx context.Context, consumer string, before time.Time, limit int, audit AuditEntry) (int, error) {
	limit, err := driver.CheckInboxPrune(consumer, before, limit)
	if err != nil {
		return 0, err
	}
	if sw, ok := o.store.(driver.SingleWriter); ok && sw.SingleWriter() {
		var total int64
		err := o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
			total = 0
			h, err := tx.RaiseHorizon(ctx, consumer, before)
			if err != nil {
				return err
			}
			for {
				n, err := tx.PruneInbox(ctx, consumer, h, limit)
				if err != nil {
					return err
				}
				total += n
				if n < int64(limit) {
					return o.audit(ctx, tx, &audit, total)
				}
			}
		})
		if err != nil {
			return 0, fail("prune inbox", err)
		}
		return int(total), nil
	}
	var h time.Time
	var id int64
	err = o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		var err error
		if h, err = tx.RaiseHorizon(ctx, consumer, before); err != nil {
			return err
		}
		a := audit
		a.Rows = -1
		id, err = tx.WriteAudit(ctx, a)
		return err
	})
	if err != nil {
		return 0, fail("prune inbox: raise horizon", err)
	}
	var total int64
	for {
		var n int64
		err := o.store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
			var err error
			if n, err = tx.PruneInbox(ctx, consumer, h, limit); err != nil || n >= int64(limit) {
				return err
			}
			return tx.SetAuditRows(ctx, id, total+n)
		})
		if err != nil {
			return int(total), fail("prune inbox", err)
		}
		total += n
		if n < int64(limit) {
			return int(total), nil
		}
	}
}

// AuditLog returns the audit rows of p (the latest p.Limit, default DefaultListLimit), oldest
// first.
func (o *Operator) AuditLog(ctx context.Context, p AuditListParams) ([]AuditEntry, error) {
	p.Limit = driver.ListParams{Limit: p.Limit}.PageSize()
	out, err := o.store.ListAudit(ctx, p)
	if err != nil {
		return nil, fail("audit log", err)
	}
	slices.Reverse(out)
	return out, nil
}

// Status is what Operator.Status read: indexed reads and estimates only (see each
// driver.StatusReader method and driver.Stats for which counts are estimates).
type Status struct {
	Pending         int64     // unpublished, not parked
	Parked          int64     // unpublished, parked
	Published       int64     // published rows still present
	OldestPendingAt time.Time // zero when nothing is pending
	// Blocked is how many pending records wait behind a parked record of their key (0 when
	// nothing is parked).
	Blocked int64
	// Destinations counts the pending records per destination among the oldest
	// OperatorOptions.StatusDestinations of them; DestinationsPartial is set when they were
	// that many (the backlog may be larger).
	Destinations        map[string]int64
	DestinationsPartial bool
	// PublishRate is the records published per second over the last
	// OperatorOptions.StatusRateWindow, when PublishRateKnown.
	PublishRate      float64
	PublishRateKnown bool
	Publisher        driver.Publisher
	// Checkpoint is the CDC checkpoint of a store that keeps one (driver.CheckpointStore), nil
	// otherwise or when none was saved.
	Checkpoint *driver.Checkpoint
	// Lanes is every lane's lease, in lane order.
	Lanes []driver.Lease
}

// Status reads the outbox's status: Stats, the blocked records (when some are parked), the
// publisher generation, the CDC checkpoint, the pending records per destination, the publish
// rate and the lanes.
func (o *Operator) Status(ctx context.Context) (Status, error) {
	st, err := o.store.Stats(ctx)
	if err != nil {
		return Status{}, fail("status", err)
	}
	s := Status{Pending: st.Pending, Parked: st.Parked, Published: st.Published, OldestPendingAt: st.OldestPendingAt}
	if st.Parked > 0 {
		if s.Blocked, err = o.store.Blocked(ctx); err != nil {
			return Status{}, fail("status", err)
		}
	}
	if s.Publisher, err = o.store.Generation(ctx); err != nil {
		return Status{}, fail("status", err)
	}
	if cs, ok := o.store.(driver.CheckpointStore); ok {
		c, found, err := cs.LoadCheckpoint(ctx)
		if err != nil {
			return Status{}, fail("status", err)
		}
		if found {
			s.Checkpoint = &c
		}
	}
	if s.Destinations, err = o.store.PendingDestinations(ctx, o.o.StatusDestinations); err != nil {
		return Status{}, fail("status", err)
	}
	var counted int64
	for _, n := range s.Destinations {
		counted += n
	}
	s.DestinationsPartial = counted >= int64(o.o.StatusDestinations)
	if s.PublishRate, s.PublishRateKnown, err = o.store.PublishRate(ctx, o.o.StatusRateWindow, o.o.StatusRateRecords); err != nil {
		return Status{}, fail("status", err)
	}
	if s.Lanes, err = o.store.Lanes(ctx); err != nil {
		return Status{}, fail("status", err)
	}
	return s, nil
}

// audit writes a (when not nil) with Rows set to rows.
func (o *Operator) audit(ctx context.Context, tx driver.OperatorTx, a *AuditEntry, rows int64) error {
	if a == nil {
		return nil
	}
	e := *a
	e.Rows = rows
	_, err := tx.WriteAudit(ctx, e)
	return err
}

// wake tells the relays that events became deliverable (driver.Notifier) and waits until the
// notification is sent (driver.Flusher), bounded: the caller (a CLI) may close the store's
// pool right after. A failure is logged; relays still poll.
func (o *Operator) wake(ctx context.Context) {
	n, ok := o.store.(driver.Notifier)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := n.Notify(ctx)
	if f, ok := o.store.(driver.Flusher); ok && err == nil {
		err = f.Flush(ctx)
	}
	if err != nil {
		o.o.Logger.Warn("outbox_operator_wake_failed", "error", err)
	}
}
