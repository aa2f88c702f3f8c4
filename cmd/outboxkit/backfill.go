package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/daemon"
)

// backfillJSON is the output of `outboxkit backfill --output json`.
type backfillJSON struct {
	// Published is how many events the backfill published (the sink acknowledged them and they
	// were marked published).
	Published uint64 `json:"published"`
	// Checkpoint is the new CDC checkpoint: the head of the log when the backfill began.
	Checkpoint string `json:"checkpoint"`
	// Generation is the publisher generation the backfill took the outbox over with.
	Generation int64 `json:"generation"`
}

// auditTimeout bounds the write of backfill's audit row, which outlives a cancelled backfill.
const auditTimeout = 10 * time.Second

// backfillCommand is `outboxkit backfill --config FILE`: core.CDCRelay.Backfill of the relay
// that `outboxkit relay --config FILE` runs, once, to completion.
func backfillCommand() *cobra.Command {
	var configPath, output string
	var actor *string
	cmd := &cobra.Command{
		Use:   "backfill --config FILE [--actor A] [--output text|json]",
		Short: "recover a CDC relay from a lost position: publish every unpublished event once, in order per key, and checkpoint the head of the log, with an audit row (stop the CDC relay first)",
		Long: `Run the Backfill of the CDC relay that outboxkit relay --config FILE runs (the same
configuration file, environment variables and flags; it needs mode: cdc), once, to completion:
it takes the outbox over (a new publisher generation, every lane), opens the change log at its
head (PostgreSQL: a new replication slot), publishes every unpublished event with its original
event ID in order per key (parked keys stay parked: unpark them first), checkpoints the head,
writes an audit row (command backfill, rows: the events published) and prints what it did.
Then start the relay: it resumes from the new checkpoint. Stop the CDC relay first: while a
lane has a lease that has not expired it is refused, with nothing changed. It migrates
nothing and serves no HTTP. The relay's warnings and errors are logged on stderr (log.format).
SIGINT or SIGTERM stops it after the batch in flight (within shutdown_timeout): the checkpoint
has not moved, and the next backfill publishes what is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return usageErr(cmd, "--output: want text or json, got %q", output)
			}
			cfg, err := daemon.Load(configPath, os.Getenv, cmd.Flags())
			if err != nil {
				fmt.Fprintln(cmd.ErrOrStderr(), err)
				return &exitError{code: 2}
			}
			cmd.SetErr(daemon.Output(cfg, cmd.ErrOrStderr())) // never a configured secret
			return runBackfill(cmd, cfg, configPath, *actor, output)
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "YAML configuration file of the CDC relay (outboxkit relay --config)")
	cmd.Flags().StringVar(&output, "output", "text", "output format: text or json")
	actor = addActorFlag(cmd)
	daemon.Flags(cmd.Flags())
	return cmd
}

// runBackfill runs the backfill of cfg's CDC relay and writes its audit row.
func runBackfill(cmd *cobra.Command, cfg daemon.Config, configPath, actor, output string) error {
	ctx := cmd.Context()
	// Only the relay's warnings and errors: stdout is the result, stderr one line on failure.
	lc := cfg.Log
	if lc.Level == "debug" || lc.Level == "info" {
		lc.Level = "warn"
	}
	r, err := daemon.OpenCDCRelay(ctx, cfg, daemon.NewLogger(lc, cmd.ErrOrStderr()), cmd.OutOrStdout())
	if err != nil {
		return failErr(cmd, err)
	}
	defer r.Close()
	aw, ok := r.Store.(driver.AuditWriter)
	if !ok {
		return failErr(cmd, fmt.Errorf("%w (driver %s)", ErrNoCDC, cfg.Database.DriverName()))
	}
	if err := noLaneHeld(ctx, r.Store); err != nil {
		return failErr(cmd, err)
	}
	// The row is written once Backfill has returned (below): a role that may not write it is
	// refused now, before the backfill changes anything.
	if err := aw.CheckAudit(ctx); err != nil {
		return failErr(cmd, err)
	}

	// SIGINT or SIGTERM (ctx ends): Shutdown stops the backfill after the batch in flight,
	// settles it and releases the lanes; Backfill then returns an error wrapping
	// context.Canceled. Cancelling Backfill's own context instead would be a hard stop.
	stopped := make(chan struct{})
	stopOnSignal := context.AfterFunc(ctx, func() {
		defer close(stopped)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout.D())
		defer cancel()
		_ = r.Relay.Shutdown(sctx) // past its deadline it stops hard: Backfill returns its error
	})
	err = r.Relay.Backfill(context.WithoutCancel(ctx))
	if !stopOnSignal() {
		<-stopped
	}
	st := r.Relay.Stats() // Backfill returns nil only when it finished (moved the checkpoint)

	// The audit row. Backfill publishes over the network, so it cannot share a transaction
	// with its row, and its checkpoint is saved inside the relay: the row is written here, once
	// Backfill has returned, with Rows the events it published. It is written whenever the
	// backfill took the outbox over (a new publisher generation fenced the previous publisher),
	// finished or not: what it published stays published either way; "finished" says which.
	// A backfill refused before it took the outbox over changed nothing and writes no row. The
	// row can still fail after CheckAudit (the database went away): the command then fails
	// with both errors.
	if st.Generation != 0 {
		entry := auditEntry(actor, "backfill", map[string]any{"config": configPath, "finished": err == nil})
		entry.Rows = int64(st.Published)
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
		defer cancel()
		if aerr := aw.WriteAudit(actx, *entry); aerr != nil {
			aerr = fmt.Errorf("audit row not written (published=%d): %w", st.Published, aerr)
			return failErr(cmd, errors.Join(err, aerr))
		}
	}
	if err != nil {
		if st.Published > 0 {
			err = fmt.Errorf("%w (published=%d before it stopped; the checkpoint has not moved: run backfill again)", err, st.Published)
		}
		return failErr(cmd, err)
	}
	out := backfillJSON{Published: st.Published, Checkpoint: st.Checkpoint, Generation: st.Generation}
	return emit(cmd, &dbFlags{output: output}, out, func(w io.Writer) {
		fmt.Fprintf(w, "backfilled published=%d checkpoint=%s generation=%d\n", out.Published, out.Checkpoint, out.Generation)
	})
}
