package memory_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func newOperator(t *testing.T, lanes int) (*memory.Store, *core.Operator, *core.Outbox[*memory.Tx]) {
	t.Helper()
	s, err := memory.New(&memory.Options{Lanes: lanes, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	op, err := core.NewOperator(s, nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](t.Context(), s, nil)
	require.NoError(t, err)
	return s, op, ob
}

func writeKeys(t *testing.T, s *memory.Store, ob *core.Outbox[*memory.Tx], keys ...string) {
	t.Helper()
	require.NoError(t, s.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		for i, k := range keys {
			if _, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: fmt.Sprint(i), Type: "t", PartitionKey: k, Payload: []byte(`{}`)}); err != nil {
				return err
			}
		}
		return nil
	}))
}

// core.Operator.ResizeLanes on the memory store: every unpublished record moves to its key's
// lane under the new count, every lease ends (the old owner's Settle is refused), the audit row
// counts the moved records, and a writer whose Outbox read the old count writes with the new
// one (InsertLanes).
func TestOperatorResizeLanes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, op, ob := newOperator(t, 8)
	var keys []string
	for i := range 40 {
		keys = append(keys, fmt.Sprint("k", i))
	}
	writeKeys(t, s, ob, keys...)
	wantMoved := 0
	for _, k := range keys {
		if driver.LaneOf(k, 8) != driver.LaneOf(k, 32) {
			wantMoved++
		}
	}
	require.Positive(t, wantMoved)
	ls, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "old", Max: 8, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: ls, Limit: 100})
	require.NoError(t, err)

	moved, err := op.ResizeLanes(ctx, 32, core.AuditEntry{Actor: "t", Command: "lanes resize", Arguments: `{"lanes":32}`})
	require.NoError(t, err)
	require.Equal(t, wantMoved, moved)
	n, err := s.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 32, n)
	pending, err := s.List(ctx, driver.ListParams{State: driver.StatePending, Limit: 100})
	require.NoError(t, err)
	require.Len(t, pending, 40)
	for _, r := range pending {
		require.Equal(t, driver.LaneOf(r.PartitionKey, 32), r.Lane, r.PartitionKey)
	}
	err = s.Settle(ctx, driver.SettleParams{Leases: ls, Published: []int64{recs[0].Seq}})
	require.ErrorIs(t, err, core.ErrClaimLost, "the resize ended the old leases")
	lanes, err := s.Lanes(ctx)
	require.NoError(t, err)
	require.Len(t, lanes, 32)

	writeKeys(t, s, ob, "late") // ob read 8 lanes
	require.Equal(t, 32, ob.Lanes())
	pending, err = s.List(ctx, driver.ListParams{State: driver.StatePending, Limit: 100})
	require.NoError(t, err)
	require.Equal(t, driver.LaneOf("late", 32), pending[len(pending)-1].Lane)

	moved, err = op.ResizeLanes(ctx, 32, core.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.NoError(t, err)
	require.Zero(t, moved)
	log, err := op.AuditLog(ctx, core.AuditListParams{})
	require.NoError(t, err)
	require.Len(t, log, 1, "the same count writes no audit row")
	require.EqualValues(t, wantMoved, log[0].Rows)
	require.Equal(t, `{"lanes":32}`, log[0].Arguments)

	// A relay delivers every record from the new lanes.
	all, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "new", Max: 32, TTL: time.Hour})
	require.NoError(t, err)
	recs, err = s.Fetch(ctx, driver.FetchParams{Leases: all, Limit: 100})
	require.NoError(t, err)
	require.Len(t, recs, 41)
}

// An operator transaction is all or nothing: when fn fails after its steps changed records,
// leases, lanes, the inbox horizon and the audit log, every change is undone.
func TestInOperatorTxRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, op, ob := newOperator(t, 4)
	writeKeys(t, s, ob, "a", "b", "c")
	ls, err := s.ClaimLanes(ctx, driver.ClaimParams{Owner: "w", Max: 4, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: ls, Limit: 10})
	require.NoError(t, err)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: ls, Published: []int64{recs[0].Seq},
		Failed: []driver.Failure{{Seq: recs[1].Seq, Lane: recs[1].Lane, Error: "x", Park: true}}}))
	_, err = op.ResizeLanes(ctx, 4, core.AuditEntry{}) // nothing
	require.NoError(t, err)
	snapshot := func() string {
		all, err := s.List(ctx, driver.ListParams{Limit: 100})
		require.NoError(t, err)
		lanes, err := s.Lanes(ctx)
		require.NoError(t, err)
		log, err := op.AuditLog(ctx, core.AuditListParams{})
		require.NoError(t, err)
		st, err := op.Status(ctx)
		require.NoError(t, err)
		var h time.Time
		require.NoError(t, s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error {
			h, err = s.Horizon(ctx, tx, "c")
			return err
		}))
		return fmt.Sprintf("%+v\n%+v\n%+v\n%+v\n%v", all, lanes, log, st, h)
	}
	before := snapshot()
	boom := errors.New("boom")
	err = s.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		_, err := tx.Unpark(ctx, recs[1].PartitionKey)
		require.NoError(t, err)
		_, err = tx.Requeue(ctx, []driver.ReplayTarget{{Seq: recs[0].Seq, Lane: 3}})
		require.NoError(t, err)
		_, err = tx.ResetLanes(ctx, driver.ResetLanesParams{})
		require.NoError(t, err)
		_, err = tx.RaiseHorizon(ctx, "c", time.Now())
		require.NoError(t, err)
		id, err := tx.WriteAudit(ctx, driver.AuditEntry{Actor: "t", Command: "x", Rows: -1})
		require.NoError(t, err)
		require.NoError(t, tx.SetAuditRows(ctx, id, 7))
		_, err = tx.ResizeLanes(ctx, 4, 9)
		require.NoError(t, err)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, before, snapshot())
	err = s.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		n, err := tx.PruneOutbox(ctx, driver.PruneParams{PublishedBefore: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the published record")
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, before, snapshot())
	n, err := s.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
}
