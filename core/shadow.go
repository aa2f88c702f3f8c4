package core

import (
	"context"
	"fmt"
	"github.com/outboxkit/outbox/core/driver"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// ShadowOptions configures a CDCShadow. Zero fields take their documented defaults.
type ShadowOptions struct {
	// Grace is how long either side may take to publish a committed event before the report
	// counts it as a difference. Default 30s.
	Grace time.Duration
	// ClockMargin allows for the difference between this process's clock and the database's:
	// rows created less than ClockMargin after the shadow started are not held against it.
	// Default 2s.
	ClockMargin time.Duration
	// Logger receives the shadow's logs. Default slog.Default().
	Logger *slog.Logger

	now func() time.Time // test hook (internal/testhook.SetClock); nil: time.Now
}

// ShadowReport compares what a CDC relay would publish with what the active publisher (usually a
// polling relay) published. It is how a cutover is rehearsed: run the shadow beside the active
// relay, under real traffic, until the report shows no difference.
type ShadowReport struct {
	// Seen is how many events the shadow read from the log.
	Seen int
	// Agreed counts events the shadow read that the active relay published.
	Agreed int
	// InFlight counts events read by the shadow less than Grace ago that the active relay has not
	// published yet, and rows too recent for the shadow to be expected to have read them.
	InFlight int
	// OnlyCDC lists events the shadow read more than Grace ago that the active relay has not
	// published: it is behind, stuck, or has parked them.
	OnlyCDC []string
	// OnlyActive lists events committed after the shadow started, more than Grace ago, that the
	// shadow never read: CDC would have missed them. It must be empty before a cutover.
	OnlyActive []string
	// Unverifiable counts events the shadow read whose rows are gone (deleted on publish, or
	// cleaned up), so the report cannot tell whether they were published.
	Unverifiable int
}

// Differences reports whether either side would have published an event the other did not.
func (r ShadowReport) Differences() bool { return len(r.OnlyCDC) > 0 || len(r.OnlyActive) > 0 }

// CDCShadow reads the change log as a CDCRelay would, without publishing, marking or
// checkpointing anything, and without taking the outbox over: it records the event IDs a CDC
// relay would publish so that Report can compare them with what the active relay does. Give it a
// source of its own (its own replication slot); it starts at the head of the log.
type CDCShadow struct {
	source driver.ChangeSource
	admin  driver.Admin
	o      ShadowOptions
	log    *slog.Logger

	mu      sync.Mutex
	started time.Time
	seen    map[string]time.Time // event ID -> when the shadow read it
}

// NewCDCShadow returns a shadow reading source and comparing with the outbox through admin.
// opts may be nil.
func NewCDCShadow(source driver.ChangeSource, admin driver.Admin, opts *ShadowOptions) (*CDCShadow, error) {
	if source == nil {
		return nil, &OptionError{Field: "source", Reason: "must not be nil"}
	}
	if admin == nil {
		return nil, &OptionError{Field: "admin", Reason: "must not be nil"}
	}
	var o ShadowOptions
	if opts != nil {
		o = *opts
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.ClockMargin <= 0 {
		o.ClockMargin = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.now == nil {
		o.now = time.Now
	}
	return &CDCShadow{source: source, admin: admin, o: o, log: o.Logger.With("relay", "cdc-shadow"), seen: map[string]time.Time{}}, nil
}

// Run reads the log from its head until ctx ends (then it returns nil) or the log fails.
func (s *CDCShadow) Run(ctx context.Context) error {
	stream, pos, err := s.source.Start(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("outbox: cdc shadow: start the log: %w", err)
	}
	defer stream.Close()
	s.mu.Lock()
	s.started = s.o.now()
	s.mu.Unlock()
	s.log.Info("cdc_shadow_started", "position", pos)
	for {
		tx, err := stream.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("outbox: cdc shadow: read the log: %w", err)
		}
		now := s.o.now()
		s.mu.Lock()
		for _, rec := range tx.Records {
			s.seen[rec.ID] = now
		}
		s.mu.Unlock()
		// Confirm what was read: the shadow's slot must not retain log for nothing.
		if err := stream.Confirm(ctx, tx.Position); err != nil && ctx.Err() == nil {
			s.log.Warn("cdc_shadow_confirm_failed", "error", err)
		}
	}
}

// Report compares the events read so far with the outbox's rows. It lists the whole outbox
// (Admin.List), so run it on an outbox that cleanup keeps small.
func (s *CDCShadow) Report(ctx context.Context) (ShadowReport, error) {
	s.mu.Lock()
	started := s.started
	seen := make(map[string]time.Time, len(s.seen))
	for id, at := range s.seen {
		seen[id] = at
	}
	s.mu.Unlock()
	if started.IsZero() {
		return ShadowReport{}, fmt.Errorf("outbox: cdc shadow: not started")
	}
	now := s.o.now()
	rep := ShadowReport{Seen: len(seen)}
	var after int64
	for {
		page, err := s.admin.List(ctx, driver.ListParams{AfterSeq: after, Limit: 1000, State: driver.StateAll})
		if err != nil {
			return ShadowReport{}, fmt.Errorf("outbox: cdc shadow: list: %w", err)
		}
		for _, rec := range page {
			readAt, read := seen[rec.ID]
			published := !rec.PublishedAt.IsZero()
			switch {
			case read && published:
				rep.Agreed++
			case read && now.Sub(readAt) > s.o.Grace:
				rep.OnlyCDC = append(rep.OnlyCDC, rec.ID)
			case read:
				rep.InFlight++
			case rec.CreatedAt.Before(started.Add(s.o.ClockMargin)):
				// committed before the shadow started, or too close to its start to tell
			case now.Sub(rec.CreatedAt) > s.o.Grace:
				rep.OnlyActive = append(rep.OnlyActive, rec.ID)
			default:
				rep.InFlight++
			}
			delete(seen, rec.ID)
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Seq
	}
	rep.Unverifiable = len(seen)
	slices.Sort(rep.OnlyCDC)
	slices.Sort(rep.OnlyActive)
	return rep, nil
}
