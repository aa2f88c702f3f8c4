package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// binRun runs the built binary and returns its exit status, stdout and stderr.
func binRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(daemonBinary(t), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, isExit := err.(*exec.ExitError); isExit {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// publishAll takes a polling generation (once), fetches every deliverable record of the one
// lane and settles them published; it returns their IDs in delivery order.
func publishAll(t *testing.T, store opendb.Store) []string {
	t.Helper()
	ctx := t.Context()
	pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "audit-test"})
	require.NoError(t, err)
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 1, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, leases, 1)
	recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 100})
	require.NoError(t, err)
	var ids []string
	p := driver.SettleParams{Leases: leases}
	for _, r := range recs {
		ids = append(ids, r.ID)
		p.Published = append(p.Published, r.Seq)
	}
	require.NoError(t, store.Settle(ctx, p))
	require.NoError(t, store.ReleaseLanes(ctx, leases))
	return ids
}

// states returns "pending" or "published" for each ID, and how many rows the outbox holds.
func states(t *testing.T, store opendb.Store) map[string]string {
	t.Helper()
	recs, err := store.List(t.Context(), driver.ListParams{State: driver.StateAll, Limit: 1000})
	require.NoError(t, err)
	out := map[string]string{}
	for _, r := range recs {
		out[r.ID] = "pending"
		if !r.PublishedAt.IsZero() {
			out[r.ID] = "published"
		}
	}
	return out
}

// TestOpsReplayAudit, on each database: replay by IDs and by key puts published events back
// to pending in their original order (the relay's next fetch delivers them in seq order) and
// holds cleanup's watermark back; it is refused, changing nothing and auditing nothing, for
// unknown IDs, for a key with unpublished events and under a CDC publisher; replay, unpark and
// an audited cleanup each write one audit row, listed by `audit`; when the audit row cannot be
// written, the change rolls back.
func TestOpsReplayAudit(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			with := func(cmd ...string) []string { return append(cmd, d.flags...) }
			for _, cmd := range [][]string{{"replay", "--ids", "x"}, {"audit"}} {
				fails(t, 1, "no migrated outbox", with(cmd...)...)
			}
			ok(t, with("migrate", "--lanes", "1")...)
			require.Contains(t, d.tables(t), "outbox_audit")
			require.Equal(t, "none\n", ok(t, with("audit")...))

			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			store := db.Store
			ids := writeEvents(t, store, "a", "b", "a") // a1, b1, a2
			a1, b1, a2 := ids[0], ids[1], ids[2]
			require.Equal(t, ids, publishAll(t, store))

			// Through the built binary: replayed in order, audited with --actor.
			code, out, errs := binRun(t, with("replay", "--ids", a2+","+a1, "--actor", "alice")...)
			require.Equal(t, 0, code, errs)
			require.Equal(t, "replayed=2\n", out)
			require.Equal(t, map[string]string{a1: "pending", b1: "published", a2: "pending"}, states(t, store))

			// Refusals: one line, exit 1, nothing changed, nothing audited.
			code, out, errs = binRun(t, with("replay", "--ids", b1+",nope")...)
			require.Equal(t, 1, code)
			require.Empty(t, out)
			require.Equal(t, 1, strings.Count(errs, "\n"), errs)
			require.Contains(t, errs, "no such published event: unknown or pruned: nope")
			fails(t, 1, "partition key has unpublished events", with("replay", "--ids", a1)...)
			fails(t, 1, "partition key has unpublished events", with("replay", "--key", "a", "--since", "1h")...)
			fails(t, 1, "no such published event", with("replay", "--key", "c", "--since", "1h")...)
			require.Equal(t, map[string]string{a1: "pending", b1: "published", a2: "pending"}, states(t, store))

			// The watermark: b1 was published after the replayed a1, so cleanup keeps it.
			require.Equal(t, "deleted=0\n", ok(t, with("cleanup", "--retention", "1ns", "--actor", "bob")...))
			// The relay sends the replayed events again in their original order.
			require.Equal(t, []string{a1, a2}, publishAll(t, store))

			// By key and time: both events of a.
			require.Equal(t, "replayed=2\n", ok(t, with("replay", "--key", "a", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--actor", "carol")...))
			require.Equal(t, []string{a1, a2}, publishAll(t, store))
			require.Equal(t, "unparked=0 keys=0\n", ok(t, with("unpark", "--all", "--actor", "dave")...))
			// The default retention is not audited.
			require.Equal(t, "deleted=0\n", ok(t, with("cleanup")...))

			var log []auditJSON
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("audit", "--output", "json")...)), &log))
			require.Len(t, log, 4)
			type row struct{ actor, command, args string }
			var got []row
			for i, e := range log {
				var args bytes.Buffer
				require.NoError(t, json.Compact(&args, e.Arguments))
				got = append(got, row{e.Actor, e.Command, args.String()})
				require.WithinDuration(t, time.Now(), e.At, time.Minute)
				if i > 0 {
					require.Greater(t, e.ID, log[i-1].ID)
				}
			}
			since := got[2].args
			require.Equal(t, []row{
				{"alice", "replay", `{"ids":["` + a2 + `","` + a1 + `"]}`},
				{"bob", "cleanup", `{"retention":"1ns"}`},
				{"carol", "replay", since},
				{"dave", "unpark", `{"all":true,"keys":[]}`},
			}, got)
			require.Contains(t, since, `"key":"a","since":"`)
			require.Equal(t, []int64{2, 0, 2, 0}, []int64{log[0].Rows, log[1].Rows, log[2].Rows, log[3].Rows})
			text := ok(t, with("audit", "--limit", "2")...)
			require.Equal(t, 3, strings.Count(text, "\n"), text) // header and the latest two
			require.Contains(t, text, "carol")
			require.NotContains(t, text, "alice")
			require.Equal(t, "none\n", ok(t, with("audit", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))...))
			require.Len(t, func() []auditJSON {
				var l []auditJSON
				require.NoError(t, json.Unmarshal([]byte(ok(t, with("audit", "--since", "1h", "--output", "json")...)), &l))
				return l
			}(), 4)

			// A CDC publisher: replay refused (the CDC relay would not see the rows again).
			if d.driver != "sqlite" {
				_, err := store.AcquireGeneration(t.Context(), driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc-test"})
				require.NoError(t, err)
				fails(t, 1, "CDC relay", with("replay", "--ids", b1)...)
				_, err = store.AcquireGeneration(t.Context(), driver.AcquireParams{Kind: driver.KindPolling, Holder: "audit-test"})
				require.NoError(t, err)
			}
			// No audit table: the replay rolls back with its failed audit row.
			audit := "outbox_audit"
			if d.driver == "postgres" {
				audit = `"` + d.cfg.Schema + `".outbox_audit`
			}
			d.exec(t, "DROP TABLE "+audit)
			fails(t, 1, "replay", with("replay", "--ids", b1)...)
			require.Equal(t, "published", states(t, store)[b1])
		})
	}
}

// TestReadmeOperatorCommands: every command of docs/operations.md's first block exists, and every flag
// the block shows is one of that command's own (its -h lists it).
func TestReadmeOperatorCommands(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	ops := string(page)
	_, block, found := strings.Cut(ops, "\n```\n")
	require.True(t, found)
	block, _, _ = strings.Cut(block, "\n```\n")
	lines := strings.Split(block, "\n")
	require.GreaterOrEqual(t, len(lines), 9)
	flagRE := regexp.MustCompile(`--[a-z]+`)
	for _, line := range lines {
		line, _, _ = strings.Cut(line, "#")
		words := strings.Fields(line)
		require.Equal(t, "outboxkit", words[0], line)
		cmd := []string{words[1]}
		if len(words) > 2 && (words[2] == "sql" || words[2] == "release" || words[2] == "reset" || words[2] == "resize" || words[2] == "prune") {
			cmd = append(cmd, words[2])
		}
		help := ok(t, append(cmd, "-h")...)
		for _, f := range flagRE.FindAllString(line, -1) {
			require.Contains(t, help, f+" ", "%s: %s", cmd, f)
		}
	}
}

// auditRows runs `outboxkit audit --output json` with args and returns its rows, oldest first,
// decoded and each as "command arguments rows_affected" with the arguments compacted.
func auditRows(t *testing.T, args ...string) ([]auditJSON, []string) {
	t.Helper()
	var log []auditJSON
	require.NoError(t, json.Unmarshal([]byte(ok(t, args...)), &log))
	var got []string
	for _, e := range log {
		var a bytes.Buffer
		require.NoError(t, json.Compact(&a, e.Arguments))
		got = append(got, e.Command+" "+a.String()+" "+itoa(e.Rows))
	}
	return log, got
}

// audit's help names every command that writes an audit row (each auditEntry call of this
// package's sources).
func TestAuditHelpNamesEveryAuditedCommand(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	callRE := regexp.MustCompile(`auditEntry\([^,()]+, "([a-z ]+)"`)
	help := ok(t, "audit", "-h")
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range callRE.FindAllStringSubmatch(string(src), -1) {
			require.Contains(t, help, m[1], "%s: audit -h does not name %q", f, m[1])
			n++
		}
	}
	require.GreaterOrEqual(t, n, 8)
}
