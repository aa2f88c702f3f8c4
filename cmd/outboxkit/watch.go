package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
)

// watchFlags are status's --watch and --interval.
type watchFlags struct {
	watch    bool
	interval time.Duration
}

// drainWindow is how far back status --watch measures the drain rate.
const drainWindow = time.Minute

// sample is one look of status --watch.
type sample struct {
	at      time.Time
	pending int64
}

// drain keeps the looks of the last minute and derives the drain rate and ETA from them: the
// fall of pending between the oldest and the newest look, per second (status reads only indexes
// of the unpublished rows, so the rate is net of events written meanwhile).
type drain struct {
	samples []sample
	most    int64 // the largest pending seen: the progress bar's full width
}

func (d *drain) add(s sample) {
	d.samples = append(d.samples, s)
	for len(d.samples) > 2 && s.at.Sub(d.samples[0].at) > drainWindow {
		d.samples = d.samples[1:]
	}
	d.most = max(d.most, s.pending)
}

// rate returns the drain rate per second and the time to empty (nil when unknown).
func (d *drain) rate() (rate, eta *float64) {
	if len(d.samples) < 2 {
		return nil, nil
	}
	first, last := d.samples[0], d.samples[len(d.samples)-1]
	span := last.at.Sub(first.at).Seconds()
	if span <= 0 {
		return nil, nil
	}
	r := float64(first.pending-last.pending) / span
	rate = &r
	if r > 0 {
		e := float64(last.pending) / r
		eta = &e
	}
	return rate, eta
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// watchStatus shows the status every interval until the command's context ends (SIGINT,
// SIGTERM), which ends it with exit status 0. A failed look ends it with that error.
func watchStatus(cmd *cobra.Command, f *dbFlags, db *opendb.DB, op *core.Operator, interval time.Duration, allLanes bool) error {
	ctx := cmd.Context()
	w := cmd.OutOrStdout()
	term := isTerminal(w) && f.output == "text"
	var d drain
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		r, now, err := collectStatus(ctx, db, op)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		d.add(sample{at: now, pending: r.Pending})
		r.DrainRate, r.DrainETA = d.rate()
		switch {
		case f.output == "json":
			b, _ := json.Marshal(r)
			fmt.Fprintf(w, "%s\n", b)
		case term:
			fmt.Fprint(w, "\x1b[H\x1b[2J") // home, clear
			fmt.Fprintf(w, "outboxkit status  %s  (every %s; Ctrl-C stops)\n\n", now.UTC().Format(time.RFC3339), interval)
			printStatus(w, r, now, allLanes)
			fmt.Fprintf(w, "drain      %s\n", drainText(r))
			if d.most > 0 {
				fmt.Fprintf(w, "progress   %s\n", progressBar(d.most, r.Pending, 40))
			}
		default:
			fmt.Fprintf(w, "%s pending=%d parked=%d blocked=%d oldest_age=%s %s\n", now.UTC().Format(time.RFC3339), r.Pending, r.Parked, r.Blocked,
				time.Duration(r.OldestPendingAge*float64(time.Second)).Round(time.Second), drainText(r))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// drainText is "rate=R/s eta=D" (or "rate=unknown", "eta=none").
func drainText(r statusReport) string {
	if r.DrainRate == nil {
		return "rate=unknown eta=unknown"
	}
	eta := "none"
	if r.DrainETA != nil {
		eta = time.Duration(*r.DrainETA * float64(time.Second)).Round(time.Second).String()
	}
	return fmt.Sprintf("rate=%.1f/s eta=%s", *r.DrainRate, eta)
}

// progressBar draws the way from most pending to empty.
func progressBar(most, pending int64, width int) string {
	done := width
	if most > 0 {
		done = int(float64(most-min(pending, most)) / float64(most) * float64(width))
	}
	return fmt.Sprintf("[%s%s] %d of %d sent", strings.Repeat("#", done), strings.Repeat(".", width-done), most-min(pending, most), most)
}
