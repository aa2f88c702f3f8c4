package reconcile_test

import (
	"context"
	"database/sql"
	"errors"
	"iter"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/reconcile"
)

func newStore(t *testing.T) *sqlite.Store {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.OpenDB(ctx, filepath.Join(t.TempDir(), "app.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := sqlite.New(db, &sqlite.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	return store
}

func ev(id, agg string, v int64) core.Event {
	return core.Event{ID: id, AggregateType: "order", AggregateID: agg, AggregateVersion: v, Type: "order.changed",
		Payload: []byte(`{"id":"` + id + `"}`)}
}

func expect(evs ...core.Event) iter.Seq2[reconcile.Expected, error] {
	return func(yield func(reconcile.Expected, error) bool) {
		for _, e := range evs {
			if !yield(reconcile.Expected{ID: e.ID, AggregateType: e.AggregateType, AggregateID: e.AggregateID, Version: e.AggregateVersion}, nil) {
				return
			}
		}
	}
}

// TestPlantedMismatches plants one of each kind of finding, including a duplicate that hides
// an omission (as many rows as expected events for order 1, but one is a second row of version
// 2 and version 3 was never written), and checks that each is reported with its ID.
func TestPlantedMismatches(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := newStore(t)
	ob, err := core.NewOutbox[*sql.Tx](ctx, store, nil)
	require.NoError(t, err)
	write := func(evs ...core.Event) {
		require.NoError(t, store.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, evs...)
			return err
		}))
	}
	e1, e2, e3, dup := ev("e1", "1", 1), ev("e2", "1", 2), ev("e3", "1", 3), ev("dup", "1", 2)
	g1, g3 := ev("g1", "2", 1), ev("g3", "2", 3)
	p1, na1, dm1, st1, ok1 := ev("p1", "p", 0), ev("na1", "n", 0), ev("dm1", "d", 0), ev("st1", "s", 0), ev("ok1", "o", 0)
	write(e1, e2, dup, g1, g3, p1, na1, dm1, st1, ok1)
	sink := &outboxtest.Sink{Fail: func(m core.Message) error {
		if m.ID == "p1" {
			return core.Permanent(errors.New("rejected"))
		}
		return nil
	}}
	outboxtest.RequireDrained(t, store, sink, nil)
	u1 := ev("u1", "u", 0)
	write(u1) // never published

	in, err := core.NewInbox[*sql.Tx](ctx, store, nil)
	require.NoError(t, err)
	apply := func(e core.Event, payload string, entity string, v int64) {
		_, err := in.Process(ctx, "c", core.InboxMessage{EventID: e.ID, Payload: []byte(payload), Entity: entity, Version: v},
			func(context.Context, *sql.Tx, core.InboxMessage) error { return nil })
		require.NoError(t, err)
	}
	for _, e := range []core.Event{e1, e2, dup, g1, g3, ok1} {
		apply(e, string(e.Payload), "", 0)
	}
	apply(dm1, "another payload", "", 0) // digest mismatch
	apply(ok1, string(ok1.Payload), "", 0)
	apply(core.Event{ID: "newer"}, "x", "ent", 2)
	apply(st1, string(st1.Payload), "ent", 1) // recorded stale: not applied

	run := func(o reconcile.Options, evs ...core.Event) *reconcile.Report {
		o.Inbox, o.Consumer, o.Now = store, "c", time.Now().Add(time.Hour)
		rep, err := reconcile.Run(ctx, expect(evs...), store, o)
		require.NoError(t, err)
		return rep
	}
	rep := run(reconcile.Options{}, e1, e1, e2, e3, g1, g3, p1, na1, dm1, st1, ok1, u1)
	require.Equal(t, 12, rep.Expected)
	require.Equal(t, 11, rep.Outbox)
	require.Equal(t, []string{"e3"}, rep.Missing)
	require.Equal(t, []string{"dup"}, rep.Extra)
	require.Equal(t, []string{"e1"}, rep.DuplicateExpected)
	require.Equal(t, []string{"order/1@2"}, rep.DuplicateVersions)
	require.Equal(t, []string{"order/2@1..3"}, rep.VersionGaps)
	require.Equal(t, []string{"u1"}, rep.Unpublished)
	require.Equal(t, []string{"p1"}, rep.Parked)
	require.Equal(t, []string{"na1"}, rep.NotApplied)
	require.Equal(t, []string{"dm1"}, rep.DigestMismatches)
	require.Equal(t, []string{"st1"}, rep.Stale)
	require.Equal(t, 10, rep.Findings())
	require.ErrorIs(t, rep.Err(), reconcile.ErrFindings)
	require.Contains(t, rep.String(), "missing 1: e3\n")
	require.Contains(t, rep.String(), "reconcile: FINDINGS expected=12 outbox=11 findings=10\n")

	// Counting alone sees nothing wrong for order 1: three expected, three rows.
	rep = run(reconcile.Options{}, e1, e2, e3)
	require.Equal(t, []string{"e3"}, rep.Missing)

	// Within the threshold a fresh unpublished row and a fresh unapplied event are no findings.
	rep, err = reconcile.Run(ctx, expect(e1, e2, g1, ok1, u1, na1), store,
		reconcile.Options{Inbox: store, Consumer: "c", Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, rep.Unpublished)
	require.Empty(t, rep.NotApplied)
	require.Equal(t, []string{"dm1", "dup", "g3", "p1", "st1"}, rep.Extra)
	require.Empty(t, rep.Parked, "an event that was not expected is Extra only, parked or not")

	// A window that holds nothing: expected events are still looked up, nothing is extra.
	rep = run(reconcile.Options{Until: time.Now().Add(-time.Hour)}, ok1)
	require.True(t, rep.OK(), rep.String())
	require.NoError(t, rep.Err())
	require.Equal(t, 0, rep.Outbox)
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	boom := errors.New("boom")
	failing := func(yield func(reconcile.Expected, error) bool) { yield(reconcile.Expected{}, boom) }
	_, err := reconcile.Run(t.Context(), failing, store, reconcile.Options{})
	require.ErrorIs(t, err, boom)
	var oe *core.OptionError
	_, err = reconcile.Run(t.Context(), expect(), store, reconcile.Options{UnpublishedAfter: -1})
	require.ErrorAs(t, err, &oe)
	_, err = reconcile.Run(t.Context(), expect(), store, reconcile.Options{Since: time.Now(), Until: time.Now().Add(-time.Hour)})
	require.ErrorAs(t, err, &oe)
	_, err = reconcile.Run(t.Context(), expect(), nil, reconcile.Options{})
	require.ErrorAs(t, err, &oe)
}
