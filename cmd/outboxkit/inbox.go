package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// inboxCommand is `outboxkit inbox`: the inbox of the outbox's database.
func inboxCommand() *cobra.Command {
	return groupCommand("inbox", "operate the inbox in the outbox's database (`inbox prune`)", inboxPruneCommand())
}

func inboxPruneCommand() *cobra.Command {
	var consumer string
	var retention time.Duration
	var limit int
	var actor *string
	cmd, _ := opCommand("prune --db URL --consumer C --retention D [--limit N] [--actor A]",
		"raise the consumer's retention horizon to now minus --retention and delete its inbox records of messages that occurred earlier, --limit at a time (core.Inbox.Prune), with an audit row written with the horizon raise and completed by the last deletion; the consumer refuses older messages from then on (ErrBeyondRetention)",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, _ *opendb.DB, op *core.Operator, _ []string) error {
			args := map[string]any{"consumer": consumer, "retention": retention.String()}
			n, err := op.PruneInbox(cmd.Context(), consumer, time.Now().Add(-retention), limit, *auditEntry(*actor, "inbox prune", args))
			if err != nil {
				return err
			}
			return emit(cmd, f, map[string]int{"deleted": n}, func(w io.Writer) { fmt.Fprintf(w, "deleted=%d\n", n) })
		})
	cmd.Flags().StringVar(&consumer, "consumer", "", "the inbox consumer (required)")
	cmd.Flags().DurationVar(&retention, "retention", 0, "keep the records of messages that occurred this long ago or later (required, positive)")
	cmd.Flags().IntVar(&limit, "limit", driver.DefaultPruneLimit, "most records deleted per transaction")
	actor = addActorFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case consumer == "":
			return usageErr(cmd, "--consumer is required")
		case retention <= 0:
			return usageErr(cmd, "--retention: must be positive, got %s", retention)
		case limit < 1 || limit > core.MaxPruneLimit:
			return usageErr(cmd, "--limit: want 1 to %d, got %d", core.MaxPruneLimit, limit)
		}
		return nil
	}
	return cmd
}
