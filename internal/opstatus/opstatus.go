// Package opstatus reads an outbox's status as `outboxkit status` shows it and the operator
// console (internal/console) draws it: one reading (Collect) and one set of rules for the lane
// summary, the live holder, the per-destination breakdown, the publish rate's ETA and the CDC
// checkpoint's retention, so that the command and the console never disagree.
package opstatus

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// Destinations is how many of the oldest pending records the status breaks down by
// destination (the bound of the adapters' Stats).
const Destinations = 10_000

// RateWindow is the window of the publish rate, and RateRecords the most published records it
// reads for it (beyond, the rate of the most recent ones). RecentWindow is how recently
// something must have been published for the status to show an ETA: a fleet that stopped
// publishing (a breaker open, every relay gone) has none.
const (
	RateWindow   = time.Minute
	RateRecords  = 10_000
	RecentWindow = 10 * time.Second
)

// Report is the status of an outbox (the JSON of `outboxkit status --output json`).
type Report struct {
	Pending   int64 `json:"pending"`
	Parked    int64 `json:"parked"`
	Blocked   int64 `json:"blocked"`   // pending records behind a parked record of their key
	Published int64 `json:"published"` // an estimate on a large table (driver.Stats)
	// OldestPendingAt and OldestPendingAge are absent when nothing is pending.
	OldestPendingAt  *time.Time `json:"oldest_pending_at,omitempty"`
	OldestPendingAge float64    `json:"oldest_pending_age_seconds,omitempty"`
	// Destinations counts the pending records per destination, among the oldest
	// Destinations of them in seq order.
	Destinations DestinationCounts `json:"pending_by_destination"`
	// PublishRate (every adapter: SQLite's publications, the PostgreSQL and MySQL/MariaDB
	// settle logs; absent on an outbox migrated by an older version) is the records published
	// per second over the last minute (PublishRateWindow, in seconds). PublishETA is the time
	// to publish the pending ones at that rate, present only while the fleet publishes: some
	// pending, and some published within the last RecentWindow (PublishedRecently).
	PublishRate       *float64    `json:"publish_rate_per_second,omitempty"`
	PublishRateWindow float64     `json:"publish_rate_window_seconds"`
	PublishedRecently bool        `json:"published_recently"`
	PublishETA        *float64    `json:"publish_eta_seconds,omitempty"`
	Publisher         Publisher   `json:"publisher"`
	Checkpoint        *Checkpoint `json:"cdc_checkpoint,omitempty"`
	LaneSummary       LaneSummary `json:"lane_summary"`
	Lanes             []Lane      `json:"lanes"`
	// DrainRate and DrainETA (status --watch only, once it has looked twice): how fast pending
	// fell over the last minute of the watch (net of new events; negative while it grows), and
	// the time to empty at that rate (absent unless it falls).
	DrainRate *float64 `json:"drain_rate_per_second,omitempty"`
	DrainETA  *float64 `json:"drain_eta_seconds,omitempty"`
}

// Publisher is the publisher generation of a Report.
type Publisher struct {
	Generation int64  `json:"generation"`
	Kind       string `json:"kind"`
	// Holder is the relay that took the generation (a polling fleet joins it: that relay may
	// have exited since); LiveHolder is a relay holding a lane whose lease has not expired:
	// Holder when it does, else the first such owner by name, "" when none does.
	Holder     string     `json:"holder"`
	LiveHolder string     `json:"live_holder"`
	Since      *time.Time `json:"since,omitempty"`
}

// LaneSummary counts the lanes: held (an owner whose lease has not expired), expired (an
// owner whose lease ran out: a relay that stopped without releasing, or a stalled one) and
// free (no owner), with the lanes of each owner (held or expired).
type LaneSummary struct {
	Held    int          `json:"held"`
	Expired int          `json:"expired"`
	Free    int          `json:"free"`
	Owners  []LaneOwners `json:"owners"`
}

// LaneOwners is one owner's lanes in a LaneSummary.
type LaneOwners struct {
	Owner   string `json:"owner"`
	Held    int    `json:"held"`
	Expired int    `json:"expired"`
}

// DestinationCounts is the pending records per destination.
type DestinationCounts struct {
	// Counted is how many pending records were counted: all of them, or the oldest
	// Destinations when Partial.
	Counted int64 `json:"counted"`
	Partial bool  `json:"partial"`
	// Counts has one entry per destination (the event's Destination, "" when the router
	// decides), most pending first.
	Counts []DestinationCount `json:"counts"`
}

// DestinationCount is one destination's pending records.
type DestinationCount struct {
	Destination string `json:"destination"`
	Pending     int64  `json:"pending"`
}

// Checkpoint is the CDC relay's checkpoint of a Report.
type Checkpoint struct {
	Source     string    `json:"source"`
	Position   string    `json:"position"`
	Generation int64     `json:"generation"`
	UpdatedAt  time.Time `json:"updated_at"`
	AgeSeconds float64   `json:"age_seconds"` // now - updated_at
	// Slot is the PostgreSQL replication slot the checkpoint's source names.
	Slot string `json:"slot,omitempty"`
	// RetainedBytes and HeadroomBytes are the change source's Retention of the checkpoint
	// (core.Retention); HeadroomBytes is absent on PostgreSQL, whose slot pins the WAL. Both
	// are absent when it could not be measured, with RetentionError saying why.
	RetainedBytes  *int64 `json:"retained_bytes,omitempty"`
	HeadroomBytes  *int64 `json:"headroom_bytes,omitempty"`
	RetentionError string `json:"retention_error,omitempty"`
}

// Lane is one lane's lease in a Report.
type Lane struct {
	Lane       int        `json:"lane"`
	Owner      string     `json:"owner"`
	Generation int64      `json:"generation"`
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// NewOperator is the core.Operator of the status reads and the operator commands on db, with
// the status's bounds (Destinations, RateWindow, RateRecords). logger nil: discard.
func NewOperator(db *opendb.DB, logger *slog.Logger) (*core.Operator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return core.NewOperator(db.Store, &core.OperatorOptions{
		Logger:             logger,
		StatusDestinations: Destinations,
		StatusRateWindow:   RateWindow,
		StatusRateRecords:  RateRecords,
	})
}

// Collect reads the status of the outbox (indexed reads and estimates only: op.Status) and
// measures the log retained for its CDC checkpoint. It returns the time the ages were measured
// at.
func Collect(ctx context.Context, db *opendb.DB, op *core.Operator) (Report, time.Time, error) {
	st, err := op.Status(ctx)
	if err != nil {
		return Report{}, time.Time{}, err
	}
	now := time.Now()
	r := Report{Pending: st.Pending, Parked: st.Parked, Blocked: st.Blocked, Published: st.Published, OldestPendingAt: timePtr(st.OldestPendingAt), Lanes: []Lane{}}
	if !st.OldestPendingAt.IsZero() {
		r.OldestPendingAge = max(now.Sub(st.OldestPendingAt).Seconds(), 0)
	}
	pub := st.Publisher
	r.Publisher = Publisher{Generation: pub.Generation, Kind: pub.Kind, Holder: pub.Holder, Since: timePtr(pub.Since)}
	r.Publisher.LiveHolder, r.LaneSummary = SummarizeLanes(st.Lanes, pub, now)
	if c := st.Checkpoint; c != nil {
		r.Checkpoint = &Checkpoint{Source: c.Source, Position: c.Position, Generation: c.Generation, UpdatedAt: c.UpdatedAt.UTC(),
			AgeSeconds: max(now.Sub(c.UpdatedAt).Seconds(), 0)}
		checkpointRetention(ctx, db, r.Checkpoint)
	}
	r.Destinations = destinationsOf(st.Destinations, st.DestinationsPartial)
	r.PublishRateWindow = RateWindow.Seconds()
	if st.PublishRateKnown {
		rate := st.PublishRate
		r.PublishRate = &rate
		if rate > 0 {
			recent, _, err := db.Store.PublishRate(ctx, RecentWindow, 1)
			if err != nil {
				return Report{}, time.Time{}, err
			}
			r.PublishedRecently = recent > 0
		}
		if r.PublishedRecently && r.Pending > 0 {
			eta := float64(r.Pending) / rate
			r.PublishETA = &eta
		}
	}
	for _, l := range st.Lanes {
		r.Lanes = append(r.Lanes, Lane{Lane: l.Lane, Owner: l.Owner, Generation: l.Generation, LeaseUntil: timePtr(l.Until)})
	}
	return r, now, nil
}

// SummarizeLanes counts the lanes at now and finds a live holder: pub's Holder when that relay
// holds an unexpired lease, else the first owner (by name) that does, "" when none does. (A
// lease's Generation is its lane's fencing token, not the publisher generation: a relay of an
// older publisher generation is fenced at its next renewal, its lease expires then.)
func SummarizeLanes(lanes []driver.Lease, pub driver.Publisher, now time.Time) (string, LaneSummary) {
	s := LaneSummary{Owners: []LaneOwners{}}
	of := map[string]*LaneOwners{}
	live := map[string]bool{}
	for _, l := range lanes {
		if l.Owner == "" {
			s.Free++
			continue
		}
		o := of[l.Owner]
		if o == nil {
			o = &LaneOwners{Owner: l.Owner}
			of[l.Owner] = o
		}
		if l.Until.IsZero() || l.Until.After(now) {
			s.Held++
			o.Held++
			live[l.Owner] = true
		} else {
			s.Expired++
			o.Expired++
		}
	}
	for _, o := range of {
		s.Owners = append(s.Owners, *o)
	}
	sort.Slice(s.Owners, func(i, j int) bool { return s.Owners[i].Owner < s.Owners[j].Owner })
	if live[pub.Holder] {
		return pub.Holder, s
	}
	for _, o := range s.Owners {
		if live[o.Owner] {
			return o.Owner, s
		}
	}
	return "", s
}

// Live reports whether a lane of a Report is held at now: an owner whose lease has not
// expired (SummarizeLanes' rule).
func (l Lane) Live(now time.Time) bool {
	return l.Owner != "" && (l.LeaseUntil == nil || l.LeaseUntil.After(now))
}

// destinationsOf sorts the counts, most pending first (then by name).
func destinationsOf(counts map[string]int64, partial bool) DestinationCounts {
	d := DestinationCounts{Counts: []DestinationCount{}}
	for dest, n := range counts {
		d.Counts = append(d.Counts, DestinationCount{Destination: dest, Pending: n})
		d.Counted += n
	}
	sort.Slice(d.Counts, func(i, j int) bool {
		a, b := d.Counts[i], d.Counts[j]
		return a.Pending > b.Pending || (a.Pending == b.Pending && a.Destination < b.Destination)
	})
	d.Partial = partial
	return d
}

// checkpointRetention measures the log the database retains for the checkpoint through the
// change source's Retention (PostgreSQL: of the slot the checkpoint's source names); a failure
// is recorded in RetentionError, not returned: the status shows the rest.
func checkpointRetention(ctx context.Context, db *opendb.DB, c *Checkpoint) {
	if db.ChangeSource == nil {
		return
	}
	var src driver.ChangeSource
	var err error
	if db.SlotSource != nil {
		slot, ok := logical.IdentitySlot(c.Source)
		if !ok {
			c.RetentionError = "the checkpoint's source names no replication slot"
			return
		}
		c.Slot = slot
		src, err = db.SlotSource(slot)
	} else {
		src, err = db.ChangeSource()
	}
	if err == nil {
		var ret core.Retention
		if ret, err = src.Retention(ctx, c.Position); err == nil {
			c.RetainedBytes = &ret.RetainedBytes
			if ret.HeadroomBytes >= 0 {
				c.HeadroomBytes = &ret.HeadroomBytes
			}
			return
		}
	}
	c.RetentionError = strings.Join(strings.Fields(err.Error()), " ")
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// ParseSince reads a "since" value of the operator commands and the console: an RFC 3339 time,
// or a duration meaning that long before now (90m).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration ago (90m), got %q", s)
}
