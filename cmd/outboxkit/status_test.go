package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/opendb"
)

// writeTo writes events to the given destinations (one event each, key "k<i>") through the
// adapter's own transaction type, in transactions of at most 1,000.
func writeTo(t testing.TB, store opendb.Store, dests ...string) {
	t.Helper()
	ctx := t.Context()
	for len(dests) > 0 {
		n := min(len(dests), 1000)
		evs := make([]core.Event, n)
		for i, d := range dests[:n] {
			evs[i] = core.Event{AggregateType: "order", AggregateID: "a", Type: "order.changed", PartitionKey: "k" + itoa(int64(i%7)), Destination: d, Payload: []byte(`{}`)}
		}
		dests = dests[n:]
		var err error
		switch s := store.(type) {
		case *postgres.Store[pgx.Tx]:
			err = writeIn(ctx, s, s, evs)
		case *mysql.Store:
			err = writeIn(ctx, s, s, evs)
		case *sqlite.Store:
			err = writeIn(ctx, s, s, evs)
		default:
			t.Fatalf("no writer for %T", store)
		}
		require.NoError(t, err)
	}
}

func writeIn[TTx any](ctx context.Context, tr driver.Transactor[TTx], st driver.OutboxStore[TTx], evs []core.Event) error {
	ob, err := core.NewOutbox(ctx, st, nil)
	if err != nil {
		return err
	}
	return tr.InTx(ctx, func(ctx context.Context, tx TTx) error {
		_, err := ob.Write(ctx, tx, evs...)
		return err
	})
}

// publishSome marks the first n pending records published, as a polling relay does.
func publishSome(t testing.TB, store opendb.Store, n int) {
	t.Helper()
	ctx := t.Context()
	pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "status-test"})
	require.NoError(t, err)
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 1, TTL: time.Minute})
	require.NoError(t, err)
	for n > 0 {
		recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: min(n, 1000)})
		require.NoError(t, err)
		require.Len(t, recs, min(n, 1000))
		p := driver.SettleParams{Leases: leases}
		for _, r := range recs {
			p.Published = append(p.Published, r.Seq)
		}
		require.NoError(t, store.Settle(ctx, p))
		n -= len(recs)
	}
	require.NoError(t, store.ReleaseLanes(ctx, leases))
}

func statusJSON(t testing.TB, flags []string) statusReport {
	t.Helper()
	var st statusReport
	require.NoError(t, json.Unmarshal([]byte(ok(t, append([]string{"status", "--output", "json"}, flags...)...)), &st))
	return st
}

// TestStatusDetails, on each database: status breaks the pending events down by destination
// (over the oldest 10,000 of them, saying so beyond), shows the publish rate of the last minute
// where an index serves it (SQLite's on published_at, PostgreSQL's settle log; absent on
// MySQL), and the CDC checkpoint's age and the log retained for it (PostgreSQL: the slot the
// checkpoint names; MySQL: binary log bytes and headroom), or why that is unknown.
func TestStatusDetails(t *testing.T) {
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			d := b.new(t)
			ok(t, append([]string{"migrate", "--lanes", "1"}, d.flags...)...)
			db, err := opendb.Open(ctx, d.cfg)
			require.NoError(t, err)
			defer db.Close()
			store := db.Store

			st := statusJSON(t, d.flags)
			require.Equal(t, destinationsJSON{Counts: []destinationJSON{}}, st.Destinations)
			require.Contains(t, ok(t, append([]string{"status"}, d.flags...)...), "destinations 0\n")

			writeTo(t, store, "audit", "billing", "billing", "", "billing")
			publishSome(t, store, 1) // the audit event
			st = statusJSON(t, d.flags)
			require.Equal(t, destinationsJSON{Counted: 4, Counts: []destinationJSON{{Destination: "billing", Pending: 3}, {Destination: "", Pending: 1}}}, st.Destinations)
			text := ok(t, append([]string{"status"}, d.flags...)...)
			require.Contains(t, text, "destinations 2\n")
			require.Regexp(t, `\n  "billing" +3\n  "" +1\n`, text)

			// Every adapter reads it (driver.StatusReader.PublishRate): SQLite's publications,
			// the PostgreSQL and MySQL/MariaDB settle logs.
			require.NotNil(t, st.PublishRate)
			require.InDelta(t, 1.0/60, *st.PublishRate, 1e-9)
			require.NotNil(t, st.PublishETA)
			require.InDelta(t, 4*60.0, *st.PublishETA, 1e-6)
			require.Contains(t, text, "rate       0.02/s published over the last minute (eta 4m0s at the last minute's rate)\n")

			pub, err := store.Generation(ctx)
			require.NoError(t, err)
			cs, isCS := store.(driver.CheckpointStore)
			switch b.name {
			case "postgres":
				require.True(t, isCS)
				slot := "ops_status_" + randSuffix()
				_, err := db.SQL.ExecContext(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
				require.NoError(t, err)
				t.Cleanup(func() { _, _ = db.SQL.ExecContext(context.Background(), "SELECT pg_drop_replication_slot($1)", slot) })
				var lsn string
				require.NoError(t, db.SQL.QueryRowContext(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
				writeTo(t, store, "billing") // WAL after the slot's restart_lsn
				source := "postgres:1/" + slot + "/" + d.cfg.Schema + ".outbox"
				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: source, Position: lsn, Generation: pub.Generation}))
				st = statusJSON(t, d.flags)
				c := st.Checkpoint
				require.NotNil(t, c)
				require.Equal(t, slot, c.Slot)
				require.NotNil(t, c.RetainedBytes)
				require.Positive(t, *c.RetainedBytes)
				require.Nil(t, c.HeadroomBytes, "the slot pins the WAL")
				require.Empty(t, c.RetentionError)
				require.GreaterOrEqual(t, c.AgeSeconds, 0.0)
				require.Less(t, c.AgeSeconds, 60.0)
				require.Regexp(t, `\ncheckpoint position `+lsn+` \(source `+source+`, generation \d+, updated \S+, age \d+s\)\nretention  \d+ bytes retained \(slot `+slot+`; no headroom: the slot pins the WAL\)\n`,
					ok(t, append([]string{"status"}, d.flags...)...))

				// A checkpoint whose slot is gone: said, the rest of status shown.
				gone := "ops_gone_" + randSuffix()
				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: "postgres:1/" + gone + "/" + d.cfg.Schema + ".outbox", Position: lsn, Generation: pub.Generation}))
				st = statusJSON(t, d.flags)
				require.Nil(t, st.Checkpoint.RetainedBytes)
				require.Contains(t, st.Checkpoint.RetentionError, "replication slot "+gone+" does not exist")
				require.Contains(t, ok(t, append([]string{"status"}, d.flags...)...), "retention  unknown: ")

				// A checkpoint of another form names no slot.
				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: "log-1", Position: lsn, Generation: pub.Generation}))
				require.Equal(t, "the checkpoint's source names no replication slot", statusJSON(t, d.flags).Checkpoint.RetentionError)
			case "mysql":
				require.True(t, isCS)
				file, offset := binlogHead(t, db.SQL)
				pos := "file:" + file + ":" + itoa(offset)
				writeTo(t, store, "billing") // binary log after the position
				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: "mysql:1/x.outbox", Position: pos, Generation: pub.Generation}))
				st = statusJSON(t, d.flags)
				c := st.Checkpoint
				require.NotNil(t, c)
				require.Empty(t, c.RetentionError)
				require.NotNil(t, c.RetainedBytes)
				require.Positive(t, *c.RetainedBytes)
				require.NotNil(t, c.HeadroomBytes)
				require.GreaterOrEqual(t, *c.HeadroomBytes, offset, "at least the log before the position in its own file")
				require.Regexp(t, `\nretention  \d+ bytes retained, \d+ bytes of headroom \(binary log kept before the checkpoint\)\n`,
					ok(t, append([]string{"status"}, d.flags...)...))

				// A checkpoint whose file is gone: every log retained, no headroom.
				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: "mysql:1/x.outbox", Position: "file:gone-bin.000001:4", Generation: pub.Generation}))
				c = statusJSON(t, d.flags).Checkpoint
				require.NotNil(t, c.RetainedBytes)
				require.GreaterOrEqual(t, *c.RetainedBytes, *st.Checkpoint.RetainedBytes)
				require.NotNil(t, c.HeadroomBytes)
				require.Zero(t, *c.HeadroomBytes)

				require.NoError(t, cs.SaveCheckpoint(ctx, driver.Checkpoint{Source: "mysql:1/x.outbox", Position: "nonsense", Generation: pub.Generation}))
				require.Contains(t, statusJSON(t, d.flags).Checkpoint.RetentionError, `position "nonsense"`)
			default:
				require.False(t, isCS, "SQLite has no CDC")
			}

			// A backlog beyond the bound: the breakdown is of the oldest 10,000 pending.
			writeTo(t, store, make([]string, statusDestinations)...)
			st = statusJSON(t, d.flags)
			require.True(t, st.Destinations.Partial)
			require.Equal(t, int64(statusDestinations), st.Destinations.Counted)
			billing := int64(3)
			if b.name != "sqlite" {
				billing = 4
			}
			require.Equal(t, []destinationJSON{{Destination: "", Pending: statusDestinations - billing}, {Destination: "billing", Pending: billing}}, st.Destinations.Counts)
			require.Contains(t, ok(t, append([]string{"status"}, d.flags...)...), "destinations 2 (of the oldest 10,000 pending)\n")
		})
	}
}

// binlogHead returns the current binary log file and offset (SHOW MASTER STATUS).
func binlogHead(t testing.TB, db *sql.DB) (string, int64) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SHOW MASTER STATUS")
	require.NoError(t, err)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	require.True(t, rows.Next(), "binary logging is on")
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	require.NoError(t, rows.Scan(ptrs...))
	var file string
	var offset int64
	for i, c := range cols {
		switch strings.ToLower(c) {
		case "file":
			file = vals[i].String
		case "position":
			require.NoError(t, json.Unmarshal([]byte(vals[i].String), &offset))
		}
	}
	require.NotEmpty(t, file)
	return file, offset
}

// TestStatusPublishRatePartitioned: a partitioned PostgreSQL outbox, as a plain one, has the
// settle log (migration 0008), so one-shot status shows the publish rate of the last minute and the time to
// publish the pending events at that rate, from at most the 10,000 most recent.
func TestStatusPublishRatePartitioned(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := opsPostgres(t)
	pool, err := pgxpool.New(ctx, d.cfg.DSN)
	require.NoError(t, err)
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Options{Schema: d.cfg.Schema, Lanes: 1, Partitioning: &postgres.Partitioning{}})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	st := statusJSON(t, d.flags)
	require.NotNil(t, st.PublishRate)
	require.Zero(t, *st.PublishRate)
	require.Nil(t, st.PublishETA)
	require.Contains(t, ok(t, append([]string{"status"}, d.flags...)...), "rate       0.00/s published over the last minute\n")

	writeTo(t, store, "a", "b", "b")
	publishSome(t, store, 2)
	st = statusJSON(t, d.flags)
	require.NotNil(t, st.PublishRate)
	require.InDelta(t, 2.0/60, *st.PublishRate, 1e-9)
	require.NotNil(t, st.PublishETA)
	require.InDelta(t, 30.0, *st.PublishETA, 1e-6)
	require.Equal(t, []destinationJSON{{Destination: "b", Pending: 1}}, st.Destinations.Counts)

	// More published in the last minute than it reads: the rate of the 10,000 most recent over
	// the time they took (here a few seconds), far above 10,002 a minute.
	writeTo(t, store, make([]string, statusRateRecords)...)
	publishSome(t, store, statusRateRecords+1)
	st = statusJSON(t, d.flags)
	require.NotNil(t, st.PublishRate)
	require.Greater(t, *st.PublishRate, float64(statusRateRecords)/10)
	require.Nil(t, st.PublishETA, "nothing pending")
}

// status shows a live holder (a relay of the generation whose lease has not expired) or "none
// live", an ETA only while something was published in the last 10s and labelled with its
// window, and a lane summary (held, expired, free, per owner) with --lanes for every row.
func TestStatusLiveHolderETAAndLanes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	d := opsSQLite(t)
	ok(t, append([]string{"migrate", "--lanes", "4"}, d.flags...)...)
	db, err := opendb.Open(ctx, d.cfg)
	require.NoError(t, err)
	defer db.Close()
	store := db.Store
	status := func(args ...string) string { return ok(t, append(append([]string{"status"}, d.flags...), args...)...) }

	text := status()
	require.Contains(t, text, "publisher  generation 0, kind none\n", "no relay ever ran: no holder line")
	require.Contains(t, text, "lanes      4: 0 held, 0 expired, 4 free\n")

	// A relay that published and exited: its generation stays, its lease is released.
	writeTo(t, store, "a", "b", "c", "d", "e")
	pub, err := store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "status-test"})
	require.NoError(t, err)
	leases, err := store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w0", Max: 4, TTL: time.Minute})
	require.NoError(t, err)
	recs, err := store.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 2})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, store.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[0].Seq, recs[1].Seq}}))
	require.NoError(t, store.ReleaseLanes(ctx, leases))
	text = status()
	require.Contains(t, text, ", holder none live, since ", "status-test took the generation but holds no lane")
	require.Contains(t, text, "rate       0.03/s published over the last minute (eta 1m30s at the last minute's rate)\n")
	st := statusJSON(t, d.flags)
	require.Equal(t, "status-test", st.Publisher.Holder)
	require.Empty(t, st.Publisher.LiveHolder)
	require.True(t, st.PublishedRecently)
	require.Equal(t, 60.0, st.PublishRateWindow)

	// The last publication 30s ago (the relays stopped publishing, a breaker open, ...): a
	// rate over the minute, but no ETA.
	d.exec(t, "UPDATE outbox_publications SET at = at - 30000000")
	text = status()
	require.Contains(t, text, "rate       0.03/s published over the last minute (no eta: nothing published in the last 10s)\n")
	st = statusJSON(t, d.flags)
	require.False(t, st.PublishedRecently)
	require.Nil(t, st.PublishETA)

	// Live relays of the generation: w1 holds two lanes, w2 one whose lease expired.
	pub, err = store.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "gone", Join: true})
	require.NoError(t, err)
	_, err = store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w1", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	_, err = store.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w2", Max: 1, TTL: time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(status(), "  owner w2: 0 held, 1 expired\n") }, 10*time.Second, 5*time.Millisecond)
	text = status()
	require.Contains(t, text, ", holder w1, since ")
	require.Contains(t, text, "lanes      4: 2 held, 1 expired, 1 free\n  owner w1: 2 held\n  owner w2: 0 held, 1 expired\n")
	require.NotContains(t, text, "LANE", "the lane table only with --lanes")
	require.NotContains(t, text, "(expired)")
	st = statusJSON(t, d.flags)
	require.Equal(t, "w1", st.Publisher.LiveHolder)
	require.Equal(t, laneSummary{Held: 2, Expired: 1, Free: 1, Owners: []laneOwners{{Owner: "w1", Held: 2}, {Owner: "w2", Expired: 1}}}, st.LaneSummary)
	require.Len(t, st.Lanes, 4, "JSON keeps every lane")

	text = status("--lanes")
	require.Contains(t, text, "  LANE  OWNER  GENERATION  LEASE_EXPIRY\n")
	require.Equal(t, 1, strings.Count(text, "(expired)"))
	require.Regexp(t, `\n  \d +- +\d+ +none\n`, text, "a free lane is a row too")
	require.Equal(t, 4, len(regexp.MustCompile(`(?m)^  \d+ `).FindAllString(text, -1)), text)
}

// status --help says where each field exists: the publish rate on every adapter, PostgreSQL
// plain or partitioned included; the checkpoint on PostgreSQL and MySQL/MariaDB only.
func TestStatusHelp(t *testing.T) {
	t.Parallel()
	help := ok(t, "status", "--help")
	for _, want := range []string{"every adapter (SQLite's\n                    publications; the settle log of PostgreSQL, plain or partitioned, and MySQL/MariaDB)",
		"PostgreSQL and MySQL/MariaDB (\"none\" on\n                    SQLite", "shown only while the fleet publishes", "\"none live\"", "--lanes"} {
		require.Contains(t, help, want)
	}
	require.NotContains(t, help, "only on SQLite")
}
