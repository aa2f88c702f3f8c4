package testkit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core/driver"
)

// MemoryConsumer is the consumer suite's harness (conformance.RunConsumer) on the in-memory
// inbox, whose effect counters are memory.Tx.Incr and memory.Store.Counter, for the broker
// consumer that broker builds. Set the harness's timings on the result.
func MemoryConsumer(broker func(t *testing.T) conformance.ConsumerBroker[*memory.Tx]) conformance.ConsumerHarness[*memory.Tx] {
	return conformance.ConsumerHarness[*memory.Tx]{
		Inbox: func(t *testing.T) driver.InboxStore[*memory.Tx] {
			s, err := memory.New(nil)
			require.NoError(t, err)
			return s
		},
		Effect: func(_ context.Context, tx *memory.Tx, key string) error { return tx.Incr(key) },
		EffectCount: func(_ context.Context, s driver.InboxStore[*memory.Tx], key string) (int, error) {
			return s.(*memory.Store).Counter(key), nil
		},
		Broker: broker,
	}
}
