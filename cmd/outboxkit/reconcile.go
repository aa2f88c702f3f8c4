package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/reconcile"
)

// reconcileCommand is `outboxkit reconcile`: package reconcile on an existing outbox of any SQL
// adapter, the expected events read by a query of the same database.
func reconcileCommand() *cobra.Command {
	return legacy("reconcile --db URL --expected-sql QUERY [--schema S] [--table T] [--consumer NAME] [--since T] [--until T] [--unpublished-after D]",
		"compare, by event id, the events a query of the domain tables says must exist with the outbox and a consumer's inbox; exit 1 on any finding",
		runReconcile)
}

// runReconcile prints the report on stdout; it returns 0 when nothing was found, 1 on a finding
// or an error, 2 on bad usage.
func runReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("db", "", "the database holding the outbox, the domain tables and the inbox; "+dbFlagHelp)
	driverName := fs.String("driver", "", driverFlagHelp)
	schema := fs.String("schema", "", "PostgreSQL schema of the outbox and the inbox (default public)")
	table := fs.String("table", "", "outbox table (default outbox)")
	query := fs.String("expected-sql", "", "query returning the expected events: id, aggregate_type, aggregate_id, version (required)")
	consumer := fs.String("consumer", "", "also check this consumer's inbox in the same database")
	since := fs.String("since", "", "window start, RFC 3339 (outbox rows created at or after it; default: unbounded)")
	until := fs.String("until", "", "window end, RFC 3339 (outbox rows created before it; default: unbounded)")
	after := fs.Duration("unpublished-after", reconcile.DefaultUnpublishedAfter, "age past which an unpublished (or unapplied) event is a finding")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "outboxkit reconcile: "+format+"\n", a...)
		return 2
	}
	if *path == "" || *query == "" {
		return usage("--db and --expected-sql are required")
	}
	if fs.NArg() != 0 {
		return usage("unexpected arguments %q", fs.Args())
	}
	var o reconcile.Options
	for _, f := range []struct {
		name, v string
		dst     *time.Time
	}{{"since", *since, &o.Since}, {"until", *until, &o.Until}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			return usage("--%s: %v", f.name, err)
		}
		*f.dst = t
	}
	o.UnpublishedAfter = *after
	driver, dsn, err := opendb.ParseDSN(*driverName, *path)
	if err != nil {
		return usage("--db: %v", err)
	}
	if *schema != "" && driver != "postgres" {
		return usage("--schema: only for a postgres:// database")
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "outboxkit reconcile: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	cfg := opendb.Config{Driver: driver, DSN: dsn, Schema: *schema, Table: *table, Logger: slog.New(slog.DiscardHandler)}
	if problems := opendb.Check(cfg); len(problems) > 0 { // a bad --table or --schema
		flag := map[string]string{"DSN": "--db", "Schema": "--schema"}[problems[0].Field]
		if flag == "" {
			flag = "--table"
		}
		return usage("%s: %s", flag, problems[0].Reason)
	}
	db, err := openExisting(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	store := db.Store
	if *consumer != "" {
		reader, ok := store.(reconcile.InboxReader)
		if !ok {
			return fail(fmt.Errorf("--consumer: the %s store reads no inbox records", driver))
		}
		o.Inbox, o.Consumer = reader, *consumer
	}
	rows, err := db.SQL.QueryContext(ctx, *query)
	if err != nil {
		fmt.Fprintf(stderr, "outboxkit reconcile: --expected-sql: %v\n", err)
		return 1
	}
	defer rows.Close()
	expected := iter.Seq2[reconcile.Expected, error](func(yield func(reconcile.Expected, error) bool) {
		for rows.Next() {
			var e reconcile.Expected
			if err := rows.Scan(&e.ID, &e.AggregateType, &e.AggregateID, &e.Version); err != nil {
				yield(e, fmt.Errorf("--expected-sql: %w", err))
				return
			}
			if !yield(e, nil) {
				return
			}
		}
		if err := rows.Err(); err != nil {
			yield(reconcile.Expected{}, err)
		}
	})
	rep, err := reconcile.Run(ctx, expected, store, o)
	if err != nil {
		fmt.Fprintf(stderr, "outboxkit reconcile: %v\n", err)
		return 1
	}
	fmt.Fprint(stdout, rep.String())
	if !rep.OK() {
		return 1
	}
	return 0
}
