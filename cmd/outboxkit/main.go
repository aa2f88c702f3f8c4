// Command outboxkit runs the relay daemon and the end-to-end demo, and operates outboxes of
// PostgreSQL, MySQL/MariaDB and SQLite.
//
//	outboxkit relay --config FILE         run the relays of one outbox (see docs/daemon.md)
//	outboxkit demo [--chaos] [flags]      producers -> outbox -> relays -> broker -> inbox, verified
//	outboxkit status  --db URL [--watch]  pending, parked, blocked, oldest age, lanes, publisher, CDC checkpoint
//	outboxkit parked  --db URL            list parked events
//	outboxkit unpark  --db URL KEY|--all  release parked partition keys
//	outboxkit replay  --db URL --ids ID,..|--key K --since T  put published events back to pending
//	outboxkit cleanup --db URL            delete published events behind the watermark
//	outboxkit cdc release --db URL        drop the CDC relay's slot and checkpoint (it backfills next)
//	outboxkit backfill --config FILE      publish every unpublished event and checkpoint the head (CDC)
//	outboxkit audit   --db URL            list the audit rows of replay, unpark, cleanup, cdc release and backfill
//	outboxkit console --db URL            the operator console in the browser (see docs/console.md)
//	outboxkit migrate --db URL            create or upgrade the outbox tables
//	outboxkit migrate sql --dialect D     print the migrations as plain SQL
//	outboxkit version                     print the module version
//
// --db is postgres://..., mysql://user:pass@host:port/db or sqlite:PATH. Exit status: 0 success,
// 1 failure, 2 bad usage or configuration.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// exitError ends a command with an exit status (its message, if any, is already printed).
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "outboxkit",
		Short:         "Transactional outbox relay daemon, demo and operator tools",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		relayCommand(),
		reconcileCommand(),
		demoCommand(),
	)
	root.AddCommand(statusCommand(), parkedCommand(), unparkCommand(), replayCommand(), cleanupCommand(), cdcCommand(), backfillCommand(), auditCommand(), migrateCommand(), versionCommand())
	root.AddCommand(lanesCommand(), inboxCommand())
	root.AddCommand(keysCommand())
	root.AddCommand(consoleCommand())
	// A bad flag is one line naming it, and exit status 2.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErr(cmd, "%v", err)
	})
	return root
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if len(args) == 0 {
		root.SetOut(stderr)
		_ = root.Usage()
		return 2
	}
	cmd, err := root.ExecuteContextC(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default: // unknown command or flag, or wrong arguments: named after the command that refused them
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", cmd.CommandPath(), err, cmd.CommandPath())
		return 2
	}
}
