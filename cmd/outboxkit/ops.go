package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/opstatus"
	"github.com/outboxkit/outbox/internal/secret"
)

// The operator commands: status, parked, unpark, cleanup and migrate on an outbox of any SQL
// adapter. Each takes --db (parsed by opendb.ParseDSN, with --driver), --schema (postgres),
// --table and --output; they never create or migrate anything except `migrate` itself.

// dbFlags are the flags every operator command shares.
type dbFlags struct {
	db, driver, schema, table, output string
	slot                              string // cdc release only (--slot)
	lanes                             int    // migrate only (--lanes)
}

func addDBFlags(cmd *cobra.Command) *dbFlags {
	f := addOpenFlags(cmd)
	cmd.Flags().StringVar(&f.output, "output", "text", "output format: text or json")
	return f
}

// addOpenFlags adds the flags that say which outbox to open: --db, --driver, --schema, --table.
func addOpenFlags(cmd *cobra.Command) *dbFlags {
	f := &dbFlags{output: "text"}
	fl := cmd.Flags()
	fl.StringVar(&f.db, "db", "", dbFlagHelp)
	fl.StringVar(&f.driver, "driver", "", driverFlagHelp)
	fl.StringVar(&f.schema, "schema", "", "PostgreSQL schema of the outbox (default public)")
	fl.StringVar(&f.table, "table", "", "outbox table (default outbox)")
	return f
}

// The help of --db and --driver (every command that opens an outbox).
const (
	dbFlagHelp = "the outbox's database (required): a URL, postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db " +
		"or sqlite:PATH; or, with --driver, the driver's own DSN (postgres \"host=H dbname=D\", mysql \"user:pass@tcp(host:3306)/db?parseTime=true\", " +
		"sqlite a file path)"
	driverFlagHelp = "postgres, mysql or sqlite: names the driver of a --db that is not a URL (a URL names its own)"
)

// usageErr prints one line naming the bad flag or argument and ends with exit status 2. The
// line starts with the command's whole path ("outboxkit inbox prune: "), so that a nested
// command is not mistaken for a top-level one of the same name.
func usageErr(cmd *cobra.Command, format string, a ...any) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", cmd.CommandPath(), fmt.Sprintf(format, a...))
	return &exitError{code: 2}
}

// failErr prints one line naming the problem (after the command's path, as usageErr) and ends
// with exit status 1.
func failErr(cmd *cobra.Command, err error) error {
	err = opendb.ClassifyError(err) // the adapters' mapping, for an error no store mapped
	if errors.Is(err, core.ErrPermissionDenied) && !errors.Is(err, ErrPrivileges) {
		err = fmt.Errorf("%w: %w", ErrPrivileges, err)
	}
	msg := strings.Join(strings.Fields(err.Error()), " ") // one line
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s\n", cmd.CommandPath(), msg)
	return &exitError{code: 1}
}

// config checks the flags (exit 2 on a bad one) and returns what to open.
func (f *dbFlags) config(cmd *cobra.Command) (opendb.Config, error) {
	if f.output != "text" && f.output != "json" {
		return opendb.Config{}, usageErr(cmd, "--output: want text or json, got %q", f.output)
	}
	if f.db == "" {
		return opendb.Config{}, usageErr(cmd, "--db is required")
	}
	// Nothing the command writes from here on shows the password of --db (internal/secret).
	if pw := opendb.Password(f.db); pw != "" {
		cmd.SetOut(secret.NewWriter(cmd.OutOrStdout(), pw))
		cmd.SetErr(secret.NewWriter(cmd.ErrOrStderr(), pw))
	}
	driver, dsn, err := opendb.ParseDSN(f.driver, f.db)
	if err != nil {
		return opendb.Config{}, usageErr(cmd, "--db: %v", err)
	}
	if f.schema != "" && driver != "postgres" {
		return opendb.Config{}, usageErr(cmd, "--schema: only for a postgres:// database (MySQL: the database of the URL)")
	}
	cfg := opendb.Config{Driver: driver, DSN: dsn, Schema: f.schema, Table: f.table, Lanes: f.lanes, Slot: f.slot, Logger: slog.New(slog.DiscardHandler)}
	// The adapter's own rules for the identifiers and the lane count, checked without a
	// database: a bad --table is bad usage, not a failure after the database was opened.
	if problems := opendb.Check(cfg); len(problems) > 0 {
		flag := map[string]string{"DSN": "--db", "Schema": "--schema", "Table": "--table", "Lanes": "--lanes"}[problems[0].Field]
		if flag == "" {
			flag = "--table"
		}
		return opendb.Config{}, usageErr(cmd, "%s: %s", flag, problems[0].Reason)
	}
	return cfg, nil
}

// ErrNotMigrated is reported when the database holds no migrated outbox. Its remedy names the
// same --db: the address was parsed by opendb.ParseDSN, so it is the database the operator
// named, never a file created for a mistyped address.
var ErrNotMigrated = errors.New("no migrated outbox (`outboxkit migrate` with the same --db creates the tables)")

// open opens an existing, migrated outbox as it is: operators never migrate, and the lane count
// is read from the database. A bad flag returns an exit-2 error, anything else exit 1; both are
// printed already.
func (f *dbFlags) open(cmd *cobra.Command) (*opendb.DB, error) {
	cfg, err := f.config(cmd)
	if err != nil {
		return nil, err
	}
	db, err := openExisting(cmd.Context(), cfg)
	if err != nil {
		return nil, failErr(cmd, err)
	}
	return db, nil
}

// openExisting opens an existing, migrated outbox as it is (it creates and migrates nothing):
// the operator commands' and `outboxkit reconcile`'s way in.
func openExisting(ctx context.Context, cfg opendb.Config) (*opendb.DB, error) {
	if cfg.Driver == "sqlite" {
		if _, err := os.Stat(cfg.DSN); err != nil { // sqlite.OpenDB would create it
			if errors.Is(err, os.ErrNotExist) {
				err = fmt.Errorf("%w: the SQLite file %s does not exist (check --db; `outboxkit migrate --db sqlite:%s` creates it)", ErrNotMigrated, cfg.DSN, cfg.DSN)
			}
			return nil, err
		}
	}
	db, err := opendb.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("database: %w", err)
	}
	if _, err := db.Store.LaneCount(ctx); err != nil {
		db.Close()
		if errors.Is(opendb.ClassifyError(err), core.ErrSchemaMismatch) { // a missing table or schema
			err = fmt.Errorf("%w: %w", ErrNotMigrated, err)
		}
		return nil, err
	}
	return db, nil
}

// ErrPrivileges is reported when the database refused a statement for the role's privileges
// (an error wrapping core.ErrPermissionDenied: the adapter's ClassifyError).
var ErrPrivileges = errors.New("missing privileges (the roles of adapters/postgres/grants.sql, or MySQL GRANTs on the outbox tables)")

// emit writes v as JSON, or text through the function.
func emit(cmd *cobra.Command, f *dbFlags, v any, text func(w io.Writer)) error {
	w := cmd.OutOrStdout()
	if f.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text(w)
	return nil
}

// groupCommand is a command that only holds subs: run alone it is bad usage naming them.
func groupCommand(use, short string, subs ...*cobra.Command) *cobra.Command {
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.Name()
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr(cmd, "give a subcommand: %s", strings.Join(names, ", "))
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// opsCommand builds an operator command on an opened outbox.
func opsCommand(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, args []string) error) (*cobra.Command, *dbFlags) {
	var f *dbFlags
	cmd := &cobra.Command{
		Use: use, Short: short, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			db, err := f.open(cmd)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := run(cmd, f, db, args); err != nil {
				var ee *exitError
				if errors.As(err, &ee) {
					return err
				}
				return failErr(cmd, err)
			}
			return nil
		},
	}
	f = addDBFlags(cmd)
	return cmd, f
}

// The status of `outboxkit status` is read and summarised by internal/opstatus (the operator
// console draws the same reading).
type (
	statusReport     = opstatus.Report
	publisherJSON    = opstatus.Publisher
	laneSummary      = opstatus.LaneSummary
	laneOwners       = opstatus.LaneOwners
	destinationsJSON = opstatus.DestinationCounts
	destinationJSON  = opstatus.DestinationCount
	checkpointOut    = opstatus.Checkpoint
	laneJSON         = opstatus.Lane
)

// The status's bounds (opstatus.Destinations, RateWindow, RateRecords, RecentWindow).
const (
	statusDestinations = opstatus.Destinations
	statusRateWindow   = opstatus.RateWindow
	statusRateRecords  = opstatus.RateRecords
	statusRecentWindow = opstatus.RecentWindow
)

// opCommand is opsCommand of a command run by the outbox's core.Operator (newOperator).
func opCommand(use, short string, args cobra.PositionalArgs, run func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, op *core.Operator, args []string) error) (*cobra.Command, *dbFlags) {
	return opsCommand(use, short, args, func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, args []string) error {
		op, err := newOperator(db)
		if err != nil {
			return err
		}
		return run(cmd, f, db, op, args)
	})
}

// newOperator is the core.Operator of the commands on db: the operator commands and the status
// reads, with status's bounds.
func newOperator(db *opendb.DB) (*core.Operator, error) {
	return opstatus.NewOperator(db, nil)
}

// statusLong is status's --help: each field, and where it exists.
const statusLong = `Show the outbox's status, from indexed reads and estimates only (safe to run often):

  pending, parked   unpublished events (parked: retries exhausted or a permanent error); every adapter
  blocked           pending events behind an earlier parked event of their key; every adapter (the SQL
                    adapters look at a bounded number of pending events: a lower bound beyond them)
  published         published rows still present; every adapter, an estimate on a large table
  oldest            the oldest pending event and its age; every adapter
  destinations      pending events per destination, over the oldest 10,000 of them; every adapter
  rate              events published per second over the last minute: every adapter (SQLite's
                    publications; the settle log of PostgreSQL, plain or partitioned, and MySQL/MariaDB);
                    "unknown" on an outbox last migrated by an older version. Events deleted on publish
                    (relay.delete_on_publish) and published rows already cleaned up are not counted
  eta               pending / rate, shown only while the fleet publishes: something was published in
                    the last 10s (none while nothing is published, e.g. a breaker open)
  publisher         the publisher generation, its kind, and a live holder: the relay that took the
                    generation, or another, holding a lane lease that has not expired ("none live"
                    otherwise); every adapter
  checkpoint        the CDC relay's checkpoint and its age: PostgreSQL and MySQL/MariaDB ("none" on
                    SQLite, which has no CDC); retention: PostgreSQL the bytes its slot retains,
                    MySQL/MariaDB the binary log bytes retained and the headroom before it is purged
  lanes             held / expired / free counts and each owner's lanes; every adapter (--lanes: one
                    row per lane)

--watch adds the drain rate (how fast pending falls, net of new events) and its ETA.`

func statusCommand() *cobra.Command {
	var w watchFlags
	var allLanes bool
	cmd, _ := opCommand("status --db URL [--lanes] [--watch [--interval D]]", "show pending, parked and blocked events, the oldest pending age, the pending events per destination, the publish rate, the publisher, the CDC checkpoint and the lanes (--watch: again every second, with the drain rate and ETA)",
		cobra.NoArgs, func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, op *core.Operator, _ []string) error {
			if w.watch {
				return watchStatus(cmd, f, db, op, w.interval, allLanes)
			}
			r, now, err := collectStatus(cmd.Context(), db, op)
			if err != nil {
				return err
			}
			return emit(cmd, f, r, func(w io.Writer) { printStatus(w, r, now, allLanes) })
		})
	cmd.Long = statusLong
	cmd.Flags().BoolVar(&allLanes, "lanes", false, "print one row per lane (owner, generation, lease expiry) after the summary")
	cmd.Aliases = []string{"stats"}
	cmd.Flags().BoolVar(&w.watch, "watch", false, "show the status again every --interval until interrupted: redrawn on a terminal, one line each time otherwise (one JSON object a line with --output json)")
	cmd.Flags().DurationVar(&w.interval, "interval", time.Second, "with --watch: time between two looks (at least 10ms)")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if w.interval < 10*time.Millisecond {
			return usageErr(cmd, "--interval: must be at least 10ms, got %s", w.interval)
		}
		return nil
	}
	return cmd
}

// collectStatus reads the status of the outbox (opstatus.Collect).
func collectStatus(ctx context.Context, db *opendb.DB, op *core.Operator) (statusReport, time.Time, error) {
	return opstatus.Collect(ctx, db, op)
}

func printStatus(w io.Writer, r statusReport, now time.Time, allLanes bool) {
	fmt.Fprintf(w, "pending    %d\n", r.Pending)
	fmt.Fprintf(w, "parked     %d\n", r.Parked)
	fmt.Fprintf(w, "blocked    %d (pending behind a parked key)\n", r.Blocked)
	fmt.Fprintf(w, "published  %d (an estimate on a large table)\n", r.Published)
	if r.OldestPendingAt == nil {
		fmt.Fprintln(w, "oldest     none")
	} else {
		fmt.Fprintf(w, "oldest     %s (age %s)\n", r.OldestPendingAt.Format(time.RFC3339), seconds(r.OldestPendingAge))
	}
	switch {
	case r.PublishRate == nil:
		fmt.Fprintln(w, "rate       unknown (no log of publication times: an outbox migrated by an older version; status --watch measures the drain rate)")
	case r.PublishETA != nil:
		fmt.Fprintf(w, "rate       %.2f/s published over the last minute (eta %s at the last minute's rate)\n", *r.PublishRate, seconds(*r.PublishETA))
	case r.Pending > 0 && *r.PublishRate > 0:
		fmt.Fprintf(w, "rate       %.2f/s published over the last minute (no eta: nothing published in the last %s)\n", *r.PublishRate, statusRecentWindow)
	default:
		fmt.Fprintf(w, "rate       %.2f/s published over the last minute\n", *r.PublishRate)
	}
	d := r.Destinations
	fmt.Fprintf(w, "destinations %d", len(d.Counts))
	if d.Partial {
		fmt.Fprintf(w, " (of the oldest %s pending)", thousands(statusDestinations))
	}
	fmt.Fprintln(w)
	if len(d.Counts) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  DESTINATION\tPENDING")
		for _, c := range d.Counts {
			fmt.Fprintf(tw, "  %q\t%d\n", c.Destination, c.Pending)
		}
		_ = tw.Flush()
	}
	p := r.Publisher
	kind := p.Kind
	if kind == "" {
		kind = "none"
	}
	fmt.Fprintf(w, "publisher  generation %d, kind %s", p.Generation, kind)
	switch {
	case p.LiveHolder != "":
		fmt.Fprintf(w, ", holder %s", p.LiveHolder)
	case p.Generation != 0:
		fmt.Fprint(w, ", holder none live")
	}
	if p.Since != nil {
		fmt.Fprintf(w, ", since %s", p.Since.Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	if c := r.Checkpoint; c != nil {
		fmt.Fprintf(w, "checkpoint position %s (source %s, generation %d, updated %s, age %s)\n", c.Position, c.Source, c.Generation, c.UpdatedAt.Format(time.RFC3339), seconds(c.AgeSeconds))
		switch {
		case c.RetainedBytes == nil && c.RetentionError == "": // no change source (not reached: SQLite keeps no checkpoint)
		case c.RetainedBytes == nil:
			fmt.Fprintf(w, "retention  unknown: %s\n", c.RetentionError)
		case c.HeadroomBytes == nil:
			fmt.Fprintf(w, "retention  %d bytes retained (slot %s; no headroom: the slot pins the WAL)\n", *c.RetainedBytes, c.Slot)
		default:
			fmt.Fprintf(w, "retention  %d bytes retained, %d bytes of headroom (binary log kept before the checkpoint)\n", *c.RetainedBytes, *c.HeadroomBytes)
		}
	} else {
		fmt.Fprintln(w, "checkpoint none")
	}
	ls := r.LaneSummary
	fmt.Fprintf(w, "lanes      %d: %d held, %d expired, %d free\n", len(r.Lanes), ls.Held, ls.Expired, ls.Free)
	for _, o := range ls.Owners {
		fmt.Fprintf(w, "  owner %s: %d held", o.Owner, o.Held)
		if o.Expired > 0 {
			fmt.Fprintf(w, ", %d expired", o.Expired)
		}
		fmt.Fprintln(w)
	}
	if !allLanes {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  LANE\tOWNER\tGENERATION\tLEASE_EXPIRY")
	for _, l := range r.Lanes {
		owner := l.Owner
		if owner == "" {
			owner = "-"
		}
		expiry := "none"
		if l.LeaseUntil != nil {
			expiry = l.LeaseUntil.Format(time.RFC3339)
			if !l.LeaseUntil.After(now) {
				expiry += " (expired)"
			}
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%s\n", l.Lane, owner, l.Generation, expiry)
	}
	_ = tw.Flush()
}

// seconds is s seconds as a duration rounded to the second.
func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Second)
}

// thousands writes n with comma separators (10,000).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// parkedJSON is one parked event of `outboxkit parked --output json`.
type parkedJSON struct {
	Seq          int64     `json:"seq"`
	ID           string    `json:"id"`
	PartitionKey string    `json:"partition_key"`
	Type         string    `json:"type"`
	Attempts     int       `json:"attempts"`
	ParkedAt     time.Time `json:"parked_at"`
	LastError    string    `json:"last_error"`
}

func parkedCommand() *cobra.Command {
	var limit int
	cmd, _ := opsCommand("parked --db URL [--limit N]", "list parked events with their attempts and last error (\"none\" when there are none)", cobra.NoArgs,
		func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, _ []string) error {
			recs, err := db.Store.List(cmd.Context(), driver.ListParams{State: driver.StateParked, Limit: limit})
			if err != nil {
				return err
			}
			out := []parkedJSON{}
			for _, r := range recs {
				out = append(out, parkedJSON{Seq: r.Seq, ID: r.ID, PartitionKey: r.PartitionKey, Type: r.Type, Attempts: r.Attempts, ParkedAt: r.ParkedAt.UTC(), LastError: r.LastError})
			}
			return emit(cmd, f, out, func(w io.Writer) {
				if len(out) == 0 {
					fmt.Fprintln(w, "none")
				}
				for _, r := range out {
					fmt.Fprintf(w, "seq=%d id=%s key=%q type=%s attempts=%d parked_at=%s error=%q\n",
						r.Seq, r.ID, r.PartitionKey, r.Type, r.Attempts, r.ParkedAt.Format(time.RFC3339), r.LastError)
				}
			})
		})
	cmd.Flags().IntVar(&limit, "limit", driver.DefaultListLimit, "most events to list")
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if limit < 1 {
			return usageErr(cmd, "--limit: must be at least 1, got %d", limit)
		}
		return nil
	}
	return cmd
}

// unparkJSON is the output of `outboxkit unpark --output json`.
type unparkJSON struct {
	Unparked int      `json:"unparked"`
	Keys     []string `json:"keys"`
}

func unparkCommand() *cobra.Command {
	var all bool
	var actor *string
	cmd, _ := opCommand("unpark --db URL (KEY | --all)", "release a parked partition key (or every parked key) so that its events are delivered again in order", cobra.MaximumNArgs(1),
		func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, op *core.Operator, args []string) error {
			ctx := cmd.Context()
			keys := args
			if all {
				var err error
				if keys, err = db.Store.ParkedKeys(ctx); err != nil {
					return err
				}
			}
			out := unparkJSON{Keys: append([]string{}, keys...)}
			n, err := op.Unpark(ctx, keys, auditEntry(*actor, "unpark", map[string]any{"keys": out.Keys, "all": all}))
			if err != nil {
				return err
			}
			out.Unparked = n
			return emit(cmd, f, out, func(w io.Writer) { fmt.Fprintf(w, "unparked=%d keys=%d\n", out.Unparked, len(out.Keys)) })
		})
	cmd.Flags().BoolVar(&all, "all", false, "release every parked key")
	actor = addActorFlag(cmd)
	// Checked before the database is opened.
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if all == (len(args) == 1) {
			return usageErr(cmd, "give one partition key or --all")
		}
		return nil
	}
	return cmd
}

// defaultRetention is cleanup's --retention default (core.CleanupOptions' default).
const defaultRetention = 24 * time.Hour

func cleanupCommand() *cobra.Command {
	var retention time.Duration
	var actor *string
	cmd, _ := opCommand("cleanup --db URL [--retention D]", "delete published events older than --retention that are behind the watermark (the lowest unpublished event)", cobra.NoArgs,
		func(cmd *cobra.Command, f *dbFlags, db *opendb.DB, op *core.Operator, _ []string) error {
			var n int
			var err error
			if retention == defaultRetention {
				n, err = core.CleanupOutbox(cmd.Context(), db.Store, &core.CleanupOptions{Retention: retention})
			} else {
				// Audited: one transaction with its audit row.
				n, err = op.Cleanup(cmd.Context(), driver.PruneParams{PublishedBefore: time.Now().Add(-retention)},
					*auditEntry(*actor, "cleanup", map[string]any{"retention": retention.String()}))
			}
			if err != nil {
				return err
			}
			return emit(cmd, f, map[string]int{"deleted": n}, func(w io.Writer) { fmt.Fprintf(w, "deleted=%d\n", n) })
		})
	cmd.Flags().DurationVar(&retention, "retention", defaultRetention, "keep published events this long (must be positive); another value than the default deletes in one transaction and writes an audit row")
	actor = addActorFlag(cmd)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if retention <= 0 {
			return usageErr(cmd, "--retention: must be positive, got %s", retention)
		}
		return nil
	}
	return cmd
}
