package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

// opsDB is an empty database (a PostgreSQL schema, a MySQL database, a SQLite file path) for
// the operator commands.
type opsDB struct {
	driver string
	flags  []string // --db URL [--schema S]
	cfg    opendb.Config
	// tables lists the tables the database holds (to check that a failed command created none).
	tables func(t testing.TB) []string
	// exec runs a whole SQL script on the database (in one transaction where the driver can).
	exec func(t testing.TB, script string)
	// execAlone, where set, runs one statement outside any explicit transaction (PostgreSQL's
	// VACUUM refuses one); see execEach.
	execAlone func(t testing.TB, stmt string)
	// meta returns the rows of the outbox's bookkeeping table (name=value, sorted).
	meta func(t testing.TB, table string) []string
}

// execEach runs statements one by one, each outside an explicit transaction where the driver
// needs that (execAlone), else with exec.
func (d opsDB) execEach(t testing.TB, stmts []string) {
	for _, stmt := range stmts {
		if d.execAlone != nil {
			d.execAlone(t, stmt)
		} else {
			d.exec(t, stmt)
		}
	}
}

func opsPostgres(t testing.TB) opsDB {
	dsn := testkit.Need(t, testkit.PostgresDSN)
	ctx := t.Context()
	schema := "ops_" + randSuffix()
	admin, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		_ = admin.Close(context.Background())
	})
	return opsDB{
		driver: "postgres", flags: []string{"--db", dsn, "--schema", schema},
		cfg: opendb.Config{Driver: "postgres", DSN: dsn, Schema: schema},
		tables: func(t testing.TB) []string {
			rows, err := admin.Query(t.Context(), "SELECT tablename FROM pg_tables WHERE schemaname = $1 ORDER BY 1", schema)
			require.NoError(t, err)
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			return names
		},
		meta: func(t testing.TB, table string) []string {
			rows, err := admin.Query(t.Context(), "SELECT name || '=' || value FROM "+schema+"."+table+"_meta ORDER BY 1")
			require.NoError(t, err)
			out, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			return out
		},
		exec: func(t testing.TB, script string) {
			// One simple-protocol Exec of the whole script, in one transaction, as psql -1 -f.
			tx, err := admin.Begin(t.Context())
			require.NoError(t, err)
			_, err = tx.Exec(t.Context(), script)
			require.NoError(t, err)
			require.NoError(t, tx.Commit(t.Context()))
		},
		execAlone: func(t testing.TB, stmt string) {
			_, err := admin.Exec(t.Context(), stmt)
			require.NoError(t, err)
		},
	}
}

func opsMySQL(t testing.TB) opsDB {
	dsn := testkit.Need(t, testkit.MySQLDSN)
	ctx := t.Context()
	cfg, err := gomysql.ParseDSN(dsn)
	require.NoError(t, err)
	admin, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	name := "ops_" + randSuffix()
	_, err = admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`")
		_ = admin.Close()
	})
	user := cfg.User
	if cfg.Passwd != "" {
		user += ":" + cfg.Passwd
	}
	url := "mysql://" + user + "@" + cfg.Addr + "/" + name
	_, mdsn, err := opendb.ParseDSN("", url)
	require.NoError(t, err)
	return opsDB{
		driver: "mysql", flags: []string{"--db", url},
		cfg: opendb.Config{Driver: "mysql", DSN: mdsn},
		tables: func(t testing.TB) []string {
			rows, err := admin.QueryContext(t.Context(), "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY 1", name)
			require.NoError(t, err)
			defer rows.Close()
			var names []string
			for rows.Next() {
				var n string
				require.NoError(t, rows.Scan(&n))
				names = append(names, n)
			}
			require.NoError(t, rows.Err())
			return names
		},
		meta: func(t testing.TB, table string) []string {
			return queryStrings(t, admin, "SELECT CONCAT(name, '=', value) FROM `"+name+"`.`"+table+"_meta` ORDER BY 1")
		},
		exec: func(t testing.TB, script string) {
			// One multi-statement batch, as a migration tool sends it.
			c := cfg.Clone()
			c.DBName, c.MultiStatements = name, true
			db, err := sql.Open("mysql", c.FormatDSN())
			require.NoError(t, err)
			defer db.Close()
			_, err = db.ExecContext(t.Context(), script)
			require.NoError(t, err)
		},
	}
}

func opsSQLite(t testing.TB) opsDB {
	path := filepath.Join(t.TempDir(), "outbox.db")
	return opsDB{
		driver: "sqlite", flags: []string{"--db", "sqlite:" + path},
		cfg: opendb.Config{Driver: "sqlite", DSN: path},
		tables: func(t testing.TB) []string {
			if _, err := os.Stat(path); err != nil {
				return nil
			}
			db, err := sqlite.OpenDB(t.Context(), path)
			require.NoError(t, err)
			defer db.Close()
			rows, err := db.QueryContext(t.Context(), "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1")
			require.NoError(t, err)
			defer rows.Close()
			var names []string
			for rows.Next() {
				var n string
				require.NoError(t, rows.Scan(&n))
				names = append(names, n)
			}
			require.NoError(t, rows.Err())
			return names
		},
		meta: func(t testing.TB, table string) []string {
			db, err := sqlite.OpenDB(t.Context(), path)
			require.NoError(t, err)
			defer db.Close()
			return queryStrings(t, db, `SELECT name || '=' || value FROM "`+table+`_meta" UNION ALL
				SELECT 'migration=' || version || ':' || name FROM "`+table+`_migrations" UNION ALL
				SELECT 'inbox_migration=' || version || ':' || name FROM "inbox_migrations" ORDER BY 1`)
		},
		exec: func(t testing.TB, script string) {
			db, err := sqlite.OpenDB(t.Context(), path)
			require.NoError(t, err)
			defer db.Close()
			tx, err := db.BeginTx(t.Context(), nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(t.Context(), script)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
		},
	}
}

func queryStrings(t testing.TB, db *sql.DB, query string) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), query)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

var opsBackends = []struct {
	name string
	new  func(t testing.TB) opsDB
}{{"postgres", opsPostgres}, {"mysql", opsMySQL}, {"sqlite", opsSQLite}}

// cli runs the cobra root in this process and returns the exit status, stdout and stderr.
func cli(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// ok runs a command that must succeed and returns its stdout.
func ok(t testing.TB, args ...string) string {
	t.Helper()
	code, out, errs := cli(t, args...)
	require.Equal(t, 0, code, "%q: %s", args, errs)
	return out
}

// fails runs a command that must exit with code after printing exactly one line on stderr that
// contains want; it returns that line.
func fails(t testing.TB, code int, want string, args ...string) string {
	t.Helper()
	got, out, errs := cli(t, args...)
	require.Equal(t, code, got, "%q: stdout %q stderr %q", args, out, errs)
	require.Equal(t, 1, strings.Count(errs, "\n"), "%q: one line: %q", args, errs)
	require.Contains(t, errs, want, "%q", args)
	return errs
}

// writeEvents writes one event per key through the adapter's own transaction type and returns
// their IDs in order.
func writeEvents(t testing.TB, store opendb.Store, keys ...string) []string {
	t.Helper()
	ctx := t.Context()
	var write func(ctx context.Context, key string) ([]string, error)
	switch s := store.(type) {
	case *postgres.Store[pgx.Tx]:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{}`))
	case *mysql.Store:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{}`))
	case *sqlite.Store:
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(t, err)
		write = testkit.Writer(s, ob, 1, []byte(`{}`))
	default:
		t.Fatalf("no writer for %T", store)
	}
	var ids []string
	for _, k := range keys {
		got, err := write(ctx, k)
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	return ids
}

// TestOpsCommands runs every operator command on each database through the cobra root: before
// migration every command fails with one line and creates nothing; after `migrate`, status counts
// a parked key, the event blocked behind it and the held lanes; parked lists it; cleanup keeps
// the published event behind the unpublished ones; unpark (flags after the key) releases it.
func TestOpsCommands(t *testing.T) {
	// Not parallel with the other tests (its subtests are, with each other): under the load of
	// three databases at once the daemon end-to-end tests miss their deadlines.
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			with := func(cmd ...string) []string { return append(cmd, d.flags...) }

			// Not migrated: one line naming the problem, exit 1, nothing created.
			for _, cmd := range [][]string{{"status"}, {"parked"}, {"unpark", "k"}, {"cleanup"}} {
				fails(t, 1, "no migrated outbox", with(cmd...)...)
			}
			require.Empty(t, d.tables(t))

			require.Equal(t, "migrated lanes=4\n", ok(t, with("migrate", "--lanes", "4")...))
			require.Equal(t, "migrated lanes=4\n", ok(t, with("migrate")...), "an existing outbox keeps its lane count")
			fails(t, 1, "lanes", with("migrate", "--lanes", "8")...)
			fails(t, 1, "no migrated outbox", with("status", "--table", "nope")...)
			require.Equal(t, "none\n", ok(t, with("parked")...))

			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			store := db.Store
			ids := writeEvents(t, store, "a", "a", "b")
			_, err = store.AcquireGeneration(t.Context(), driver.AcquireParams{Kind: driver.KindPolling, Holder: "ops-test"})
			require.NoError(t, err)
			pub, err := store.Generation(t.Context())
			require.NoError(t, err)
			leases, err := store.ClaimLanes(t.Context(), driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 4, TTL: time.Hour})
			require.NoError(t, err)
			require.Len(t, leases, 4)
			recs, err := store.Fetch(t.Context(), driver.FetchParams{Leases: leases, Limit: 10})
			require.NoError(t, err)
			require.Len(t, recs, 3)
			p := driver.SettleParams{Leases: leases}
			for _, r := range recs {
				switch r.ID {
				case ids[0]: // the first event of a: parked, holding back the second
					p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "rejected schema", Park: true})
				case ids[2]:
					p.Published = append(p.Published, r.Seq)
				}
			}
			require.NoError(t, store.Settle(t.Context(), p))

			text := ok(t, with("status")...)
			for _, want := range []string{"pending    1\n", "parked     1\n", "blocked    1 ", "published  1 ",
				"publisher  generation " + itoa(pub.Generation) + ", kind polling, holder w1, since ", "lanes      4: 4 held, 0 expired, 0 free\n", "  owner w1: 4 held\n"} {
				require.Contains(t, text, want)
			}
			require.Equal(t, text[:strings.Index(text, "oldest")], func() string {
				alias := ok(t, with("stats")...)
				return alias[:strings.Index(alias, "oldest")]
			}(), "stats is an alias of status")
			var st statusReport
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("status", "--output", "json")...)), &st))
			require.Equal(t, [4]int64{1, 1, 1, 1}, [4]int64{st.Pending, st.Parked, st.Blocked, st.Published})
			require.NotNil(t, st.OldestPendingAt)
			require.Len(t, st.Lanes, 4)
			for _, l := range st.Lanes {
				require.Equal(t, "w1", l.Owner)
				require.NotNil(t, l.LeaseUntil)
				require.True(t, l.LeaseUntil.After(time.Now().Add(50*time.Minute)))
			}
			require.Equal(t, pub.Generation, st.Publisher.Generation)
			require.Equal(t, driver.KindPolling, st.Publisher.Kind)
			require.Nil(t, st.Checkpoint)
			if cs, isCS := store.(driver.CheckpointStore); isCS {
				require.NoError(t, cs.SaveCheckpoint(t.Context(), driver.Checkpoint{Source: "log-1", Position: "42", Generation: pub.Generation}))
				require.NoError(t, json.Unmarshal([]byte(ok(t, with("status", "--output", "json")...)), &st))
				require.NotNil(t, st.Checkpoint)
				require.Equal(t, "42", st.Checkpoint.Position)
				require.Contains(t, ok(t, with("status")...), "checkpoint position 42 (source log-1")
			}

			parked := ok(t, with("parked")...)
			require.Contains(t, parked, "id="+ids[0])
			require.Contains(t, parked, `key="a"`)
			require.Contains(t, parked, "attempts=1")
			require.Contains(t, parked, `error="rejected schema"`)
			var pj []parkedJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("parked", "--output", "json")...)), &pj))
			require.Len(t, pj, 1)
			require.Equal(t, parkedJSON{Seq: pj[0].Seq, ID: ids[0], PartitionKey: "a", Type: "order.changed", Attempts: 1, ParkedAt: pj[0].ParkedAt, LastError: "rejected schema"}, pj[0])

			// The published b was written after the unpublished a's: it stays.
			require.Equal(t, "deleted=0\n", ok(t, with("cleanup", "--retention", "1ns")...))

			// Flags after the key.
			require.Equal(t, "unparked=1 keys=1\n", ok(t, append([]string{"unpark", "a"}, d.flags...)...))
			require.Equal(t, "none\n", ok(t, with("parked")...))
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("status", "--output", "json")...)), &st))
			require.Equal(t, [3]int64{2, 0, 0}, [3]int64{st.Pending, st.Parked, st.Blocked})
			require.Equal(t, "unparked=0 keys=0\n", ok(t, with("unpark", "--all")...))
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Bad usage: one line naming the flag, exit 2, before any database is opened.
func TestOpsUsage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "none.db")
	db := "sqlite:" + path
	for _, c := range []struct {
		want string
		args []string
	}{
		{"--retention", []string{"cleanup", "--db", db, "--retention", "0s"}},
		{"--retention", []string{"cleanup", "--db", db, "--retention", "-1h"}},
		{"--retention", []string{"status", "--db", db, "--retention", "1h"}}, // not a status flag
		{"--bogus", []string{"parked", "--db", db, "--bogus"}},
		{"--output", []string{"status", "--db", db, "--output", "xml"}},
		{"--db is required", []string{"status"}},
		{"--db", []string{"status", "--db", "redis://x"}},
		{"--schema", []string{"status", "--db", db, "--schema", "s"}},
		{"--limit", []string{"parked", "--db", db, "--limit", "0"}},
		{"one partition key or --all", []string{"unpark", "--db", db}},
		{"one partition key or --all", []string{"unpark", "--db", db, "k", "--all"}},
		{"accepts at most 1 arg", []string{"unpark", "--db", db, "k", "l"}},
		{"--dialect", []string{"migrate", "sql"}},
		{"--dialect", []string{"migrate", "sql", "--dialect", "oracle"}},
		{"--schema", []string{"migrate", "sql", "--dialect", "sqlite", "--schema", "s"}},
		{"Table", []string{"migrate", "sql", "--dialect", "postgres", "--table", "bad-name"}},
		{"--lanes", []string{"migrate", "--db", db, "--lanes", "-1"}},
		{"give --ids or --key with --since", []string{"replay", "--db", db}},
		{"not both", []string{"replay", "--db", db, "--ids", "x", "--key", "k", "--since", "1h"}},
		{"--key needs --since", []string{"replay", "--db", db, "--key", "k"}},
		{"--since", []string{"replay", "--db", db, "--key", "k", "--since", "yesterday"}},
		{"--since", []string{"replay", "--db", db, "--key", "k", "--since", "-1h"}},
		{"--ids: empty ID", []string{"replay", "--db", db, "--ids", "a,,b"}},
		{"--since", []string{"audit", "--db", db, "--since", "2026-13-01"}},
		{"--limit", []string{"audit", "--db", db, "--limit", "0"}},
		{"--actor", []string{"status", "--db", db, "--actor", "x"}}, // only the audited commands
		{"--slot: only for a postgres:// database", []string{"cdc", "release", "--db", db, "--slot", "s"}},
		{"--slot: only for a postgres:// database", []string{"cdc", "release", "--db", "mysql://u@h/d", "--slot", "s"}},
		{"give a subcommand: release", []string{"cdc"}},
		{"give a subcommand: reset", []string{"lanes"}},
		{"give one of --lane, --owner and --all", []string{"lanes", "reset", "--db", db}},
		{"give one of --lane, --owner and --all", []string{"lanes", "reset", "--db", db, "--all", "--lane", "1"}},
		{"--lane", []string{"lanes", "reset", "--db", db, "--lane", "x"}},
		{"--lane: want 0 to 4095, got 4096", []string{"lanes", "reset", "--db", db, "--lane", "4096"}},
		{"give a subcommand: prune", []string{"inbox"}},
		{"--consumer is required", []string{"inbox", "prune", "--db", db, "--retention", "1h"}},
		{"--retention", []string{"inbox", "prune", "--db", db, "--consumer", "c"}},
		{"--retention", []string{"inbox", "prune", "--db", db, "--consumer", "c", "--retention", "-1h"}},
		{"--limit", []string{"inbox", "prune", "--db", db, "--consumer", "c", "--retention", "1h", "--limit", "100001"}},
		{"--slot", []string{"unpark", "--db", db, "--all", "--slot", "s"}}, // only cdc release
		// A malformed postgres:// URL (pgx's parser), identifiers and a lane count the adapter
		// refuses: bad usage, before anything connects or creates a file.
		{"--db: bad database address: cannot parse `postgres://u:xxxxx@127.0.0.1:notaport/db`: invalid port", []string{"status", "--db", "postgres://u:secret@127.0.0.1:notaport/db"}},
		{"sslmode is invalid", []string{"status", "--db", "postgres://127.0.0.1/db?sslmode=bogus"}},
		{`--table: identifier "bad-name" must match`, []string{"status", "--db", db, "--table", "bad-name"}},
		{"--table: must match", []string{"parked", "--db", "postgres://127.0.0.1/db", "--table", "x y"}},
		{"--schema: must match", []string{"status", "--db", "postgres://127.0.0.1/db", "--schema", "a-b"}},
		{`--table: identifier "null;" must match`, []string{"migrate", "--db", db, "--table", "null;"}},
		{"--lanes: must be between 1 and 4096", []string{"migrate", "--db", db, "--lanes", "5000"}},
	} {
		errs := fails(t, 2, c.want, c.args...)
		// The line names the whole command ("outboxkit inbox prune: "), not its last word.
		path := "outboxkit"
		for _, a := range c.args {
			if strings.HasPrefix(a, "-") {
				break
			}
			path += " " + a
		}
		require.True(t, strings.HasPrefix(errs, path+": "), "%q: %q", c.args, errs)
	}
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "no command created the database")

	help := ok(t, "status", "-h")
	require.NotContains(t, help, "--retention")
	require.Contains(t, help, "--output")
	require.Contains(t, ok(t, "cleanup", "-h"), "--retention")
}

// --db is parsed by opendb.ParseDSN, as the daemon's database.dsn: a bare word, a bare path,
// host:port/db and a key=value DSN without --driver are bad usage listing the accepted forms,
// and no file is created; with --driver the driver's own DSN is taken.
func TestOpsDatabaseAddress(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bare := filepath.Join(dir, "app")
	for _, c := range []struct{ want, db string }{
		{`--db: bad database address: "` + bare + `" names no driver (want a URL: postgres://`, bare},
		{`"127.0.0.1:5432/app" names no driver`, "127.0.0.1:5432/app"},
		{`"host=127.0.0.1 dbname=app" names no driver`, "host=127.0.0.1 dbname=app"},
	} {
		for _, cmd := range []string{"status", "migrate", "parked"} {
			errs := fails(t, 2, c.want, cmd, "--db", c.db)
			require.Contains(t, errs, opendb.Forms, "the accepted forms are listed")
		}
	}
	fails(t, 2, `"127.0.0.1:5432/app" is not a postgres keyword/value DSN`, "status", "--driver", "postgres", "--db", "127.0.0.1:5432/app")
	fails(t, 2, "the URL is a sqlite address but the driver named is postgres", "status", "--driver", "postgres", "--db", "sqlite:"+bare)
	fails(t, 2, `unknown driver "oracle"`, "status", "--driver", "oracle", "--db", bare)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no command created a file")

	// The same file through each accepted SQLite form.
	path := filepath.Join(dir, "outbox.db")
	ok(t, "migrate", "--db", "sqlite:"+path)
	for _, db := range [][]string{{"--db", "sqlite:" + path}, {"--db", "file://" + path}, {"--driver", "sqlite", "--db", path}} {
		require.Contains(t, ok(t, append([]string{"status"}, db...)...), "pending    0\n", db)
	}
	// A missing SQLite file named explicitly: not migrated, and the remedy names the file.
	errs := fails(t, 1, "no migrated outbox", "status", "--db", "sqlite:"+bare)
	require.Contains(t, errs, "outboxkit migrate --db sqlite:"+bare)
	_, err = os.Stat(bare)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// The built binary: exit statuses of a real process, version, a wrong DSN.
func TestOpsBinary(t *testing.T) {
	t.Parallel()
	bin := daemonBinary(t)
	out, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Regexp(t, `^outboxkit github.com/outboxkit/outbox \S+ \(go1\.`, string(out))

	code := func(args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, isExit := err.(*exec.ExitError); isExit {
			return ee.ExitCode(), errb.String()
		}
		require.NoError(t, err)
		return 0, errb.String()
	}
	c, errs := code("cleanup", "--db", "sqlite:x.db", "--retention", "0s")
	require.Equal(t, 2, c)
	require.Contains(t, errs, "--retention")
	c, errs = code("status", "--db", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2")
	require.Equal(t, 1, c)
	require.Equal(t, 1, strings.Count(errs, "\n"), errs)
	require.Contains(t, errs, "outboxkit status: database:")
	c, errs = code("status", "--db", "mysql://nobody@127.0.0.1:1/none?timeout=2s")
	require.Equal(t, 1, c)
	require.Equal(t, 1, strings.Count(errs, "\n"), errs)
}

// `migrate sql` for each dialect, applied as one script to an empty database, gives an outbox
// that `migrate` with the same options finds current: it records nothing more, and the
// operator commands work on it.
func TestMigrateSQL(t *testing.T) {
	// Not parallel with the other tests (its subtests are, with each other): under the load of
	// three databases at once the daemon end-to-end tests miss their deadlines.
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			args := []string{"migrate", "sql", "--dialect", d.driver, "--lanes", "4", "--table", "events"}
			if d.driver == "postgres" {
				args = append(args, "--schema", d.cfg.Schema)
			}
			script := ok(t, args...)
			require.NotContains(t, script, "{{")
			d.exec(t, script)
			tables := d.tables(t)
			require.Contains(t, tables, "events")
			require.Contains(t, tables, "events_lanes")
			require.Contains(t, tables, "events_audit")
			cfg := d.cfg
			cfg.Table, cfg.Lanes = "events", 4
			db, err := opendb.Open(t.Context(), cfg)
			require.NoError(t, err)
			defer db.Close()
			n, err := db.Store.LaneCount(t.Context())
			require.NoError(t, err)
			require.Equal(t, 4, n)
			tablesBefore, metaBefore := d.tables(t), d.meta(t, "events")
			require.NotEmpty(t, metaBefore)
			require.NoError(t, db.Store.Migrate(t.Context()))
			require.Equal(t, tablesBefore, d.tables(t))
			require.Equal(t, metaBefore, d.meta(t, "events"), "Migrate recorded nothing more: the script recorded every migration")
			cfg2 := cfg
			cfg2.Lanes = 8
			db2, err := opendb.Open(t.Context(), cfg2)
			require.NoError(t, err)
			defer db2.Close()
			require.ErrorIs(t, db2.Store.Migrate(t.Context()), core.ErrSchemaMismatch, "the script recorded its lane count")

			writeEvents(t, db.Store, "k")
			st, err := db.Store.Stats(t.Context())
			require.NoError(t, err)
			require.Equal(t, int64(1), st.Pending)
			require.Contains(t, ok(t, append([]string{"status", "--table", "events"}, d.flags...)...), "pending    1\n")
		})
	}
}
