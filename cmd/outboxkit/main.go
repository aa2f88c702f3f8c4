// Command outboxkit runs the end-to-end demo and operates SQLite outboxes.
//
//	outboxkit demo [--chaos] [flags]      producers -> outbox -> relays -> broker -> inbox, verified
//	outboxkit stats   --db FILE           count pending, parked and published events
//	outboxkit parked  --db FILE           list parked events
//	outboxkit unpark  --db FILE KEY       release a parked partition key
//	outboxkit cleanup --db FILE           delete published events behind the watermark
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: outboxkit <command> [flags]

commands:
  demo      run producers, relays and a consumer on an embedded SQLite outbox and verify
            that nothing is lost or reordered (--chaos kills workers and breaks the broker)
  stats     count pending, parked and published events of a SQLite outbox (--db FILE)
  parked    list parked events (--db FILE)
  unpark    release a parked partition key (--db FILE KEY)
  cleanup   delete published events older than --retention behind the watermark (--db FILE)

Run 'outboxkit <command> -h' for the flags of a command.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "stats", "parked", "unpark", "cleanup":
		return runOps(ctx, cmd, rest, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "outboxkit: unknown command %q\n\n%s", cmd, usage)
	return 2
}
