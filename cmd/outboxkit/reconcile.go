package main

import (
	"fmt"
	"iter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/reconcile"
)

// reconcileCommand is `outboxkit reconcile`: package reconcile on an existing outbox of any SQL
// adapter, the expected events read by a query of the same database. It prints the report on
// stdout and exits 0 when nothing was found, 1 on a finding or an error, 2 on bad usage.
func reconcileCommand() *cobra.Command {
	var query, consumer, since, until string
	var after time.Duration
	cmd := &cobra.Command{
		Use:   "reconcile --db URL --expected-sql QUERY [--schema S] [--table T] [--consumer NAME] [--since T] [--until T] [--unpublished-after D]",
		Short: "compare, by event id, the events a query of the domain tables says must exist with the outbox and a consumer's inbox; exit 1 on any finding",
		Long: "reconcile runs --expected-sql on the outbox's database (it returns id, aggregate_type, aggregate_id, version per expected event), " +
			"compares the events by id with the outbox rows created in [--since, --until) and, with --consumer, with that consumer's inbox, " +
			"and prints one line per kind of finding: missing, extra, duplicate_versions, unpublished (older than --unpublished-after), not_applied. " +
			"Exit status: 0 nothing found, 1 a finding or an error, 2 bad usage.",
		Args: cobra.NoArgs,
	}
	f := addOpenFlags(cmd)
	fl := cmd.Flags()
	fl.StringVar(&query, "expected-sql", "", "query returning the expected events: id, aggregate_type, aggregate_id, version (required)")
	fl.StringVar(&consumer, "consumer", "", "also check this consumer's inbox in the same database")
	fl.StringVar(&since, "since", "", "window start, RFC 3339 (outbox rows created at or after it; default: unbounded)")
	fl.StringVar(&until, "until", "", "window end, RFC 3339 (outbox rows created before it; default: unbounded)")
	fl.DurationVar(&after, "unpublished-after", reconcile.DefaultUnpublishedAfter, "age past which an unpublished (or unapplied) event is a finding")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if query == "" {
			return usageErr(cmd, "--expected-sql is required")
		}
		var o reconcile.Options
		for _, w := range []struct {
			name, v string
			dst     *time.Time
		}{{"since", since, &o.Since}, {"until", until, &o.Until}} {
			if w.v == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339Nano, w.v)
			if err != nil {
				return usageErr(cmd, "--%s: %v", w.name, err)
			}
			*w.dst = t
		}
		o.UnpublishedAfter = after
		cfg, err := f.config(cmd)
		if err != nil {
			return err
		}
		return runReconcile(cmd, cfg, query, consumer, o)
	}
	return cmd
}

// runReconcile runs the check on the database cfg names and prints the report.
func runReconcile(cmd *cobra.Command, cfg opendb.Config, query, consumer string, o reconcile.Options) error {
	ctx, stdout := cmd.Context(), cmd.OutOrStdout()
	driver := cfg.Driver
	db, err := openExisting(ctx, cfg)
	if err != nil {
		return failErr(cmd, err)
	}
	defer db.Close()
	store := db.Store
	if consumer != "" {
		reader, ok := store.(reconcile.InboxReader)
		if !ok {
			return failErr(cmd, fmt.Errorf("--consumer: the %s store reads no inbox records", driver))
		}
		o.Inbox, o.Consumer = reader, consumer
	}
	rows, err := db.SQL.QueryContext(ctx, query)
	if err != nil {
		return failErr(cmd, fmt.Errorf("--expected-sql: %w", err))
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
		return failErr(cmd, err)
	}
	fmt.Fprint(stdout, rep.String())
	if !rep.OK() {
		return &exitError{code: 1}
	}
	return nil
}
