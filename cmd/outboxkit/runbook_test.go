package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/deploy"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The runbooks of docs/runbooks: every command they show exists, and the pages' procedures,
// run through the built binary on real databases, give the outcome they document.

const runbookDir = "../../docs/runbooks"

// runbookPages are the failure-mode pages (docs/runbooks/README.md indexes them).
var runbookPages = []string{
	"relay-outage.md", "broker-ambiguity.md", "database-overload.md", "stuck-claims.md", "cdc-log-loss.md",
	"schema-rejection.md", "duplicate-storm.md", "cleanup-watermark.md", "replay-beyond-retention.md",
	"failover.md",
}

// shellWords splits a command line into words: double quotes group, nothing else is special.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range line {
		switch {
		case r == '"':
			in, have = !in, true
		case (r == ' ' || r == '\t') && !in:
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		words = append(words, cur.String())
	}
	return words
}

// pageCommands returns the command lines of the page's ```sh blocks, split into words.
func pageCommands(t *testing.T, page string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runbookDir, page))
	require.NoError(t, err)
	var out [][]string
	in, line := false, ""
	for l := range strings.SplitSeq(string(b), "\n") {
		switch t := strings.TrimSpace(l); {
		case t == "```sh":
			in = true
		case t == "```":
			in = false
		case in && strings.HasSuffix(t, "\\"): // continued on the next line
			line += strings.TrimSuffix(t, "\\")
		case in && line+t != "":
			out = append(out, shellWords(line+t))
			line = ""
		}
	}
	return out
}

// pageCmd returns the nth (from 0) command line of the page whose command path is path (e.g.
// "unpark", "cdc release"), with the words $DB (followed by dbExtra), $KEY, $IDS, ... replaced
// by vars; the leading "outboxkit" is dropped.
func pageCmd(t *testing.T, page, path string, nth int, vars map[string]string, dbExtra []string) []string {
	t.Helper()
	n := len(strings.Fields(path))
	for _, words := range pageCommands(t, page) {
		if len(words) < 1+n || strings.Join(words[1:1+n], " ") != path {
			continue
		}
		if nth > 0 {
			nth--
			continue
		}
		var args []string
		for _, w := range words[1:] {
			if strings.HasPrefix(w, "$") {
				v, ok := vars[w[1:]]
				require.True(t, ok, "%s: no value for %s", page, w)
				w = v
			}
			args = append(args, w)
		}
		if slices.Contains(words, "$DB") {
			args = append(args, dbExtra...)
		}
		return args
	}
	t.Fatalf("%s: no command %q (#%d) in its sh blocks", page, path, nth)
	return nil
}

// yamlBlockRE matches a page's ```yaml blocks.
var yamlBlockRE = regexp.MustCompile("(?s)```yaml\n.*?\n```")

// sampleVars are values of the pages' variables (docs/runbooks/README.md names them).
var sampleVars = map[string]string{"$DB": "sqlite:outbox.db", "$KEY": "order-1", "$IDS": "id-1,id-2", "$RETENTION": "24h", "$OWNER": "host-1-a"}

// TestRunbookCommands: each page exists and is indexed; every `outboxkit` command line of the
// pages' sh blocks names an existing command with its own flags; every metric the pages name is
// in docs/metrics.md; docs/operations.md links the runbooks.
func TestRunbookCommands(t *testing.T) {
	t.Parallel()
	index, err := os.ReadFile(filepath.Join(runbookDir, "README.md"))
	require.NoError(t, err)
	ops, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	require.Contains(t, string(ops), "(runbooks/README.md)", "docs/operations.md links the runbooks")
	metrics, err := deploy.ReadMetrics("../../docs/metrics.md")
	require.NoError(t, err)
	known := map[string]bool{}
	for _, m := range metrics {
		known[m.Name] = true
	}
	metricRE := regexp.MustCompile(`outboxkit_[a-z0-9_]+`)
	for _, page := range runbookPages {
		require.Contains(t, string(index), "("+page+")", "the index links %s", page)
		text, err := os.ReadFile(filepath.Join(runbookDir, page))
		require.NoError(t, err)
		// Names in YAML blocks are configuration (failover.md's slot outboxkit_public_outbox).
		prose := yamlBlockRE.ReplaceAll(text, nil)
		for _, loc := range metricRE.FindAllIndex(prose, -1) {
			name := string(prose[loc[0]:loc[1]])
			if loc[1] < len(prose) && prose[loc[1]] == '=' { // a label (outboxkit_outcome="...")
				continue
			}
			require.True(t, known[name], "%s: metric %s is not in docs/metrics.md", page, name)
		}
		cmds := pageCommands(t, page)
		require.NotEmpty(t, cmds, page)
		for _, words := range cmds {
			line := strings.Join(words, " ")
			words = slices.Clone(words)
			for i, w := range words {
				if v, isVar := sampleVars[w]; isVar {
					words[i] = v
				} else {
					require.False(t, strings.HasPrefix(w, "$"), "%s: %s: unknown variable %s", page, line, w)
				}
			}
			require.Equal(t, "outboxkit", words[0], "%s: %s", page, line)
			root := newRoot()
			cmd, rest, err := root.Find(words[1:])
			require.NoError(t, err, "%s: %s", page, line)
			require.NotEqual(t, root, cmd, "%s: %s: no such command", page, line)
			require.False(t, cmd.DisableFlagParsing, "%s: %s: flags not checked", page, line)
			for _, w := range rest {
				if !strings.HasPrefix(w, "--") {
					continue
				}
				name, _, _ := strings.Cut(w[2:], "=")
				require.NotNil(t, cmd.Flags().Lookup(name), "%s: %s: %s has no flag --%s", page, line, cmd.CommandPath(), name)
			}
			// The whole line parses (flag values of the right type, positional arguments).
			require.NoError(t, cmd.ParseFlags(rest), "%s: %s", page, line)
			if cmd.Args != nil {
				require.NoError(t, cmd.Args(cmd, cmd.Flags().Args()), "%s: %s", page, line)
			}
		}
	}
}

// runbookDB is a migrated outbox of one database, for the runbook rehearsals.
type runbookDB struct {
	opsDB
	url   string   // the $DB of the pages
	extra []string // flags after $DB (--schema)
	store opendb.Store
	db    *opendb.DB
}

func newRunbookDB(t *testing.T, new func(t testing.TB) opsDB, lanes int) runbookDB {
	d := new(t)
	ok(t, append([]string{"migrate", "--lanes", fmt.Sprint(lanes)}, d.flags...)...)
	db, err := opendb.Open(t.Context(), d.cfg)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return runbookDB{opsDB: d, url: d.flags[1], extra: d.flags[2:], store: db.Store, db: db}
}

// run runs a page's command through the built binary; it must exit 0; it returns stdout.
func (d runbookDB) run(t *testing.T, page, path string, nth int, vars map[string]string) string {
	t.Helper()
	if vars == nil {
		vars = map[string]string{}
	}
	vars["DB"] = d.url
	args := pageCmd(t, page, path, nth, vars, d.extra)
	code, out, errs := binRun(t, args...)
	require.Equal(t, 0, code, "%q: %s", args, errs)
	return out
}

// settle claims every lane under a new polling generation, fetches what is deliverable, parks
// the records of park (by ID), marks the others published (but the later records of a parked
// key) and releases the lanes.
func settle(t *testing.T, store opendb.Store, park ...string) {
	t.Helper()
	ctx := t.Context()
	pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "runbook-test"})
	require.NoError(t, err)
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "runbook-relay", Max: 64, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100})
	require.NoError(t, err)
	p := driver.SettleParams{Leases: leases}
	held := map[string]bool{} // keys with a parked record: their later records wait
	for _, r := range recs {
		switch {
		case slices.Contains(park, r.ID):
			p.Failed = append(p.Failed, driver.Failure{Seq: r.Seq, Lane: r.Lane, Error: "rejected: schema v2 required", Park: true})
			held[r.PartitionKey] = true
		case !held[r.PartitionKey]:
			p.Published = append(p.Published, r.Seq)
		}
	}
	require.NoError(t, store.Settle(ctx, p))
	require.NoError(t, store.ReleaseLanes(ctx, leases))
}

// runbookRelay writes the relay daemon's configuration (relay.yaml of the pages) for d, with an
// SQS queue of the emulator as its sink; edit, when given, changes the YAML text.
func runbookRelay(t *testing.T, d runbookDB, mode string, edit ...func(string) string) string {
	s := sqsE2ESink(t)
	schema := ""
	if d.cfg.Schema != "" {
		schema = "  schema: " + d.cfg.Schema + "\n"
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	require.NoError(t, os.WriteFile(path, fmt.Appendf(nil, `database:
  driver: %s
  dsn: %q
%smode: %s
relay:
  lease_ttl: 3s
  poll_interval: 20ms
%sshutdown_timeout: 10s
`, d.cfg.Driver, d.cfg.DSN, schema, mode, s.config), 0o600))
	for _, e := range edit {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, []byte(e(string(b))), 0o600))
	}
	return path
}

// startPageRelay starts the page's `outboxkit relay --config relay.yaml` with config.
func startPageRelay(t *testing.T, page, config string) *daemonProc {
	t.Helper()
	args := pageCmd(t, page, "relay", 0, nil, nil)
	require.Equal(t, []string{"relay", "--config", "relay.yaml"}, args)
	return startDaemon(t, config, freePort(t))
}

var runbookBackends = []struct {
	name string
	new  func(t testing.TB) opsDB
}{{"sqlite", opsSQLite}, {"postgres", opsPostgres}}

// TestRunbookRelayOutage: events written while no relay runs are pending with an age and no
// lane owner; the page's relay drains them to `pending 0`, `oldest none`, lanes owned.
func TestRunbookRelayOutage(t *testing.T) {
	const page = "relay-outage.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 4)
			writeEvents(t, d.store, "a", "b", "c", "a", "b")
			text := d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "pending    5\n")
			require.Contains(t, text, "oldest     20") // a time, with its age
			require.Contains(t, text, "lanes      4: 0 held, 0 expired, 4 free\n")

			relay := startPageRelay(t, page, runbookRelay(t, d, "polling"))
			require.Eventually(t, func() bool {
				text = d.run(t, page, "status", 2, nil) // "how to check it worked"
				return strings.Contains(text, "pending    0\n") && strings.Contains(text, "oldest     none\n") &&
					!strings.Contains(text, ": 0 held")
			}, 20*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
			require.Equal(t, 5, relay.stop(t))
		})
	}
}

// TestRunbookBrokerAmbiguity: a relay whose broker does not answer records failures
// (outboxkit_relay_failures_total), never marks the events published, and parks them once the
// retry deadline is over; after the page's parked and unpark --all, the page's relay with a
// longer deadline and a broker that answers delivers them: parked none, pending 0.
func TestRunbookBrokerAmbiguity(t *testing.T) {
	const page = "broker-ambiguity.md"
	t.Parallel()
	d := newRunbookDB(t, opsSQLite, 2)
	ids := writeEvents(t, d.store, "a", "b", "a")
	endpoint := testkit.Need(t, testkit.AWSEndpoint)
	dead := "http://" + freePort(t) // nothing listens: every send fails
	config := runbookRelay(t, d, "polling", func(y string) string {
		return strings.Replace(strings.Replace(y, "endpoint: "+endpoint, "endpoint: "+dead, 1),
			"relay:\n", "relay:\n  retry:\n    initial: 50ms\n    max: 100ms\n    deadline: 200ms\n", 1)
	})
	broken := startDaemon(t, config, freePort(t))
	var text string
	require.Eventually(t, func() bool {
		text = d.run(t, page, "parked", 0, nil)
		return strings.Count(text, "seq=") == 2 // the first event of each key; the second a waits
	}, 30*time.Second, 100*time.Millisecond, "parked:\n%s\nrelay:\n%s", text, broken.stderr)
	require.Greater(t, metric(broken.scrape(), "outboxkit_relay_failures_total"), 0.0)
	require.Greater(t, metric(broken.scrape(), "outboxkit_relay_send_errors_total"), 0.0)
	require.Equal(t, 0, broken.stop(t), "nothing was marked published")
	text = d.run(t, page, "status", 0, nil)
	require.Contains(t, text, "parked     2\n")
	require.Contains(t, text, "blocked    1 ")

	require.Equal(t, "unparked=2 keys=2\n", d.run(t, page, "unpark", 0, nil))
	args := pageCmd(t, page, "relay", 0, nil, nil)
	require.Equal(t, []string{"relay", "--config", "relay.yaml", "--relay-retry-deadline", "72h"}, args)
	relay := startDaemon(t, runbookRelay(t, d, "polling"), freePort(t), args[3:]...)
	require.Eventually(t, func() bool {
		text = d.run(t, page, "status", 1, nil)
		return strings.Contains(text, "pending    0\n") && strings.Contains(text, "parked     0\n")
	}, 20*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
	require.Equal(t, "none\n", d.run(t, page, "parked", 1, nil))
	require.Equal(t, len(ids), relay.stop(t))
}

// TestRunbookDatabaseOverload: the page's lighter relay (one worker, one batch in flight, a
// longer poll interval, stats interval and lease) starts and drains a backlog that the page's
// status shows.
func TestRunbookDatabaseOverload(t *testing.T) {
	const page = "database-overload.md"
	t.Parallel()
	d := newRunbookDB(t, opsSQLite, 4)
	writeEvents(t, d.store, "a", "b", "c", "d")
	require.Contains(t, d.run(t, page, "status", 0, nil), "pending    4\n")
	args := pageCmd(t, page, "relay", 0, nil, nil)
	require.Equal(t, []string{"relay", "--config", "relay.yaml"}, args[:3])
	relay := startDaemon(t, runbookRelay(t, d, "polling"), freePort(t), args[3:]...)
	var text string
	require.Eventually(t, func() bool {
		text = d.run(t, page, "status", 0, nil)
		return strings.Contains(text, "pending    0\n")
	}, 20*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
	require.Equal(t, 4, relay.stop(t))
}

// TestRunbookStuckClaims: a crashed relay's lease (owner "crashed", expired) and a stalled
// relay's valid one (owner "stalled") show in the lane table, the first as (expired), with the
// events of their lanes pending; the page's lanes reset ends the stalled owner's lease (its
// settle is refused afterwards) and the page's relay takes both lanes over with a new
// generation and drains them; audit lists the reset.
func TestRunbookStuckClaims(t *testing.T) {
	const page = "stuck-claims.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 2)
			ctx := t.Context()
			writeEvents(t, d.store, "a", "b", "c")
			pub, err := d.store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "crashed"})
			require.NoError(t, err)
			crashed, err := d.store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "crashed", Max: 1, TTL: 500 * time.Millisecond})
			require.NoError(t, err)
			stalled, err := d.store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "stalled", Max: 1, TTL: time.Hour})
			require.NoError(t, err)
			require.Len(t, crashed, 1)
			require.Len(t, stalled, 1)
			before := map[int]int64{crashed[0].Lane: crashed[0].Generation, stalled[0].Lane: stalled[0].Generation}
			recs, err := d.store.Fetch(ctx, driver.FetchParams{Leases: stalled, Limit: 10})
			require.NoError(t, err)
			require.NotEmpty(t, recs)
			time.Sleep(600 * time.Millisecond) // the crashed relay's lease expires

			text := d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "pending    3\n")
			require.Contains(t, text, "lanes      2: 1 held, 1 expired, 0 free\n")
			require.Contains(t, text, "\n  owner crashed: 0 held, 1 expired\n  owner stalled: 1 held\n")
			require.NotContains(t, text, "holder crashed", "the holder shown is live")
			require.Regexp(t, `\n  \d+ +crashed +\d+ +\S+ \(expired\)\n`, text, "--lanes: one row per lane")
			require.Equal(t, 1, strings.Count(text, "(expired)"), text)
			var st statusReport
			require.NoError(t, json.Unmarshal([]byte(d.run(t, page, "status", 1, nil)), &st))
			for _, l := range st.Lanes {
				if l.Owner == "crashed" {
					require.False(t, l.LeaseUntil.After(time.Now()))
				} else {
					require.Equal(t, "stalled", l.Owner)
					require.True(t, l.LeaseUntil.After(time.Now()))
				}
			}

			require.Equal(t, "reset=1\n", d.run(t, page, "lanes reset", 0, map[string]string{"OWNER": "stalled"}))
			err = d.store.Settle(ctx, driver.SettleParams{Leases: stalled, Published: []int64{recs[0].Seq}})
			require.True(t, errors.As(err, new(*driver.LanesLostError)), "the stalled owner's settle is refused: %v", err)

			relay := startPageRelay(t, page, runbookRelay(t, d, "polling"))
			require.Eventually(t, func() bool {
				text = d.run(t, page, "status", 2, nil)
				// The relay joins the polling generation (taken by crashed) and owns the lanes: the
				// live holder shown is the relay.
				return strings.Contains(text, "pending    0\n") && !strings.Contains(text, "crashed") &&
					!strings.Contains(text, "stalled") && !strings.Contains(text, "(expired)") && strings.Contains(text, "lanes      2: 2 held")
			}, 20*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
			require.NoError(t, json.Unmarshal([]byte(d.run(t, page, "status", 1, nil)), &st))
			for _, l := range st.Lanes {
				require.NotEqual(t, "crashed", l.Owner)
				require.Greater(t, l.Generation, before[l.Lane], "a takeover gives the lane a new generation")
			}
			require.Equal(t, 3, relay.stop(t))
			audit := d.run(t, page, "audit", 0, nil)
			require.Regexp(t, `lanes reset\s+1\s+\{"owner":"stalled"\}`, audit)
		})
	}
}

// TestRunbookSchemaRejection: a rejected event is parked and blocks the later event of its key;
// the page's status and parked show it with the broker's error; its unpark releases the key,
// after which parked says none, status counts nothing parked or blocked, and audit lists it.
func TestRunbookSchemaRejection(t *testing.T) {
	const page = "schema-rejection.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 4)
			ids := writeEvents(t, d.store, "order-1", "order-1", "order-2")
			settle(t, d.store, ids[0])

			text := d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "parked     1\n")
			require.Contains(t, text, "blocked    1 ")
			parked := d.run(t, page, "parked", 0, nil)
			require.Contains(t, parked, "id="+ids[0]+` key="order-1"`)
			require.Contains(t, parked, `error="rejected: schema v2 required"`)

			require.Equal(t, "unparked=1 keys=1\n", d.run(t, page, "unpark", 0, map[string]string{"KEY": "order-1"}))
			require.Equal(t, "unparked=0 keys=0\n", d.run(t, page, "unpark", 1, nil), "--all: nothing left")

			require.Equal(t, "none\n", d.run(t, page, "parked", 1, nil))
			text = d.run(t, page, "status", 1, nil)
			require.Contains(t, text, "parked     0\n")
			require.Contains(t, text, "blocked    0 ")
			require.Contains(t, text, "pending    2\n", "the key's events are deliverable again")
			audit := d.run(t, page, "audit", 0, nil)
			require.Contains(t, audit, "unpark")
			require.Contains(t, audit, `"order-1"`)
		})
	}
}

// TestRunbookCleanupWatermark: a parked first event holds cleanup's watermark back, so cleanup
// deletes none of the later published events; after the page's unpark and a publish, its
// cleanup deletes them all and writes an audit row.
func TestRunbookCleanupWatermark(t *testing.T) {
	const page = "cleanup-watermark.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 1)
			ids := writeEvents(t, d.store, "a", "b", "b", "c")
			settle(t, d.store, ids[0])
			vars := map[string]string{"KEY": "a", "RETENTION": "1s"}
			time.Sleep(1100 * time.Millisecond) // the published events are older than the retention

			text := d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "parked     1\n")
			require.Contains(t, text, "published  3 ")
			require.Contains(t, d.run(t, page, "parked", 0, nil), `key="a"`)
			require.Equal(t, "deleted=0\n", d.run(t, page, "cleanup", 0, nil), "24h: nothing old enough")
			require.Equal(t, "deleted=0\n", d.run(t, page, "cleanup", 1, vars), "the watermark holds them")

			require.Equal(t, "unparked=1 keys=1\n", d.run(t, page, "unpark", 0, vars))
			settle(t, d.store) // the relay publishes the released event
			time.Sleep(1100 * time.Millisecond)
			require.Equal(t, "deleted=4\n", d.run(t, page, "cleanup", 1, vars))
			text = d.run(t, page, "status", 1, nil)
			require.Contains(t, text, "parked     0\n")
			require.Contains(t, text, "oldest     none\n")
			audit := d.run(t, page, "audit", 0, nil)
			require.Contains(t, audit, `cleanup`)
			require.Contains(t, audit, `{"retention":"1s"}`)
		})
	}
}

// TestRunbookReplay: the page's replay by ids puts published events back to pending (status
// counts them, audit lists the replay); by key it is refused while the key has unpublished
// events, and replays them once they are published again.
func TestRunbookReplay(t *testing.T) {
	const page = "replay-beyond-retention.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 2)
			ids := writeEvents(t, d.store, "k", "k", "j")
			settle(t, d.store)
			vars := map[string]string{"IDS": ids[0] + "," + ids[1], "KEY": "k"}

			require.Equal(t, "replayed=2\n", d.run(t, page, "replay", 0, vars))
			require.Contains(t, d.run(t, page, "status", 0, nil), "pending    2\n")
			args := pageCmd(t, page, "replay", 1, map[string]string{"DB": d.url, "KEY": "k"}, d.extra)
			code, _, errs := binRun(t, args...)
			require.Equal(t, 1, code, errs)
			require.Contains(t, errs, "partition key has unpublished events")

			settle(t, d.store) // the relay sends them again
			require.Contains(t, d.run(t, page, "status", 0, nil), "pending    0\n")
			require.Equal(t, "replayed=2\n", d.run(t, page, "replay", 1, vars))
			audit := d.run(t, page, "audit", 0, nil)
			require.Equal(t, 2, strings.Count(audit, "replay"), audit)
			require.Contains(t, audit, ids[0])
			require.Contains(t, audit, `"key":"k"`)
		})
	}
}

// TestRunbookCDCLogLoss: on PostgreSQL (a real slot) and MariaDB, the page's cdc release drops
// the slot and the checkpoint with an audit row (status then says checkpoint none; a second
// release finds nothing; refused while a relay holds a lane), and the page's CDC relay then backfills the pending events and
// checkpoints anew; the page's alternative, backfill with the relay's configuration, publishes
// what was written since and checkpoints anew with its audit row; SQLite has no CDC: one line,
// exit 1.
func TestRunbookCDCLogLoss(t *testing.T) {
	const page = "cdc-log-loss.md"
	for _, b := range []struct {
		name string
		new  func(t testing.TB) opsDB
	}{{"postgres", opsPostgres}, {"mysql", opsMySQL}, {"sqlite", opsSQLite}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 2)
			ctx := t.Context()
			if b.name == "sqlite" {
				args := pageCmd(t, page, "cdc release", 0, map[string]string{"DB": d.url}, d.extra)
				code, out, errs := binRun(t, args...)
				require.Equal(t, 1, code, out)
				require.Equal(t, "outboxkit cdc release: "+ErrNoCDC.Error()+"\n", errs)
				return
			}
			src, err := d.db.ChangeSource()
			require.NoError(t, err)
			cp := driver.Checkpoint{Source: "mysql:test", Position: "file:mysql-bin.000001:4"}
			slots := func() int { return 0 }
			if b.name == "postgres" {
				// A real slot at the head of the log, as a CDC relay leaves it.
				slot := src.(slotNamer).Slot()
				slots, _ = slotCounter(t, slot)
				stream, pos, err := src.Start(ctx)
				require.NoError(t, err)
				require.NoError(t, stream.Close())
				cp.Position = pos
				cp.Source, err = src.Identity(ctx)
				require.NoError(t, err)
				require.Eventually(t, func() bool { return slots() == 1 }, 5*time.Second, 20*time.Millisecond)
			}
			pub, err := d.store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc-relay"})
			require.NoError(t, err)
			cp.Generation = pub.Generation
			require.NoError(t, d.store.(driver.CheckpointStore).SaveCheckpoint(ctx, cp))
			writeEvents(t, d.store, "a", "b")

			text := d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "checkpoint position "+cp.Position)
			require.Contains(t, text, "pending    2\n")
			if b.name == "postgres" {
				require.Regexp(t, `\nretention  \d+ bytes retained \(slot `+src.(slotNamer).Slot()+`;`, text)
			} else {
				require.Regexp(t, `\nretention  \d+ bytes retained, \d+ bytes of headroom`, text)
			}

			// Refused, changing nothing, while the relay holds a lane (step 1: stop it first).
			leases, err := d.store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "cdc-relay", Max: 1, TTL: time.Hour})
			require.NoError(t, err)
			require.Len(t, leases, 1)
			args := pageCmd(t, page, "cdc release", 0, map[string]string{"DB": d.url}, d.extra)
			code, _, errs := binRun(t, args...)
			require.Equal(t, 1, code)
			require.Contains(t, errs, ErrLanesHeld.Error())
			require.Contains(t, d.run(t, page, "status", 0, nil), "checkpoint position "+cp.Position)
			require.NotContains(t, d.run(t, page, "audit", 0, nil), "cdc release")
			require.NoError(t, d.store.ReleaseLanes(ctx, leases))

			want := "released checkpoint_deleted=true\n"
			if b.name == "postgres" {
				want = "released slot=" + src.(slotNamer).Slot() + " checkpoint_deleted=true\n"
			}
			// The slot turns inactive shortly after the stream's connection closed.
			var out string
			require.Eventually(t, func() bool {
				args := pageCmd(t, page, "cdc release", 0, map[string]string{"DB": d.url}, d.extra)
				var code int
				code, out, _ = binRun(t, args...)
				return code == 0
			}, 10*time.Second, 100*time.Millisecond)
			require.Equal(t, want, out)
			require.Equal(t, 0, slots())
			require.Equal(t, strings.Replace(want, "true", "false", 1), d.run(t, page, "cdc release", 0, nil), "a second release finds nothing")
			var rj releaseJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"cdc", "release", "--output", "json", "--actor", "ops"}, d.flags...)...)), &rj))
			wantJSON := releaseJSON{}
			if b.name == "postgres" {
				wantJSON.Slot = src.(slotNamer).Slot()
			}
			require.Equal(t, wantJSON, rj)

			text = d.run(t, page, "status", 0, nil)
			require.Contains(t, text, "checkpoint none\n")
			require.Contains(t, text, "pending    2\n", "nothing is lost: the next relay backfills them")
			audit := d.run(t, page, "audit", 0, nil)
			require.Equal(t, 3, strings.Count(audit, "cdc release"), audit)
			require.Contains(t, audit, " ops ", "--actor")
			if b.name == "postgres" {
				require.Contains(t, audit, `{"slot":"`+src.(slotNamer).Slot()+`"}`)
			}
			require.Equal(t, "unparked=0 keys=0\n", d.run(t, page, "unpark", 0, nil), "nothing parked here")

			// The page's relay: without a checkpoint it backfills the pending events, then
			// checkpoints the head of the log (a new slot on PostgreSQL).
			config := runbookRelay(t, d, "cdc")
			relay := startPageRelay(t, page, config)
			require.Eventually(t, func() bool {
				text = d.run(t, page, "status", 1, nil)
				return strings.Contains(text, "pending    0\n") && strings.Contains(text, "checkpoint position ")
			}, 30*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
			require.Contains(t, relay.stderr.String(), `"cdc_relay_backfill_done"`)
			require.Equal(t, 2, relay.stop(t))
			if b.name == "postgres" {
				require.Equal(t, 1, slots(), "the relay created a new slot")
			}

			// The page's alternative: the backfill with the relay's configuration publishes
			// what was written while no relay ran and checkpoints anew, with an audit row.
			writeEvents(t, d.store, "a", "c")
			args = pageCmd(t, page, "backfill", 0, nil, nil)
			require.Equal(t, []string{"backfill", "--config", "relay.yaml"}, args)
			args[2] = config
			code, out, errs = backfillRun(t, args...)
			require.Equal(t, 0, code, errs)
			require.Regexp(t, `^backfilled published=2 checkpoint=\S+ generation=\d+\n$`, out)
			text = d.run(t, page, "status", 1, nil)
			require.Contains(t, text, "pending    0\n")
			require.Contains(t, text, "checkpoint position "+strings.Fields(strings.TrimPrefix(out, "backfilled published=2 checkpoint="))[0])
			audit = d.run(t, page, "audit", 0, nil)
			require.Regexp(t, `\sbackfill\s+2\s+\{"config":"`, audit)
			if b.name == "postgres" {
				require.Equal(t, 1, slots(), "the backfill replaced the slot")
			}
		})
	}
}

// TestRunbookFailover rehearses failover.md's CDC step and its checks on one PostgreSQL server:
// the new primary that lacks the relay's slot is played by dropping the slot while the relay is
// stopped (the Patroni failovers themselves are ./scripts/failover's). The page's relay then
// stops by itself with the position-lost error naming the slot, exit 1; the page's backfill and
// relay deliver what was written meanwhile; the page's status shows pending 0 and its reconcile
// says ok, and lists an event the outbox never got (as asynchronous replication loses one) as
// missing, exit 1.
func TestRunbookFailover(t *testing.T) {
	const page = "failover.md"
	t.Parallel()
	d := newRunbookDB(t, opsPostgres, 2)
	src, err := d.db.ChangeSource()
	require.NoError(t, err)
	slot := src.(slotNamer).Slot()
	slots, dropSlot := slotCounter(t, slot)
	// The domain's record of the events it expects (the page's --expected-sql reads it).
	expect := func(id string) {
		d.exec(t, "INSERT INTO "+d.cfg.Schema+".order_events VALUES ('"+id+"', '"+id+"', 1)")
	}
	d.exec(t, "CREATE TABLE "+d.cfg.Schema+".order_events (event_id text, order_id text, version int)")
	write := func(keys ...string) {
		for _, id := range writeEvents(t, d.store, keys...) {
			expect(id)
		}
	}

	config := runbookRelay(t, d, "cdc")
	relay := startPageRelay(t, page, config)
	write("a", "b")
	var text string
	require.Eventually(t, func() bool {
		text = d.run(t, page, "status", 0, nil)
		return strings.Contains(text, "pending    0\n") && strings.Contains(text, "checkpoint position ")
	}, 30*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
	relay.stop(t)
	require.Equal(t, 1, slots())

	// The failover: the new primary has no slot of that name; events are written meanwhile.
	require.Eventually(t, func() bool { return dropSlot() == nil && slots() == 0 }, 10*time.Second, 100*time.Millisecond)
	write("a", "c")

	// How to see it: the relay stops by itself, exit 1, naming the slot and the backfill.
	relay = startPageRelay(t, page, config)
	select {
	case err := <-relay.done:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "stderr:\n%s", relay.stderr)
		require.Equal(t, 1, exit.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay did not stop on the lost slot; stderr:\n%s", relay.stderr)
	}
	require.Contains(t, relay.stderr.String(), "cdc position lost")
	require.Contains(t, relay.stderr.String(), "replication slot "+slot+" does not exist (run Backfill)")
	require.Contains(t, d.run(t, page, "status", 0, nil), "pending    2\n", "nothing lost: the two are still pending")

	// What to do, step 3: the backfill with the relay's configuration, then the relay.
	args := pageCmd(t, page, "backfill", 0, nil, nil)
	require.Equal(t, []string{"backfill", "--config", "relay.yaml"}, args)
	args[2] = config
	code, out, errs := backfillRun(t, args...)
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `^backfilled published=2 checkpoint=\S+ generation=\d+\n$`, out)
	require.Equal(t, 1, slots(), "the backfill created the slot anew")
	relay = startPageRelay(t, page, config)
	write("b", "d")
	require.Eventually(t, func() bool {
		text = d.run(t, page, "status", 1, nil)
		return strings.Contains(text, "pending    0\n")
	}, 30*time.Second, 100*time.Millisecond, "status:\n%s\nrelay:\n%s", text, relay.stderr)
	relay.stop(t)

	// How to check it worked: reconcile, its query reading the schema's order_events.
	vars := map[string]string{"DB": d.cfg.DSN + "&search_path=" + d.cfg.Schema}
	reconcile := func() (int, string) {
		code, out, errs := binRun(t, pageCmd(t, page, "reconcile", 0, vars, d.extra)...)
		require.Contains(t, []int{0, 1}, code, "stdout %q stderr %q", out, errs)
		return code, out
	}
	code, out = reconcile()
	require.Equal(t, 0, code, out)
	require.Equal(t, "reconcile: ok expected=6 outbox=6 findings=0\n", out)
	// A transaction lost with an asynchronous primary: the domain expects an event the outbox
	// does not have.
	expect("lost-1")
	code, out = reconcile()
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "findings=1\nmissing 1: lost-1\n")
}

// slotCounter returns a count of the PostgreSQL replication slots named slot (0 or 1) and a
// drop of the slot once it is inactive (it turns inactive shortly after its relay's
// connection closed), and drops it when the test ends (the schema's cleanup does not).
func slotCounter(t *testing.T, slot string) (count func() int, drop func() error) {
	admin, err := pgx.Connect(t.Context(), testkit.Need(t, testkit.PostgresDSN))
	require.NoError(t, err)
	countIn := func(ctx context.Context) (int, error) {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
		return n, err
	}
	dropIn := func(ctx context.Context) error {
		_, err := admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		return err
	}
	t.Cleanup(func() {
		bg := context.Background()
		for range 50 {
			if left, err := countIn(bg); err != nil || left == 0 {
				break
			}
			_ = dropIn(bg)
			time.Sleep(100 * time.Millisecond)
		}
		_ = admin.Close(bg)
	})
	count = func() int {
		n, err := countIn(t.Context())
		require.NoError(t, err)
		return n
	}
	return count, func() error { return dropIn(t.Context()) }
}

// TestRunbookDuplicateStorm: lanes that change hands again and again (two owners whose leases
// expire before the other's next claim) show as lane generations that grow between two looks of
// the page's status; once the churn stops and the page's relay runs with its longer lease,
// every event is delivered and the generations stay put between two looks.
func TestRunbookDuplicateStorm(t *testing.T) {
	const page = "duplicate-storm.md"
	for _, b := range runbookBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := newRunbookDB(t, b.new, 2)
			ctx := t.Context()
			writeEvents(t, d.store, "a", "b", "c")
			pub, err := d.store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "flapping"})
			require.NoError(t, err)
			generations := func() map[int]int64 {
				var st statusReport
				require.NoError(t, json.Unmarshal([]byte(d.run(t, page, "status", 0, nil)), &st))
				g := map[int]int64{}
				for _, l := range st.Lanes {
					g[l.Lane] = l.Generation
				}
				return g
			}
			flap := func() {
				for _, owner := range []string{"flap-a", "flap-b"} {
					leases, err := d.store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: owner, Max: 2, TTL: 10 * time.Millisecond})
					require.NoError(t, err)
					require.Len(t, leases, 2, "the other owner's lease has expired")
					time.Sleep(20 * time.Millisecond)
				}
			}
			flap()
			first := generations()
			flap()
			second := generations()
			require.Len(t, second, 2)
			for lane, g := range second {
				require.Greater(t, g, first[lane], "lane %d changed hands between the two looks", lane)
			}

			args := pageCmd(t, page, "relay", 0, nil, nil)
			require.Equal(t, []string{"relay", "--config", "relay.yaml", "--relay-lease-ttl", "60s"}, args)
			relay := startDaemon(t, runbookRelay(t, d, "polling"), freePort(t), args[3:]...)
			require.Eventually(t, func() bool {
				st, err := d.store.Stats(ctx)
				require.NoError(t, err)
				return st.Pending == 0
			}, 20*time.Second, 100*time.Millisecond, "relay:\n%s", relay.stderr)
			look := generations()
			time.Sleep(300 * time.Millisecond) // many relay polls, no lane move
			require.Equal(t, look, generations(), "the generations stay put between two looks")
			for lane, g := range look {
				require.Greater(t, g, second[lane], "the relay took lane %d over", lane)
			}
			require.Equal(t, 3, relay.stop(t))
		})
	}
}
