package mysql_test

import (
	"context"
	"database/sql"
	"testing"

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
	conformance.InboxReader

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
