package main

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/outboxtest"
)

// `outboxkit reconcile` reads the expected events with the given query, prints the report and
// exits 1 on a finding, 0 when everything matches, 2 on bad usage.
func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.OpenDB(ctx, path)
	require.NoError(t, err)
	defer db.Close()
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE order_events (event_id TEXT, order_id TEXT, version INTEGER)`)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	require.NoError(t, err)
	// Three transitions of order 7 require events; v3's event was never written, and v2's twice.
	require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO order_events VALUES ('e1', '7', 1), ('e2', '7', 2), ('e3', '7', 3)`)
		if err != nil {
			return err
		}
		_, err = ob.Write(ctx, tx,
			core.Event{ID: "e1", AggregateType: "order", AggregateID: "7", AggregateVersion: 1, Type: "order.changed"},
			core.Event{ID: "e2", AggregateType: "order", AggregateID: "7", AggregateVersion: 2, Type: "order.changed"},
			core.Event{ID: "e2-again", AggregateType: "order", AggregateID: "7", AggregateVersion: 2, Type: "order.changed"})
		return err
	}))
	outboxtest.RequireDrained(t, store, outboxtest.NewSink(), nil)
	query := `SELECT event_id, 'order', order_id, version FROM order_events ORDER BY version`
	reconcileCmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"reconcile", "--db", "sqlite:" + path}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, _ := reconcileCmd("--expected-sql", query)
	require.Equal(t, 1, code)
	require.Equal(t, "reconcile: FINDINGS expected=3 outbox=3 findings=3\nmissing 1: e3\nextra 1: e2-again\nduplicate_versions 1: order/7@2\n", out)

	// Once the expected set and the outbox agree, the exit status is 0.
	_, err = db.ExecContext(ctx, `DELETE FROM order_events WHERE event_id = 'e3'`)
	require.NoError(t, err)
	code, out, _ = reconcileCmd("--expected-sql", query, "--until", "2000-01-01T00:00:00Z")
	require.Equal(t, 0, code, out)
	require.Equal(t, "reconcile: ok expected=2 outbox=0 findings=0\n", out)

	// With the consumer's inbox: published events it never applied are findings.
	code, out, _ = reconcileCmd("--expected-sql", query, "--until", "2000-01-01T00:00:00Z", "--consumer", "billing", "--unpublished-after", "1ns")
	require.Equal(t, 1, code)
	require.Contains(t, out, "not_applied 2: e1 e2\n")

	for _, args := range [][]string{{}, {"--expected-sql", query, "--since", "yesterday"}, {"--expected-sql", query, "extra"},
		{"--expected-sql", query, "--table", "bad-name"}} {
		code, _, stderr := reconcileCmd(args...)
		require.Equal(t, 2, code, "%q: %s", args, stderr)
	}
	code, _, stderr := reconcileCmd("--expected-sql", "SELECT nope")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "--expected-sql")
}

// `outboxkit reconcile --db URL` on every database: the expected events come from a query of the
// same database, a missing one is a finding (exit 1), and --consumer reads that database's inbox.
func TestReconcileCommandEveryDatabase(t *testing.T) {
	t.Parallel()
	for _, b := range opsBackends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.new(t)
			ok(t, append([]string{"migrate"}, d.flags...)...)
			db, err := opendb.Open(t.Context(), d.cfg)
			require.NoError(t, err)
			defer db.Close()
			ids := writeEvents(t, db.Store, "a", "b")
			query := "SELECT '" + ids[0] + "', 'order', 'x', 0 UNION ALL SELECT '" + ids[1] + "', 'order', 'y', 0 UNION ALL SELECT 'never-written', 'order', 'z', 0"
			code, out, errs := cli(t, append([]string{"reconcile", "--expected-sql", query}, d.flags...)...)
			require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
			require.Contains(t, out, "missing 1: never-written\n")
			// With the inbox: the written events are unpublished past 1ns, and the query fails
			// with one line naming it.
			code, out, errs = cli(t, append([]string{"reconcile", "--expected-sql", query, "--consumer", "billing", "--unpublished-after", "1ns"}, d.flags...)...)
			require.Equal(t, 1, code, "stdout %q stderr %q", out, errs)
			require.Contains(t, out, "unpublished 2:")
			fails(t, 1, "--expected-sql", append([]string{"reconcile", "--expected-sql", "SELECT nope FROM nowhere"}, d.flags...)...)
		})
	}
}
