package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

// runOps runs the operator commands against a SQLite outbox.
func runOps(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("db", "", "SQLite database file holding the outbox (required)")
	retention := fs.Duration("retention", 24*time.Hour, "cleanup: keep published events this long")
	limit := fs.Int("limit", 100, "parked: most events to list")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" {
		fmt.Fprintf(stderr, "outboxkit %s: --db is required\n", cmd)
		return 2
	}
	if cmd == "unpark" && fs.NArg() != 1 {
		fmt.Fprintln(stderr, "outboxkit unpark: give exactly one partition key")
		return 2
	}
	db, store, err := openExisting(ctx, *path)
	if err != nil {
		fmt.Fprintf(stderr, "outboxkit %s: %v\n", cmd, err)
		return 1
	}
	defer db.Close()
	switch cmd {
	case "stats":
		st, err2 := store.Stats(ctx)
		if err = err2; err != nil {
			break
		}
		oldest := "none"
		if !st.OldestPendingAt.IsZero() {
			oldest = st.OldestPendingAt.UTC().Format(time.RFC3339Nano)
		}
		fmt.Fprintf(stdout, "pending=%d parked=%d published=%d oldest_pending=%s\n", st.Pending, st.Parked, st.Published, oldest)
		return 0
	case "parked":
		recs, err2 := store.List(ctx, core.ListParams{State: core.StateParked, Limit: *limit})
		if err = err2; err != nil {
			break
		}
		for _, r := range recs {
			fmt.Fprintf(stdout, "seq=%d id=%s key=%q type=%s attempts=%d parked_at=%s error=%q\n",
				r.Seq, r.ID, r.PartitionKey, r.Type, r.Attempts, r.ParkedAt.UTC().Format(time.RFC3339), r.LastError)
		}
		return 0
	case "unpark":
		n, err2 := store.Unpark(ctx, fs.Arg(0))
		if err = err2; err != nil {
			break
		}
		fmt.Fprintf(stdout, "unparked=%d\n", n)
		return 0
	case "cleanup":
		n, err2 := core.CleanupOutbox(ctx, store, &core.CleanupOptions{Retention: *retention})
		if err = err2; err != nil {
			break
		}
		fmt.Fprintf(stdout, "deleted=%d\n", n)
		return 0
	}
	fmt.Fprintf(stderr, "outboxkit %s: %v\n", cmd, err)
	return 1
}

// openExisting opens the outbox of an existing SQLite file as it is: operators never migrate,
// and the lane count is read from the database.
func openExisting(ctx context.Context, path string) (*sql.DB, *sqlite.Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, nil, err
	}
	db, err := sqlite.OpenDB(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		_, err = store.LaneCount(ctx) // fails clearly when the file holds no outbox
	}
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, store, nil
}
