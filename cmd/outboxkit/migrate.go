package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/internal/opendb"
)

// migrateCommand is `outboxkit migrate` (run the adapter's migrations) with its subcommand
// `migrate sql` (print them as a plain SQL script).
func migrateCommand() *cobra.Command {
	var f *dbFlags
	var inboxOnly bool
	cmd := &cobra.Command{
		Use:   "migrate --db URL [--lanes N]",
		Short: "create or upgrade the outbox tables (idempotent); `migrate sql` prints them as plain SQL instead",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lanes := f.lanes
			if lanes < 0 {
				return usageErr(cmd, "--lanes: must not be negative, got %d", lanes)
			}
			cfg, err := f.config(cmd) // --lanes above core.MaxLanes too, before any file is created
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			db, err := opendb.Open(ctx, cfg)
			if err != nil {
				return failErr(cmd, err)
			}
			if inboxOnly {
				defer db.Close()
				m, ok := db.Store.(interface{ MigrateInbox(context.Context) error })
				if !ok {
					return failErr(cmd, errors.New("--inbox-only: this adapter has no MigrateInbox"))
				}
				if err := m.MigrateInbox(ctx); err != nil {
					return failErr(cmd, err)
				}
				return emit(cmd, f, map[string]any{"migrated": true, "inbox_only": true}, func(w io.Writer) {
					fmt.Fprintln(w, "migrated inbox")
				})
			}
			if n, err := db.Store.LaneCount(ctx); err == nil && lanes == 0 {
				// An existing outbox keeps its lane count.
				db.Close()
				cfg.Lanes = n
				if db, err = opendb.Open(ctx, cfg); err != nil {
					return failErr(cmd, err)
				}
			}
			defer db.Close()
			if err := db.Store.Migrate(ctx); err != nil {
				return failErr(cmd, err)
			}
			n, err := db.Store.LaneCount(ctx)
			if err != nil {
				return failErr(cmd, err)
			}
			return emit(cmd, f, map[string]any{"migrated": true, "lanes": n}, func(w io.Writer) {
				fmt.Fprintf(w, "migrated lanes=%d\n", n)
			})
		},
	}
	f = addDBFlags(cmd)
	cmd.Flags().IntVar(&f.lanes, "lanes", 0, "lane count recorded on a new outbox (default the library's, 64); an existing outbox keeps its own and another value is an error")
	cmd.Flags().BoolVar(&inboxOnly, "inbox-only", false, "create only the inbox's tables, for a consumer-only service (the store's MigrateInbox); a later migrate without it adds the outbox")
	cmd.AddCommand(migrateSQLCommand())
	return cmd
}

func migrateSQLCommand() *cobra.Command {
	var dialect, schema, table string
	var lanes int
	var inboxOnly bool
	cmd := &cobra.Command{
		Use:   "sql --dialect postgres|mysql|sqlite [--schema S] [--table T] [--lanes N] [--inbox-only]",
		Short: "print the outbox's migrations as one plain SQL script (for goose, atlas, golang-migrate); `outboxkit migrate` then finds the outbox current",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if lanes < 0 {
				return usageErr(cmd, "--lanes: must not be negative, got %d", lanes)
			}
			if schema != "" && dialect != "postgres" {
				return usageErr(cmd, "--schema: only for --dialect postgres")
			}
			if inboxOnly && (lanes != 0 || table != "") {
				return usageErr(cmd, "--inbox-only: creates no outbox, so --lanes and --table do not apply")
			}
			var script string
			var err error
			switch dialect {
			case "postgres":
				o := &postgres.Options{Schema: schema, Table: table, Lanes: lanes}
				script, err = pick(inboxOnly, postgres.InboxMigrationSQL, postgres.MigrationSQL)(o)
			case "mysql":
				o := &mysql.Options{Table: table, Lanes: lanes}
				script, err = pick(inboxOnly, mysql.InboxMigrationSQL, mysql.MigrationSQL)(o)
			case "sqlite":
				o := &sqlite.Options{Table: table, Lanes: lanes}
				script, err = pick(inboxOnly, sqlite.InboxMigrationSQL, sqlite.MigrationSQL)(o)
			default:
				return usageErr(cmd, "--dialect: want postgres, mysql or sqlite, got %q", dialect)
			}
			if err != nil {
				return usageErr(cmd, "%v", err) // options only: a bad --schema, --table or --lanes
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), script)
			return err
		},
	}
	cmd.Flags().StringVar(&dialect, "dialect", "", "postgres, mysql or sqlite (required)")
	cmd.Flags().StringVar(&schema, "schema", "", "PostgreSQL schema of the outbox, which must exist (default public)")
	cmd.Flags().StringVar(&table, "table", "", "outbox table (default outbox)")
	cmd.Flags().IntVar(&lanes, "lanes", 0, "lane count recorded (default the library's, 64)")
	cmd.Flags().BoolVar(&inboxOnly, "inbox-only", false, "print only the inbox's tables, for a consumer-only service (what `migrate --inbox-only` does)")
	return cmd
}

// pick returns inbox when inboxOnly is set, else full.
func pick[O any](inboxOnly bool, inbox, full func(*O) (string, error)) func(*O) (string, error) {
	if inboxOnly {
		return inbox
	}
	return full
}

// versionCommand prints the module version the binary was built from.
func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the outboxkit module version and the Go version of this binary",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), versionString())
		},
	}
}

func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "outboxkit unknown (no build information)"
	}
	var extra []string
	extra = append(extra, bi.GoVersion)
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" || (s.Key == "vcs.modified" && s.Value == "true") {
			extra = append(extra, s.Key+"="+s.Value)
		}
	}
	return fmt.Sprintf("outboxkit %s %s (%s)", bi.Main.Path, bi.Main.Version, strings.Join(extra, ", "))
}
