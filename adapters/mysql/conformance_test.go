package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/reconcile"
)

// The store reads inbox records for reconciliation (conformance chain/reconcile checks them).
var _ reconcile.InboxReader = (*mysql.Store)(nil)

// capabilities are the store's optional capabilities, which the conformance suite checks.
const capabilities = conformance.Notifier | conformance.Waker | conformance.OperatorStore |
	conformance.LaneResizer | conformance.LaneInserter | conformance.CheckpointStore |
	conformance.Liveness | conformance.CheckpointReleaser | conformance.AuditWriter |
	conformance.InboxReader | conformance.IngressCounter

func harness(strategy mysql.ClaimStrategy) conformance.Harness[*sql.Tx] {
	return conformance.Harness[*sql.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*sql.Tx] {
			return newStore(t, &mysql.Options{Lanes: lanes, ClaimStrategy: strategy})
		},
		Effect: effect,
		EffectCount: func(ctx context.Context, a conformance.Adapter[*sql.Tx], key string) (int, error) {
			return effectCount(ctx, a.(*mysql.Store).DB(), key)
		},
		Capabilities: capabilities,
		NewUnmigrated: func(t *testing.T) conformance.Adapter[*sql.Tx] {
			db, _ := newDB(t)
			s, err := mysql.New(t.Context(), db, &mysql.Options{ClaimStrategy: strategy, Logger: quietLogger()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		// NewForeign is not offered: a transaction whose connection has another default
		// database writes into the Store's database (TestWriteInTransactionOnAnotherDatabase).
		Reopen: func(t *testing.T, a conformance.Adapter[*sql.Tx]) conformance.Adapter[*sql.Tx] {
			lanes, err := a.LaneCount(t.Context())
			require.NoError(t, err)
			s, err := mysql.New(t.Context(), a.(*mysql.Store).DB(), &mysql.Options{Lanes: lanes, ClaimStrategy: strategy, Logger: quietLogger()})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		KillSession: func(ctx context.Context, _ *testing.T, a conformance.Adapter[*sql.Tx], lane int) error {
			db := a.(*mysql.Store).DB()
			var holder sql.NullInt64
			if err := db.QueryRowContext(ctx, `SELECT lock_session FROM outbox_lanes WHERE lane = ?`, lane).Scan(&holder); err != nil {
				return err
			}
			if !holder.Valid {
				return fmt.Errorf("lane %d has no lock session", lane)
			}
			_, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", holder.Int64))
			return err
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	testConfig(t)
	for _, strategy := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimGetLock} {
		t.Run(strategy.String(), func(t *testing.T) {
			t.Parallel()
			// The "cdc" area runs in package binlog's TestConformance.
			conformance.Run(t, harness(strategy))
		})
	}
}
