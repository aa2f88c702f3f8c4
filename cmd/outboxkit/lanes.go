package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
)

// lanesCommand is `outboxkit lanes`: the relay lanes' leases (`status` shows the lane table).
func lanesCommand() *cobra.Command {
	return groupCommand("lanes", "operate the relay lanes' leases (`lanes reset`; `status` shows the lane table)", lanesResetCommand())
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
	cmd, _ := opsCommand("reset --db URL (--lane N [--lane M ...] | --owner O | --all) [--actor A]",
		"end the leases of held lanes at once, in one transaction with an audit row: owner and sign of life cleared, lease expired, generation incremented, so whatever the old owner settles afterwards is refused and any running relay claims the lanes at its next claim, while the old process still runs, in every lease mode (on MySQL/MariaDB a lease the old owner tied to a GET_LOCK is taken without the lock until the old owner's session lets it go); a relay that runs on claims lanes again, the old one too: stop a stalled owner that keeps taking them",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, _ []string) error {
			args := map[string]any{"all": true}
			switch {
			case len(lanes) > 0:
				args = map[string]any{"lanes": lanes}
			case owner != "":
				args = map[string]any{"owner": owner}
			}
			n, err := db.Store.ResetLanes(cmd.Context(), core.ResetLanesParams{Lanes: lanes, Owner: owner, All: all}, *auditEntry(*actor, "lanes reset", args))
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
