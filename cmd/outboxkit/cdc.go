package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// ErrNoCDC is reported by the cdc commands on a database without change-data-capture (SQLite).
var ErrNoCDC = errors.New("no CDC on this database (SQLite runs the polling relay only)")

// ErrLanesHeld is reported by `cdc release` while a relay holds a lane lease that has not
// expired: a running CDC relay would save a new checkpoint behind the release.
var ErrLanesHeld = errors.New("a relay holds lanes of the outbox (stop the CDC relay first, or wait for its leases to expire)")

// cdcCommand is `outboxkit cdc`: the CDC relay's hold on the database's change log.
func cdcCommand() *cobra.Command {
	return groupCommand("cdc", "operate what a CDC relay keeps in the database (`cdc release`)", cdcReleaseCommand())
}

// releaseJSON is the output of `outboxkit cdc release --output json`.
type releaseJSON struct {
	// Slot is the PostgreSQL replication slot dropped (or found absent); "" on MySQL/MariaDB,
	// whose binary log no slot holds.
	Slot string `json:"slot,omitempty"`
	// CheckpointDeleted reports whether there was a checkpoint to delete.
	CheckpointDeleted bool `json:"checkpoint_deleted"`
}

// noLaneHeld returns an error wrapping ErrLanesHeld while a lane of store's outbox has a lease
// that has not expired (a relay runs, or crashed less than its lease TTL ago).
func noLaneHeld(ctx context.Context, store opendb.Store) error {
	lanes, err := store.Lanes(ctx)
	if err != nil {
		return err
	}
	for _, l := range lanes {
		if l.Owner != "" && l.Until.After(time.Now()) {
			return fmt.Errorf("%w: lane %d owner %s until %s", ErrLanesHeld, l.Lane, l.Owner, l.Until.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// slotNamer is the PostgreSQL change source's slot name.
type slotNamer interface{ Slot() string }

func cdcReleaseCommand() *cobra.Command {
	var actor *string
	cmd, f := opsCommand("release --db URL [--slot NAME] [--actor A]",
		"drop what holds the change log for the CDC relay (PostgreSQL: its replication slot) and delete its checkpoint, with an audit row: the next CDC relay backfills every unpublished event, then streams from the head of the log (stop the CDC relay first)",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, _ []string) error {
			ctx := cmd.Context()
			rel, ok := db.Store.(driver.CheckpointReleaser)
			if !ok || db.ChangeSource == nil {
				return ErrNoCDC
			}
			src, err := db.ChangeSource()
			if err != nil {
				return err
			}
			if err := noLaneHeld(ctx, db.Store); err != nil {
				return err
			}
			var out releaseJSON
			// The slot first: an active one (a CDC relay streams from it) is refused, and the
			// checkpoint is left alone. A slot dropped before a failed delete is found absent by
			// the next release.
			if lr, ok := src.(driver.LogReleaser); ok {
				if sn, ok := src.(slotNamer); ok {
					out.Slot = sn.Slot()
				}
				if err := lr.Release(ctx); err != nil {
					return err
				}
			}
			args := map[string]any{}
			if out.Slot != "" {
				args["slot"] = out.Slot
			}
			if out.CheckpointDeleted, err = rel.ReleaseCheckpoint(ctx, *auditEntry(*actor, "cdc release", args)); err != nil {
				return err
			}
			return emit(cmd, f, out, func(w io.Writer) {
				if out.Slot != "" {
					fmt.Fprintf(w, "released slot=%s checkpoint_deleted=%t\n", out.Slot, out.CheckpointDeleted)
				} else {
					fmt.Fprintf(w, "released checkpoint_deleted=%t\n", out.CheckpointDeleted)
				}
			})
		})
	cmd.Flags().StringVar(&f.slot, "slot", "", "PostgreSQL replication slot of the CDC relay (default the adapter's, outboxkit_<schema>_<table>; the relay's cdc.slot)")
	actor = addActorFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if f.slot != "" {
			if driver, _, err := opendb.ParseDSN(f.driver, f.db); err == nil && driver != "postgres" {
				return usageErr(cmd, "--slot: only for a postgres:// database")
			}
		}
		return nil
	}
	return cmd
}
