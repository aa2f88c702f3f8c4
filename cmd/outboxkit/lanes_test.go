package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// TestOpsLanesReset, on each database: `lanes reset` by owner, lanes and --all ends the held
// leases at once (status shows them free with a higher generation), so the old owner's settle
// is refused and marks nothing while another worker claims the lanes at once; other owners'
// lanes are untouched; each reset writes one audit row counting the lanes changed; a bad
// selection is a usage error (exit 2) before the database is opened, a lane beyond the lane
// count exit 1, both changing nothing; without the audit table the reset rolls back.
func TestOpsLanesReset(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			with := func(cmd ...string) []string { return append(cmd, d.flags...) }
			fails(t, 1, "no migrated outbox", with("lanes", "reset", "--all")...)
			ok(t, with("migrate", "--lanes", "4")...)
			fails(t, 2, "give a subcommand: reset", "lanes")
			for _, args := range [][]string{{}, {"--lane", "1", "--owner", "x"}, {"--owner", "x", "--all"}} {
				fails(t, 2, "give one of --lane, --owner and --all", with(append([]string{"lanes", "reset"}, args...)...)...)
			}
			fails(t, 2, "--lane: want 0 to 4095, got -1", with("lanes", "reset", "--lane", "-1")...)
			fails(t, 1, "lane 4 is outside 0 to 3", with("lanes", "reset", "--lane", "4")...)

			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			store, ctx := db.Store, t.Context()
			writeEvents(t, store, "a", "b", "c", "d", "e", "f", "g", "h")
			pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w"})
			require.NoError(t, err)
			claim := func(owner string, max int) []driver.Lease {
				ls, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: owner, Max: max, TTL: time.Hour})
				require.NoError(t, err)
				return ls
			}
			stalled, other := claim("stalled", 2), claim("other", 1)
			require.Len(t, stalled, 2)
			require.Len(t, other, 1)
			recs, err := store.Fetch(ctx, driver.FetchParams{Leases: stalled, Limit: 100})
			require.NoError(t, err)
			require.NotEmpty(t, recs)
			var seqs []int64
			for _, r := range recs {
				seqs = append(seqs, r.Seq)
			}
			pending := len(states(t, store))

			code, out, errs := binRun(t, with("lanes", "reset", "--owner", "stalled", "--actor", "alice")...)
			require.Equal(t, 0, code, errs)
			require.Equal(t, "reset=2\n", out)
			var st statusReport
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("status", "--output", "json")...)), &st))
			for _, l := range st.Lanes {
				switch l.Lane {
				case 0, 1:
					require.Empty(t, l.Owner, "lane %d", l.Lane)
					require.Equal(t, stalled[l.Lane].Generation+1, l.Generation, "lane %d", l.Lane)
					require.False(t, l.LeaseUntil != nil && l.LeaseUntil.After(time.Now()), "lane %d: lease expired", l.Lane)
				case 2:
					require.Equal(t, "other", l.Owner)
					require.Equal(t, other[0].Generation, l.Generation)
				}
			}
			// The stalled owner's settle is refused; another worker claims the lanes at once.
			err = store.Settle(ctx, driver.SettleParams{Leases: stalled, Published: seqs})
			var lost *driver.LanesLostError
			require.True(t, errors.As(err, &lost), "%v", err)
			require.Equal(t, []int{0, 1}, lost.Lanes)
			require.Len(t, states(t, store), pending)
			for _, s := range states(t, store) {
				require.Equal(t, "pending", s)
			}
			next := claim("next", 4)
			require.Equal(t, []int{0, 1, 3}, []int{next[0].Lane, next[1].Lane, next[2].Lane})
			require.NoError(t, store.Settle(ctx, driver.SettleParams{Leases: next[:2], Published: seqs}))

			require.Equal(t, "{\n  \"reset\": 2\n}\n", ok(t, with("lanes", "reset", "--lane", "2", "--lane", "3", "--output", "json")...))
			require.Equal(t, "reset=2\n", ok(t, with("lanes", "reset", "--all")...), "next's lanes 0 and 1")
			require.Equal(t, "reset=0\n", ok(t, with("lanes", "reset", "--lane", "0,1")...), "free lanes")

			log, got := auditRows(t, with("audit", "--output", "json")...)
			require.Equal(t, []string{
				`lanes reset {"owner":"stalled"} 2`, `lanes reset {"lanes":[2,3]} 2`,
				`lanes reset {"all":true} 2`, `lanes reset {"lanes":[0,1]} 0`,
			}, got)
			require.Equal(t, "alice", log[0].Actor)
			require.Contains(t, ok(t, with("audit")...), "lanes reset")

			// No audit table: the reset rolls back with its failed audit row.
			held := claim("held", 1)
			require.Len(t, held, 1)
			audit := "outbox_audit"
			if d.driver == "postgres" {
				audit = `"` + d.cfg.Schema + `".outbox_audit`
			}
			d.exec(t, "DROP TABLE "+audit)
			fails(t, 1, "write audit: database not migrated", with("lanes", "reset", "--all")...)
			renewed, err := store.RenewLanes(ctx, driver.RenewParams{Generation: pub.Generation, Leases: held, TTL: time.Hour})
			require.NoError(t, err)
			require.Len(t, renewed, 1, "the lease is still held")
			require.False(t, strings.Contains(ok(t, with("status")...), ": 0 held"))
		})
	}
}

// TestOpsLanesResize, on each database: `lanes resize --to N` changes the lane count of an
// existing outbox (status lists N lanes), moves every unpublished event to its key's lane under
// N and prints `lanes=N moved=M`, M the events whose lane changed, with one audit row
// `{"lanes":N}` counting them; the same count changes nothing and writes no audit row; a count
// outside 1 to 4096 is a usage error (exit 2) before the database is opened; `migrate` without
// --lanes afterwards keeps the new count.
func TestOpsLanesResize(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			with := func(cmd ...string) []string { return append(cmd, d.flags...) }
			for _, to := range []string{"0", "4097", "-3"} {
				fails(t, 2, "--to: want 1 to 4096, got "+to, with("lanes", "resize", "--to", to)...)
			}
			fails(t, 2, "--to: want 1 to 4096, got 0", with("lanes", "resize")...)
			fails(t, 1, "no migrated outbox", with("lanes", "resize", "--to", "8")...)
			ok(t, with("migrate", "--lanes", "4")...)
			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
			writeEvents(t, db.Store, keys...)
			want := 0
			for _, k := range keys {
				if driver.LaneOf(k, 4) != driver.LaneOf(k, 16) {
					want++
				}
			}
			require.NotZero(t, want)
			require.Equal(t, "lanes=16 moved="+itoa(int64(want))+"\n", ok(t, with("lanes", "resize", "--to", "16", "--actor", "alice")...))
			recs, err := db.Store.List(t.Context(), driver.ListParams{State: driver.StateAll, Limit: 100})
			require.NoError(t, err)
			require.Len(t, recs, len(keys))
			for _, r := range recs {
				require.Equal(t, driver.LaneOf(r.PartitionKey, 16), r.Lane, "key %s", r.PartitionKey)
			}
			var st statusReport
			require.NoError(t, json.Unmarshal([]byte(ok(t, with("status", "--output", "json")...)), &st))
			require.Len(t, st.Lanes, 16)
			require.Equal(t, "{\n  \"lanes\": 16,\n  \"moved\": 0\n}\n", ok(t, with("lanes", "resize", "--to", "16", "--output", "json")...), "same count")
			writeEvents(t, db.Store, "m")
			require.Equal(t, "lanes=1 moved="+itoa(int64(len(keys)+1-countLane0(keys, "m")))+"\n", ok(t, with("lanes", "resize", "--to", "1")...))
			ok(t, with("migrate")...) // the recorded count stands

			log, got := auditRows(t, with("audit", "--output", "json")...)
			require.Equal(t, []string{
				`lanes resize {"lanes":16} ` + itoa(int64(want)),
				`lanes resize {"lanes":1} ` + itoa(int64(len(keys)+1-countLane0(keys, "m"))),
			}, got)
			require.Equal(t, "alice", log[0].Actor)
		})
	}
}

// countLane0 counts the keys whose lane under 16 lanes is 0 (they stay put on a resize to 1).
func countLane0(keys []string, more ...string) int {
	n := 0
	for _, k := range append(append([]string(nil), keys...), more...) {
		if driver.LaneOf(k, 16) == 0 {
			n++
		}
	}
	return n
}
