package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// opStore is a memory store whose Notify calls are counted, whose single-writer capability can
// be denied (multiWriter: core.Operator then prunes an inbox across transactions, as on
// PostgreSQL and MySQL) and whose inbox deletions can fail (failPrune: the n-th PruneInbox
// step fails).
type opStore struct {
	*memory.Store
	notified    atomic.Int32
	multiWriter bool
	failPrune   int
	prunes      int
}

func (s *opStore) Notify(ctx context.Context) error {
	s.notified.Add(1)
	return s.Store.Notify(ctx)
}

func (s *opStore) SingleWriter() bool { return !s.multiWriter }

func (s *opStore) InOperatorTx(ctx context.Context, fn func(context.Context, driver.OperatorTx) error) error {
	return s.Store.InOperatorTx(ctx, func(ctx context.Context, tx driver.OperatorTx) error {
		return fn(ctx, failingTx{OperatorTx: tx, s: s})
	})
}

type failingTx struct {
	driver.OperatorTx
	s *opStore
}

var errStep = errors.New("injected step failure")

func (t failingTx) PruneInbox(ctx context.Context, consumer string, horizon time.Time, limit int) (int64, error) {
	t.s.prunes++
	if t.s.prunes == t.s.failPrune {
		return 0, errStep
	}
	return t.OperatorTx.PruneInbox(ctx, consumer, horizon, limit)
}

func newOpStore(t *testing.T, lanes int) (*opStore, *core.Operator, *core.Outbox[*memory.Tx]) {
	t.Helper()
	m, err := memory.New(&memory.Options{Lanes: lanes, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	s := &opStore{Store: m}
	op, err := core.NewOperator(s, nil)
	require.NoError(t, err)
	ob, err := core.NewOutbox[*memory.Tx](t.Context(), s, nil)
	require.NoError(t, err)
	return s, op, ob
}

func writeEvents(t *testing.T, s *opStore, ob *core.Outbox[*memory.Tx], keys ...string) []string {
	t.Helper()
	var ids []string
	require.NoError(t, s.InTx(t.Context(), func(ctx context.Context, tx *memory.Tx) error {
		for i, k := range keys {
			evs, err := ob.Write(ctx, tx, core.Event{AggregateType: "a", AggregateID: fmt.Sprint(i), Type: "t", PartitionKey: k, Payload: []byte(`{}`)})
			if err != nil {
				return err
			}
			ids = append(ids, evs[0].ID)
		}
		return nil
	}))
	return ids
}

// publishAll settles every pending record of the store as published (one lease per lane).
func publishAll(t *testing.T, s *opStore, lanes int) {
	t.Helper()
	ctx := t.Context()
	pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "t", Join: true})
	require.NoError(t, err)
	ls, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "t", Max: lanes, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: ls, Limit: 1000})
	require.NoError(t, err)
	var seqs []int64
	for _, r := range recs {
		seqs = append(seqs, r.Seq)
	}
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: ls, Published: seqs}))
	require.NoError(t, s.ReleaseLanes(ctx, ls))
}

// Unpark and Replay wake the relays (driver.Notifier) when they changed something, and only
// then; the other commands do not.
func TestOperatorWakesRelays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, op, ob := newOpStore(t, 2)
	ids := writeEvents(t, s, ob, "a", "b")
	audit := &core.AuditEntry{Actor: "t", Command: "unpark"}
	n, err := op.Unpark(ctx, []string{"a"}, audit)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, s.notified.Load(), "nothing unparked: no wake-up")

	pub, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindPolling, Holder: "t"})
	require.NoError(t, err)
	ls, err := s.ClaimLanes(ctx, driver.ClaimParams{Generation: pub.Generation, Owner: "t", Max: 2, TTL: time.Hour})
	require.NoError(t, err)
	recs, err := s.Fetch(ctx, driver.FetchParams{Leases: ls, Limit: 10})
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: ls, Failed: []driver.Failure{{Seq: recs[0].Seq, Lane: recs[0].Lane, Error: "x", Park: true}}}))
	n, err = op.Unpark(ctx, []string{recs[0].PartitionKey}, audit)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.EqualValues(t, 1, s.notified.Load(), "Unpark woke the relays")

	require.NoError(t, s.Settle(ctx, driver.SettleParams{Leases: ls, Published: []int64{recs[0].Seq, recs[1].Seq}}))
	_, err = op.Cleanup(ctx, driver.PruneParams{PublishedBefore: time.Now().Add(-time.Hour)}, core.AuditEntry{Actor: "t", Command: "cleanup"})
	require.NoError(t, err)
	_, err = op.ResetLanes(ctx, core.ResetLanesParams{All: true}, core.AuditEntry{Actor: "t", Command: "lanes reset"})
	require.NoError(t, err)
	require.EqualValues(t, 1, s.notified.Load(), "cleanup and lanes reset wake nobody")

	n, err = op.Replay(ctx, core.ReplayParams{IDs: ids})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.EqualValues(t, 2, s.notified.Load(), "Replay woke the relays")
	_, err = op.Replay(ctx, core.ReplayParams{IDs: ids})
	require.ErrorIs(t, err, core.ErrReplayKeyPending)
	require.EqualValues(t, 2, s.notified.Load(), "a refused Replay wakes nobody")
}

// A CDC publisher refuses Replay and ResizeLanes (one rule, in core), changing and auditing
// nothing; a refusal's message names its command once.
func TestOperatorRefusesCDCPublisher(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, op, ob := newOpStore(t, 4)
	ids := writeEvents(t, s, ob, "a", "b", "c")
	publishAll(t, s, 4)
	_, err := s.AcquireGeneration(ctx, driver.AcquireParams{Kind: driver.KindCDC, Holder: "cdc"})
	require.NoError(t, err)

	_, err = op.Replay(ctx, core.ReplayParams{IDs: ids, Audit: &core.AuditEntry{Actor: "t", Command: "replay"}})
	var re *core.ReplayError
	require.ErrorAs(t, err, &re)
	require.ErrorIs(t, err, core.ErrReplayCDC)
	require.Equal(t, 1, strings.Count(err.Error(), "outbox:"), err.Error())
	_, err = op.ResizeLanes(ctx, 8, core.AuditEntry{Actor: "t", Command: "lanes resize"})
	require.ErrorIs(t, err, core.ErrResizeCDC)
	require.Equal(t, 1, strings.Count(err.Error(), "outbox:"), err.Error())

	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, driver.Stats{Published: 3}, driver.Stats{Pending: st.Pending, Parked: st.Parked, Published: st.Published})
	lanes, err := s.LaneCount(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, lanes)
	log, err := op.AuditLog(ctx, core.AuditListParams{})
	require.NoError(t, err)
	require.Empty(t, log)
	require.Zero(t, s.notified.Load())
}

// On a store that is no single writer, PruneInbox writes its audit row with -1 in the
// transaction of the horizon raise and sets it in the transaction of the last deletion: when a
// deletion fails, the horizon stays raised, the row stays at -1, and a later prune deletes the
// rest. On a single writer all of it is one transaction: a failed deletion raises nothing and
// audits nothing.
func TestOperatorPruneInboxTransactions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	old := time.Now().Add(-2 * time.Hour).UTC()
	for _, multi := range []bool{true, false} {
		t.Run(fmt.Sprint("multi-writer=", multi), func(t *testing.T) {
			t.Parallel()
			s, op, _ := newOpStore(t, 1)
			s.multiWriter = multi
			in, err := core.NewInbox[*memory.Tx](ctx, s, nil)
			require.NoError(t, err)
			for i := range 5 {
				_, err := in.Process(ctx, "c", core.InboxMessage{EventID: fmt.Sprint("e", i), Payload: []byte("p"), OccurredAt: old}, func(context.Context, *memory.Tx, core.InboxMessage) error { return nil })
				require.NoError(t, err)
			}
			audit := core.AuditEntry{Actor: "t", Command: "inbox prune"}
			s.failPrune = 2 // the second batch of 2 fails
			_, err = op.PruneInbox(ctx, "c", time.Now().Add(-time.Hour), 2, audit)
			require.ErrorIs(t, err, errStep)
			require.Equal(t, 1, strings.Count(err.Error(), "prune inbox"), err.Error())
			log, err := op.AuditLog(ctx, core.AuditListParams{})
			require.NoError(t, err)
			h, err := func() (h time.Time, err error) {
				err = s.InTx(ctx, func(ctx context.Context, tx *memory.Tx) error { h, err = s.Horizon(ctx, tx, "c"); return err })
				return h, err
			}()
			require.NoError(t, err)
			if multi {
				require.Len(t, log, 1)
				require.EqualValues(t, -1, log[0].Rows, "the deletions did not finish")
				require.False(t, h.IsZero(), "the horizon raise committed")
			} else {
				require.Empty(t, log, "one transaction: nothing audited")
				require.True(t, h.IsZero(), "one transaction: the horizon did not move")
			}
			s.failPrune = 0
			n, err := op.PruneInbox(ctx, "c", time.Now().Add(-time.Hour), 2, audit)
			require.NoError(t, err)
			want := int64(5)
			if multi {
				want = 3 // the first batch of the failed prune committed
			}
			require.EqualValues(t, want, n)
			log, err = op.AuditLog(ctx, core.AuditListParams{})
			require.NoError(t, err)
			require.EqualValues(t, want, log[len(log)-1].Rows)
		})
	}
}

// The argument checks run before the store is touched, and NewOperator refuses bad options.
func TestOperatorChecks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	_, err := core.NewOperator(nil, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	s, op, _ := newOpStore(t, 4)
	for _, o := range []core.OperatorOptions{{StatusDestinations: -1}, {StatusRateRecords: 2_000_000}, {StatusRateWindow: -time.Second}} {
		_, err := core.NewOperator(s, &o)
		require.ErrorIs(t, err, core.ErrInvalidOptions, "%+v", o)
	}
	_, err = op.Replay(ctx, core.ReplayParams{})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	_, err = op.ResetLanes(ctx, core.ResetLanesParams{Lanes: []int{4}}, core.AuditEntry{})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	_, err = op.ResizeLanes(ctx, 0, core.AuditEntry{})
	require.ErrorIs(t, err, core.ErrInvalidOptions)
	_, err = op.PruneInbox(ctx, "", time.Now(), 1, core.AuditEntry{})
	require.ErrorIs(t, err, core.ErrInvalidMessage)
	log, err := op.AuditLog(ctx, core.AuditListParams{})
	require.NoError(t, err)
	require.Empty(t, log)
}
