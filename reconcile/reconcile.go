// Package reconcile compares, by event ID, the events an application's domain says it must
// have written with what its outbox holds and what a consumer's inbox applied. Counting is not
// enough: a duplicate can hide an omission (three expected, three written, one of them twice
// and another never). It imports core and the standard library only.
//
// Run reads the expected events from the caller's iterator (one per domain transition that
// requires an event: ID, aggregate, version), the outbox through driver.Admin, and optionally a
// consumer's inbox through an InboxReader, over a time window, and returns a Report listing
// each kind of finding with its count and IDs (an event in the outbox that was not expected is
// reported Extra only, whatever its state):
//
//   - Missing: expected, not in the outbox.
//   - Extra: in the outbox within the window, not expected.
//   - DuplicateExpected: an ID the iterator yielded more than once.
//   - DuplicateVersions: two outbox events of one aggregate with the same version.
//   - VersionGaps: versions of an aggregate in the outbox that skip a number.
//   - Unpublished: expected, in the outbox, not published and older than the threshold.
//   - Parked: expected, in the outbox, parked.
//   - NotApplied: expected, published longer ago than the threshold, no record in the
//     consumer's inbox.
//   - DigestMismatches: the inbox recorded another payload digest than the outbox row's payload
//     (or the expected event's Digest differs from the outbox row's).
//   - Stale: the consumer recorded the event as stale (core.Stale: not applied).
//
// The outbox must keep published rows for the whole window (mark mode "set", cleanup retention
// longer than the window): a row deleted on publish or pruned is reported Missing.
package reconcile

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// Expected is one event the domain says must exist.
type Expected struct {
	ID            string
	AggregateType string
	AggregateID   string
	Version       int64 // 0: unversioned
	// Digest, when not zero, is the SHA-256 of the payload the event must carry.
	Digest [32]byte
}

// InboxReader reads a consumer's inbox records by event ID. Adapters that support
// reconciliation implement it (the PostgreSQL, MySQL and SQLite stores do).
type InboxReader interface {
	// InboxRecords returns the records of consumer among ids, by event ID; absent IDs are
	// omitted.
	InboxRecords(ctx context.Context, consumer string, ids []string) (map[string]driver.InboxRecord, error)
}

// Options bound a run. The zero value checks the outbox over all time.
type Options struct {
	// Since and Until bound the window on the outbox rows' CreatedAt (zero: unbounded). Only
	// rows in the window count as Extra and for version checks; expected events are looked up
	// whatever their time.
	Since, Until time.Time
	// UnpublishedAfter is how old an unpublished row (or a published event without an inbox
	// record) must be to be a finding. Default 5 minutes.
	UnpublishedAfter time.Duration
	// Inbox and Consumer, when both set, also check the consumer's inbox.
	Inbox    InboxReader
	Consumer string
	// Now is the reference time of the threshold. Default time.Now().
	Now time.Time
}

// DefaultUnpublishedAfter is Options.UnpublishedAfter's default.
const DefaultUnpublishedAfter = 5 * time.Minute

// Report is what Run found. Each list holds event IDs (for VersionGaps and DuplicateVersions,
// descriptions naming the aggregate and the versions), sorted.
type Report struct {
	Expected int // events the iterator yielded
	Outbox   int // outbox rows in the window

	Missing           []string
	Extra             []string
	DuplicateExpected []string
	DuplicateVersions []string
	VersionGaps       []string
	Unpublished       []string
	Parked            []string
	NotApplied        []string
	DigestMismatches  []string
	Stale             []string
}

// Findings returns the number of findings of every kind together.
func (r *Report) Findings() int {
	n := 0
	for _, k := range r.kinds() {
		n += len(k.ids)
	}
	return n
}

// OK reports whether the run found nothing.
func (r *Report) OK() bool { return r.Findings() == 0 }

type kind struct {
	name string
	ids  []string
}

func (r *Report) kinds() []kind {
	return []kind{
		{"missing", r.Missing}, {"extra", r.Extra}, {"duplicate_expected", r.DuplicateExpected},
		{"duplicate_versions", r.DuplicateVersions}, {"version_gaps", r.VersionGaps},
		{"unpublished", r.Unpublished}, {"parked", r.Parked}, {"not_applied", r.NotApplied},
		{"digest_mismatches", r.DigestMismatches}, {"stale", r.Stale},
	}
}

// String renders the report: a summary line, then one line per kind with findings.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "ok"
	if !r.OK() {
		verdict = "FINDINGS"
	}
	fmt.Fprintf(&b, "reconcile: %s expected=%d outbox=%d findings=%d\n", verdict, r.Expected, r.Outbox, r.Findings())
	for _, k := range r.kinds() {
		if len(k.ids) > 0 {
			fmt.Fprintf(&b, "%s %d: %s\n", k.name, len(k.ids), strings.Join(k.ids, " "))
		}
	}
	return b.String()
}

// listPage is the page size of the outbox scan.
const listPage = 1000

// Run compares expected with the outbox of admin (and the inbox, see Options). An error of the
// iterator, the outbox or the inbox ends the run with that error.
func Run(ctx context.Context, expected iter.Seq2[Expected, error], admin driver.Admin, o Options) (*Report, error) {
	if admin == nil {
		return nil, &core.OptionError{Field: "admin", Reason: "must not be nil"}
	}
	if o.UnpublishedAfter < 0 {
		return nil, &core.OptionError{Field: "UnpublishedAfter", Reason: "must not be negative"}
	}
	if o.UnpublishedAfter == 0 {
		o.UnpublishedAfter = DefaultUnpublishedAfter
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if !o.Since.IsZero() && !o.Until.IsZero() && o.Until.Before(o.Since) {
		return nil, &core.OptionError{Field: "Until", Reason: "must not be before Since"}
	}
	checkInbox := o.Inbox != nil && o.Consumer != ""
	if checkInbox {
		if err := driver.CheckConsumer(o.Consumer); err != nil {
			return nil, err
		}
	}
	// The outbox: every row, by ID; the window's rows counted apart.
	rows := map[string]driver.Record{}
	var inWindow []driver.Record
	var after int64
	for {
		page, err := admin.List(ctx, driver.ListParams{AfterSeq: after, Limit: listPage})
		if err != nil {
			return nil, fmt.Errorf("reconcile: list outbox: %w", err)
		}
		for _, r := range page {
			rows[r.ID] = r
			if (o.Since.IsZero() || !r.CreatedAt.Before(o.Since)) && (o.Until.IsZero() || r.CreatedAt.Before(o.Until)) {
				inWindow = append(inWindow, r)
			}
		}
		if len(page) < listPage {
			break
		}
		after = page[len(page)-1].Seq
	}
	rep := &Report{Outbox: len(inWindow)}
	seen := map[string]bool{}
	var found []driver.Record // expected events present in the outbox
	for ev, err := range expected {
		if err != nil {
			return nil, fmt.Errorf("reconcile: expected events: %w", err)
		}
		rep.Expected++
		if seen[ev.ID] {
			rep.DuplicateExpected = append(rep.DuplicateExpected, ev.ID)
			continue
		}
		seen[ev.ID] = true
		r, ok := rows[ev.ID]
		if !ok {
			rep.Missing = append(rep.Missing, ev.ID)
			continue
		}
		var zero [32]byte
		if ev.Digest != zero && ev.Digest != sha256.Sum256(r.Payload) {
			rep.DigestMismatches = append(rep.DigestMismatches, ev.ID)
		}
		found = append(found, r)
	}
	for _, r := range inWindow {
		if !seen[r.ID] {
			rep.Extra = append(rep.Extra, r.ID)
		}
	}
	// Versions of each aggregate among the window's rows.
	versions := map[[2]string][]int64{}
	for _, r := range inWindow {
		if r.AggregateVersion > 0 {
			k := [2]string{r.AggregateType, r.AggregateID}
			versions[k] = append(versions[k], r.AggregateVersion)
		}
	}
	for k, vs := range versions {
		slices.Sort(vs)
		for i := 1; i < len(vs); i++ {
			switch {
			case vs[i] == vs[i-1]:
				rep.DuplicateVersions = append(rep.DuplicateVersions, fmt.Sprintf("%s/%s@%d", k[0], k[1], vs[i]))
			case vs[i] > vs[i-1]+1:
				rep.VersionGaps = append(rep.VersionGaps, fmt.Sprintf("%s/%s@%d..%d", k[0], k[1], vs[i-1], vs[i]))
			}
		}
	}
	cutoff := o.Now.Add(-o.UnpublishedAfter)
	var published []driver.Record
	for _, r := range found {
		switch {
		case !r.ParkedAt.IsZero():
			rep.Parked = append(rep.Parked, r.ID)
		case r.PublishedAt.IsZero():
			if r.CreatedAt.Before(cutoff) {
				rep.Unpublished = append(rep.Unpublished, r.ID)
			}
		default:
			published = append(published, r)
		}
	}
	if checkInbox && len(published) > 0 {
		ids := make([]string, len(published))
		for i, r := range published {
			ids[i] = r.ID
		}
		recs, err := o.Inbox.InboxRecords(ctx, o.Consumer, ids)
		if err != nil {
			return nil, fmt.Errorf("reconcile: read inbox: %w", err)
		}
		for _, r := range published {
			ir, ok := recs[r.ID]
			switch {
			case !ok:
				if r.PublishedAt.Before(cutoff) {
					rep.NotApplied = append(rep.NotApplied, r.ID)
				}
			case ir.Digest != sha256.Sum256(r.Payload):
				rep.DigestMismatches = append(rep.DigestMismatches, r.ID)
			case ir.Outcome == core.Stale:
				rep.Stale = append(rep.Stale, r.ID)
			}
		}
	}
	for _, l := range []*[]string{&rep.Missing, &rep.Extra, &rep.DuplicateExpected, &rep.DuplicateVersions,
		&rep.VersionGaps, &rep.Unpublished, &rep.Parked, &rep.NotApplied, &rep.DigestMismatches, &rep.Stale} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return rep, nil
}

// ErrFindings is wrapped by Report.Err when a run found something.
var ErrFindings = errors.New("reconcile: findings")

// Err returns nil when the report is OK, else an error wrapping ErrFindings with the summary.
func (r *Report) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("%w: %d (%s)", ErrFindings, r.Findings(), strings.TrimSpace(strings.SplitN(r.String(), "\n", 2)[0]))
}
