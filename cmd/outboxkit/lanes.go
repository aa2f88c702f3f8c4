package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// lanesCommand is `outboxkit lanes`: the relay lanes' leases (`status` shows the lane table).
func lanesCommand() *cobra.Command {
	return groupCommand("lanes", "operate the relay lanes' leases (`lanes reset`) and the lane count (`lanes resize`; `status` shows the lane table)", lanesResetCommand(), lanesResizeCommand())
}

// resetJSON is the output of `outboxkit lanes reset --output json`.
type resetJSON struct {
	Reset int `json:"reset"` // lanes whose lease ended (free lanes are not counted)
}

func lanesResetCommand() *cobra.Command {
	var lanes []int
	var owner string
	var all bool
	var actor *string
	cmd, _ := opCommand("reset --db URL (--lane N [--lane M ...] | --owner O | --all) [--actor A]",
		"end the leases of held lanes at once, in one transaction with an audit row: owner and sign of life cleared, lease expired, generation incremented, so whatever the old owner settles afterwards is refused and any running relay claims the lanes at its next claim, while the old process still runs, in every lease mode (on MySQL/MariaDB a lease the old owner tied to a GET_LOCK is taken without the lock until the old owner's session lets it go); a relay that runs on claims lanes again, the old one too: stop a stalled owner that keeps taking them",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, _ *opendb.DB, op *core.Operator, _ []string) error {
			args := map[string]any{"all": true}
			switch {
			case len(lanes) > 0:
				args = map[string]any{"lanes": lanes}
			case owner != "":
				args = map[string]any{"owner": owner}
			}
			n, err := op.ResetLanes(cmd.Context(), driver.ResetLanesParams{Lanes: lanes, Owner: owner, All: all}, *auditEntry(*actor, "lanes reset", args))
			if err != nil {
				return err
			}
			return emit(cmd, f, resetJSON{Reset: n}, func(w io.Writer) { fmt.Fprintf(w, "reset=%d\n", n) })
		})
	cmd.Flags().IntSliceVar(&lanes, "lane", nil, "a lane to reset (repeat the flag, or comma-separated); one with no owner is left alone")
	cmd.Flags().StringVar(&owner, "owner", "", "reset every lane this owner holds (the lane table of status names the owners)")
	cmd.Flags().BoolVar(&all, "all", false, "reset every lane with an owner")
	actor = addActorFlag(cmd)
	// Checked before the database is opened; the lane count is checked by the store.
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		given := 0
		for _, g := range []bool{len(lanes) > 0, owner != "", all} {
			if g {
				given++
			}
		}
		if given != 1 {
			return usageErr(cmd, "give one of --lane, --owner and --all")
		}
		for _, l := range lanes {
			if l < 0 || l >= core.MaxLanes {
				return usageErr(cmd, "--lane: want 0 to %d, got %d", core.MaxLanes-1, l)
			}
		}
		return nil
	}
	return cmd
}

// resizeJSON is the output of `outboxkit lanes resize --output json`.
type resizeJSON struct {
	Lanes int `json:"lanes"` // the lane count now
	Moved int `json:"moved"` // unpublished rows whose lane changed
}

func lanesResizeCommand() *cobra.Command {
	var to int
	var actor *string
	cmd, _ := opCommand("resize --db URL --to N [--actor A]",
		"change the outbox's lane count to N (1 to 4096) in one transaction with an audit row, keeping per-key order: it waits for the writer transactions in flight and holds new ones back, ends every lease (a running relay's settle of a batch in flight is refused and the batch resent), moves every unpublished event to its key's lane under the new count and records the count; writers and running relays follow it",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, _ *opendb.DB, op *core.Operator, _ []string) error {
			moved, err := op.ResizeLanes(cmd.Context(), to, *auditEntry(*actor, "lanes resize", map[string]any{"lanes": to}))
			if err != nil {
				return err
			}
			return emit(cmd, f, resizeJSON{Lanes: to, Moved: moved}, func(w io.Writer) { fmt.Fprintf(w, "lanes=%d moved=%d\n", to, moved) })
		})
	cmd.Flags().IntVar(&to, "to", 0, "the new lane count, 1 to 4096 (required)")
	actor = addActorFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if to < 1 || to > core.MaxLanes {
			return usageErr(cmd, "--to: want 1 to %d, got %d", core.MaxLanes, to)
		}
		return nil
	}
	return cmd
}
