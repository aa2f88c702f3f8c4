package memory_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/reconcile"
	"github.com/stretchr/testify/require"
)

var _ reconcile.InboxReader = (*memory.Store)(nil)

// memoryCapabilities are the optional capabilities of the memory store, which the conformance
// suite checks.
const memoryCapabilities = conformance.Notifier | conformance.Waker | conformance.OperatorStore | conformance.LaneResizer |
	conformance.SingleWriter | conformance.LaneInserter | conformance.CheckpointStore |
	conformance.LogReleaser | conformance.InboxBatchStore | conformance.InboxReader |
	conformance.CheckpointReleaser | conformance.AuditWriter | conformance.IngressCounter

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Harness[*memory.Tx]{
		New: func(t *testing.T, lanes int) conformance.Adapter[*memory.Tx] {
			s, err := memory.New(&memory.Options{Lanes: lanes, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			return s
		},
		Effect: func(ctx context.Context, tx *memory.Tx, key string) error {
			return tx.Incr(key)
		},
		EffectCount: func(ctx context.Context, a conformance.Adapter[*memory.Tx], key string) (int, error) {
			return a.(*memory.Store).Counter(key), nil
		},
		Capabilities: memoryCapabilities,
		NewForeign: func(t *testing.T, _ conformance.Adapter[*memory.Tx]) conformance.Adapter[*memory.Tx] {
			s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			return s
		},
		CDC: &conformance.CDCHarness[*memory.Tx]{
			Source: func(t *testing.T, a conformance.Adapter[*memory.Tx], name string) driver.ChangeSource {
				return a.(*memory.Store).ChangeSource()
			},
			LosePosition: func(t *testing.T, a conformance.Adapter[*memory.Tx], src driver.ChangeSource) {
				a.(*memory.Store).PurgeLog()
			},
		},
	})
}
