package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/opstatus"
)

// The audited operator commands (replay, unpark, cleanup with a non-default retention, cdc
// release, lanes reset, lanes resize, inbox prune) write one row to <table>_audit in the transaction of
// their change (inbox prune: of its horizon raise, its rows set by its last deletion);
// backfill, which publishes over the network, writes its row once it has returned (see
// runBackfill);
// `outboxkit audit` lists them.

// addActorFlag adds --actor (default the OS user) to an audited command.
func addActorFlag(cmd *cobra.Command) *string {
	actor := new(string)
	cmd.Flags().StringVar(actor, "actor", "", "who runs the command, recorded in the audit table (default the OS user)")
	return actor
}

// auditEntry is the audit row of a command run by actor ("" : the OS user) with args.
func auditEntry(actor, command string, args any) *driver.AuditEntry {
	if actor == "" {
		actor = osUser()
	}
	b, _ := json.Marshal(args) // maps and slices of strings: never fails
	return &driver.AuditEntry{Actor: actor, Command: command, Arguments: string(b)}
}

func osUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// parseSince reads a --since value: an RFC 3339 time, or a duration meaning that long ago
// (opstatus.ParseSince, which the console reads its since with).
func parseSince(s string, now time.Time) (time.Time, error) { return opstatus.ParseSince(s, now) }

// replayJSON is the output of `outboxkit replay --output json`.
type replayJSON struct {
	Replayed int `json:"replayed"`
}

func replayCommand() *cobra.Command {
	var ids []string
	var key, sinceFlag string
	var since time.Time
	var actor *string
	cmd, _ := opCommand("replay --db URL (--ids ID[,ID...] | --key K --since T)",
		"put published events back to pending so that the relay sends them again, in their original order (refused for a key with unpublished events, and with a CDC publisher)", cobra.NoArgs,
		func(cmd *cobra.Command, f *dbFlags, _ *opendb.DB, op *core.Operator, _ []string) error {
			args := map[string]any{"ids": ids}
			if key != "" {
				args = map[string]any{"key": key, "since": since.UTC().Format(time.RFC3339Nano)}
			}
			n, err := op.Replay(cmd.Context(), driver.ReplayParams{IDs: ids, PartitionKey: key, Since: since, Audit: auditEntry(*actor, "replay", args)})
			if err != nil {
				return err
			}
			return emit(cmd, f, replayJSON{Replayed: n}, func(w io.Writer) { fmt.Fprintf(w, "replayed=%d\n", n) })
		})
	actor = addActorFlag(cmd)
	cmd.Flags().StringSliceVar(&ids, "ids", nil, "event IDs to replay, comma-separated")
	cmd.Flags().StringVar(&key, "key", "", "partition key whose events to replay (with --since)")
	cmd.Flags().StringVar(&sinceFlag, "since", "", "with --key: events created at or after this RFC 3339 time or this long ago (90m)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case len(ids) > 0 && (key != "" || sinceFlag != ""):
			return usageErr(cmd, "give --ids or --key with --since, not both")
		case len(ids) == 0 && key == "":
			return usageErr(cmd, "give --ids or --key with --since")
		case key != "" && sinceFlag == "":
			return usageErr(cmd, "--key needs --since")
		case len(ids) > driver.MaxReplay:
			return usageErr(cmd, "--ids: at most %d", driver.MaxReplay)
		}
		for _, id := range ids {
			if id == "" {
				return usageErr(cmd, "--ids: empty ID")
			}
		}
		if key != "" {
			var err error
			if since, err = parseSince(sinceFlag, time.Now()); err != nil {
				return usageErr(cmd, "--since: %v", err)
			}
		}
		return nil
	}
	return cmd
}

// auditJSON is one row of `outboxkit audit --output json`.
type auditJSON struct {
	ID        int64           `json:"id"`
	At        time.Time       `json:"at"`
	Actor     string          `json:"actor"`
	Command   string          `json:"command"`
	Arguments json.RawMessage `json:"arguments"`
	Rows      int64           `json:"rows_affected"`
}

func auditCommand() *cobra.Command {
	var sinceFlag string
	var since time.Time
	var limit int
	cmd, _ := opCommand("audit --db URL [--since T] [--limit N]", "list the audit rows of replay, unpark, cleanup, cdc release, backfill, lanes reset, lanes resize, inbox prune and keys destroy (the latest --limit, oldest first; \"none\" when there are none)", cobra.NoArgs,
		func(cmd *cobra.Command, f *dbFlags, _ *opendb.DB, op *core.Operator, _ []string) error {
			entries, err := op.AuditLog(cmd.Context(), driver.AuditListParams{Since: since, Limit: limit})
			if err != nil {
				return err
			}
			out := []auditJSON{}
			for _, e := range entries {
				args := json.RawMessage(e.Arguments)
				if !json.Valid(args) {
					args, _ = json.Marshal(e.Arguments)
				}
				out = append(out, auditJSON{ID: e.ID, At: e.At.UTC(), Actor: e.Actor, Command: e.Command, Arguments: args, Rows: e.Rows})
			}
			return emit(cmd, f, out, func(w io.Writer) {
				if len(out) == 0 {
					fmt.Fprintln(w, "none")
					return
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tAT\tACTOR\tCOMMAND\tROWS\tARGUMENTS")
				for _, e := range out {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.ID, e.At.Format(time.RFC3339), e.Actor, e.Command, e.Rows, strings.Join(strings.Fields(string(e.Arguments)), " "))
				}
				_ = tw.Flush()
			})
		})
	cmd.Flags().StringVar(&sinceFlag, "since", "", "only rows at or after this RFC 3339 time or this long ago (90m)")
	cmd.Flags().IntVar(&limit, "limit", driver.DefaultListLimit, "most rows to list (the latest)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if limit < 1 {
			return usageErr(cmd, "--limit: must be at least 1, got %d", limit)
		}
		if sinceFlag != "" {
			var err error
			if since, err = parseSince(sinceFlag, time.Now()); err != nil {
				return usageErr(cmd, "--since: %v", err)
			}
		}
		return nil
	}
	return cmd
}
