package postgres

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// requireSQLState asserts that err is a server error with the given SQLSTATE.
func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	require.Error(t, err)
	pe := pgError(err)
	require.NotNil(t, pe, "not a server error: %v", err)
	require.Equal(t, code, pe.Code, "%v", err)
}

func TestImmutableColumnsTrigger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 4})
	ob, err := core.NewOutbox(ctx, s, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte("x")})
		return err
	}))

	for _, set := range []string{
		"payload = 'changed'", "id = 'other'", "aggregate_id = 'x'", "lane = lane + 1",
		"created_at = created_at - interval '1 day'", "headers = '{\"a\":\"b\"}'", "seq = seq + 100",
		"type = 'x', published_at = now()",
	} {
		_, err := d.pool.Exec(ctx, "UPDATE outbox SET "+set)
		requireSQLState(t, err, "23001") // restrict_violation
	}
	// Status columns may change, and naming a semantic column without changing it is allowed.
	for _, set := range []string{
		"published_at = now()", "attempts = attempts + 1, last_error = 'boom'",
		"next_attempt_at = now(), parked_at = now()", "id = id, payload = payload",
	} {
		tag, err := d.pool.Exec(ctx, "UPDATE outbox SET "+set)
		require.NoError(t, err, set)
		require.EqualValues(t, 1, tag.RowsAffected())
	}
}

func TestGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, d := migratedStore(t, dbOptions{}, &Options{Lanes: 4})
	appRole, relayRole, opRole := grantedRoles(t, d, "NOLOGIN")

	appPool := newPool(t, d.schema, dbOptions{role: appRole})
	opPool := newPool(t, d.schema, dbOptions{role: opRole})
	operator, err := New(opPool, &Options{Schema: d.schema})
	require.NoError(t, err)
	relayPool := newPool(t, d.schema, dbOptions{role: relayRole})
	app, err := New(appPool, &Options{Schema: d.schema})
	require.NoError(t, err)
	relay, err := New(relayPool, &Options{Schema: d.schema})
	require.NoError(t, err)

	// The application appends, runs the inbox and notifies...
	ob, err := core.NewOutbox(ctx, app, nil)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx,
			core.Event{AggregateType: "a", AggregateID: "1", Type: "t", Payload: []byte("p1")},
			core.Event{AggregateType: "a", AggregateID: "2", Type: "t", Payload: []byte("p2")})
		return err
	}))
	require.NoError(t, ob.Notify(ctx))
	in, err := core.NewInbox(ctx, app, nil)
	require.NoError(t, err)
	res, err := in.Process(ctx, "c", core.InboxMessage{EventID: "e1", Entity: "a/1", Version: 1, OccurredAt: time.Now()},
		func(context.Context, pgx.Tx, core.InboxMessage) error { return nil })
	require.NoError(t, err)
	require.Equal(t, core.Applied, res.Outcome)
	_, err = in.Prune(ctx, "c", time.Now().Add(-time.Hour), 10)
	require.NoError(t, err)
	// ...but can neither read nor change outbox rows (beyond the seq, lane, key and time its inserts
	// return), nor change pending rows, nor touch the lanes or the settle log.
	for _, sql := range []string{
		"SELECT payload FROM outbox", "SELECT * FROM outbox", "UPDATE outbox SET published_at = now()", "DELETE FROM outbox",
		"UPDATE outbox_lanes SET owner = 'x'", "SELECT seq FROM outbox_pending", "DELETE FROM outbox_pending",
		"UPDATE outbox_pending SET attempts = 0", "SELECT at FROM outbox_settled", "INSERT INTO outbox_settled VALUES (now(), 1, 1, '{1}')",
	} {
		_, err := appPool.Exec(ctx, sql)
		requireSQLState(t, err, "42501")
	}
	_, err = app.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 1, TTL: time.Minute})
	requireSQLState(t, err, "42501")
	_, err = app.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w"})
	requireSQLState(t, err, "42501")
	require.Error(t, app.SaveCheckpoint(ctx, driver.Checkpoint{Source: "s", Position: "0/0"}))

	// The relay takes a generation, claims, fetches, settles, unparks and prunes, and writes
	// the CDC checkpoint...
	pub, err := relay.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "w"})
	require.NoError(t, err)
	require.EqualValues(t, 1, pub.Generation)
	live, err := relay.Heartbeat(ctx, driver.HeartbeatParams{Owner: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, 1, live)
	leases, err := relay.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w", Max: 4, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, leases, 4)
	leases, err = relay.RenewLanes(ctx, driver.RenewParams{Generation: pub.Generation, Leases: leases, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, leases, 4)
	require.NoError(t, relay.SaveCheckpoint(ctx, driver.Checkpoint{Source: "s", Position: "0/1", Generation: pub.Generation}))
	require.NoError(t, relay.SaveCheckpoint(ctx, driver.Checkpoint{Source: "s", Position: "0/2", Generation: pub.Generation}))
	cp, ok, err := relay.LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "0/2", cp.Position)
	recs, err := relay.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, relay.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{recs[0].Seq},
		Failed: []driver.Failure{{Seq: recs[1].Seq, Lane: recs[1].Lane, Error: "x", Park: true}}}))
	n, err := relay.Unpark(ctx, recs[1].PartitionKey)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	// The operator replays the published event (auditing it); the relay publishes it again.
	n, err = operatorOf(t, operator).Replay(ctx, driver.ReplayParams{IDs: []string{recs[0].ID}, Audit: &driver.AuditEntry{Actor: "op", Command: "replay", Arguments: `{}`}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again, err := relay.Fetch(ctx, driver.FetchParams{Leases: leases, Limit: 10})
	require.NoError(t, err)
	require.Len(t, again, 2)
	require.Equal(t, recs[0].ID, again[0].ID)
	require.NoError(t, relay.Settle(ctx, driver.SettleParams{Leases: leases, Published: []int64{again[0].Seq}}))
	_, err = relay.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour), Limit: 10})
	require.NoError(t, err)
	require.NoError(t, relay.ReleaseLanes(ctx, leases))
	// ...but cannot insert, change semantic columns, or read the inbox.
	for _, sql := range []string{
		"INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane) VALUES ('x', 'a', '1', 't', 'a/1', 0)",
		"UPDATE outbox SET payload = 'changed'",
		"SELECT count(*) FROM inbox",
	} {
		_, err := relayPool.Exec(ctx, sql)
		requireSQLState(t, err, "42501")
	}
	requireRowCount(t, s, 1)

	// Only the operator appends audit rows (and cannot change their columns but rows_affected,
	// nor delete them); it unparks, prunes and reads the log.
	_, err = operatorOf(t, operator).Unpark(ctx, []string{recs[1].PartitionKey}, &driver.AuditEntry{Actor: "op", Command: "unpark"})
	require.NoError(t, err)
	_, err = operatorOf(t, operator).Cleanup(ctx, driver.PruneParams{PublishedBefore: time.Now()}, driver.AuditEntry{Actor: "op", Command: "cleanup"})
	require.NoError(t, err)
	// It deletes the CDC checkpoint (cdc release); the application and the relay cannot.
	for _, s := range []*Store[pgx.Tx]{app, relay} {
		_, err = s.ReleaseCheckpoint(ctx, driver.AuditEntry{Actor: "x", Command: "cdc release"})
		requireSQLState(t, err, "42501")
	}
	released, err := operator.ReleaseCheckpoint(ctx, driver.AuditEntry{Actor: "op", Command: "cdc release"})
	require.NoError(t, err)
	require.True(t, released)
	_, ok, err = relay.LoadCheckpoint(ctx)
	require.NoError(t, err)
	require.False(t, ok)
	// It ends the relay's leases (lanes reset) and prunes the application's inbox, auditing
	// both; the application can do neither.
	leases, err = relay.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "w", Max: 4, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, leases, 4)
	_, err = operatorOf(t, app).ResetLanes(ctx, driver.ResetLanesParams{All: true}, driver.AuditEntry{Actor: "app", Command: "lanes reset"})
	requireSQLState(t, err, "42501")
	n, err = operatorOf(t, operator).ResetLanes(ctx, driver.ResetLanesParams{Owner: "w"}, driver.AuditEntry{Actor: "op", Command: "lanes reset"})
	require.NoError(t, err)
	require.Equal(t, 4, n)
	renewed, err := relay.RenewLanes(ctx, driver.RenewParams{Generation: pub.Generation, Leases: leases, TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, renewed, "the reset leases are lost")
	_, err = operatorOf(t, app).PruneInbox(ctx, "c", time.Now(), 10, driver.AuditEntry{Actor: "app", Command: "inbox prune"})
	requireSQLState(t, err, "42501")
	n, err = operatorOf(t, operator).PruneInbox(ctx, "c", time.Now(), 10, driver.AuditEntry{Actor: "op", Command: "inbox prune"})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the record of e1")
	log, err := operatorOf(t, operator).AuditLog(ctx, driver.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, log, 6)
	require.Equal(t, []string{"replay", "unpark", "cleanup", "cdc release", "lanes reset", "inbox prune"},
		[]string{log[0].Command, log[1].Command, log[2].Command, log[3].Command, log[4].Command, log[5].Command})
	require.EqualValues(t, 1, log[0].Rows)
	require.EqualValues(t, 4, log[4].Rows)
	require.EqualValues(t, 1, log[5].Rows)
	insert := "INSERT INTO outbox_audit (actor, command, arguments, rows_affected) VALUES ('x', 'replay', '{}', 0)"
	for _, p := range []*pgxpool.Pool{appPool, relayPool} {
		_, err := p.Exec(ctx, insert)
		requireSQLState(t, err, "42501")
		_, err = p.Exec(ctx, "SELECT count(*) FROM outbox_audit")
		requireSQLState(t, err, "42501")
	}
	for _, sql := range []string{"UPDATE outbox_audit SET actor = 'x'", "DELETE FROM outbox_audit", "INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, lane) VALUES ('x', 'a', '1', 't', 'a/1', 0)"} {
		_, err := opPool.Exec(ctx, sql)
		requireSQLState(t, err, "42501")
	}
	// Of rows_affected, only an unfinished inbox prune's -1 may change (the audit guard trigger).
	_, err = opPool.Exec(ctx, "UPDATE outbox_audit SET rows_affected = 7")
	requireSQLState(t, err, "23001")
	_, err = operatorOf(t, app).Unpark(ctx, nil, &driver.AuditEntry{Actor: "app", Command: "unpark"})
	requireSQLState(t, err, "42501")
	requireRowCount(t, s, 1)

	// lanes resize: only the operator changes the lane count; the application's Outbox, which
	// read 4 lanes, follows it (its checked insert needs no privilege beyond grants.sql's), and
	// the operator's replay puts a row back in its key's lane under the new count.
	for _, st := range []*Store[pgx.Tx]{app, relay} {
		_, err = st.ResizeLanes(ctx, 8, driver.AuditEntry{Actor: "x", Command: "lanes resize"})
		requireSQLState(t, err, "42501")
	}
	_, err = operator.ResizeLanes(ctx, 8, driver.AuditEntry{Actor: "op", Command: "lanes resize", Arguments: `{"lanes":8}`})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
		_, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: "3", Type: "t", Payload: []byte("p3")})
		return err
	}))
	require.Equal(t, 8, ob.Lanes())
	recs, err = s.List(ctx, driver.ListParams{State: driver.StateAll})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for _, r := range recs {
		if r.PublishedAt.IsZero() {
			require.Equal(t, driver.LaneOf(r.PartitionKey, 8), r.Lane, "unpublished %s", r.PartitionKey)
		}
	}
	_, err = operator.ResizeLanes(ctx, 3, driver.AuditEntry{Actor: "op", Command: "lanes resize", Arguments: `{"lanes":3}`})
	require.NoError(t, err)
	for _, r := range recs {
		if !r.PublishedAt.IsZero() {
			_, err := operatorOf(t, operator).Replay(ctx, driver.ReplayParams{IDs: []string{r.ID}})
			require.NoError(t, err)
		}
	}
	recs, err = s.List(ctx, driver.ListParams{State: driver.StatePending})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.Equal(t, driver.LaneOf(r.PartitionKey, 3), r.Lane, "%s (replayed or moved)", r.PartitionKey)
	}
}

func requireRowCount(t *testing.T, s *Store[pgx.Tx], want int) {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, want, st.Pending+st.Parked+st.Published)
}

// grantedRoles creates an application, a relay and an operator role (with the role options
// given, e.g. LOGIN), dropped when the test ends, and runs grants.sql for them on d's schema.
func grantedRoles(t *testing.T, d *testDB, options string) (appRole, relayRole, opRole string) {
	t.Helper()
	ctx := context.Background()
	a := admin(t)
	appRole, relayRole, opRole = randomName("okt_app_"), randomName("okt_relay_"), randomName("okt_op_")
	for _, r := range []string{appRole, relayRole, opRole} {
		_, err := a.Exec(ctx, "CREATE ROLE "+quote(r)+" "+options)
		require.NoError(t, err)
		t.Cleanup(func() {
			_, err := a.Exec(context.Background(), "DROP OWNED BY "+quote(r)+"; DROP ROLE "+quote(r))
			if err != nil {
				t.Errorf("drop role %s: %v", r, err)
			}
		})
	}
	grants, err := os.ReadFile("grants.sql")
	require.NoError(t, err)
	script := strings.NewReplacer(`:"schema"`, quote(d.schema), `:"app_role"`, quote(appRole),
		`:"relay_role"`, quote(relayRole), `:"operator_role"`, quote(opRole)).Replace(string(grants))
	_, err = d.pool.Exec(ctx, script)
	require.NoError(t, err)
	return appRole, relayRole, opRole
}
