package core_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// FuzzNormalize: Normalize either refuses an event with a *ValidationError or returns one whose
// every field follows the documented rules, and normalising it again changes nothing.
func FuzzNormalize(f *testing.F) {
	f.Add("", "order", "42", "order.created", "", "", "", "k", "v", []byte(`{}`))
	f.Add("id with space", "a", "b", "t", "", "", "", "", "", []byte(nil))
	f.Add("x", "a", "\uFFFE", "t", "\u0085", "d", "\uFDD0", "h", "\U0010FFFF", []byte{0xff})
	f.Add("x", "a.b-c_d", "é€😀\uFFFD", "t", "k", "dest", "tenant", "h.k", "\x7f", []byte("x"))
	f.Fuzz(func(t *testing.T, id, aggType, aggID, typ, pk, dest, tenant, hk, hv string, payload []byte) {
		ev := core.Event{ID: id, AggregateType: aggType, AggregateID: aggID, Type: typ, PartitionKey: pk,
			Destination: dest, Tenant: tenant, CausationID: tenant, CorrelationID: aggID, SchemaID: dest, Payload: payload}
		if hk != "" || hv != "" {
			ev.Headers = map[string]string{hk: hv}
		}
		n, err := driver.Normalize(7, ev, core.Limits{})
		if err != nil {
			var ve *core.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, 7, ve.Index)
			require.ErrorIs(t, err, core.ErrInvalidEvent)
			return
		}
		require.NotEmpty(t, n.ID)
		require.NotEmpty(t, n.PartitionKey)
		for _, s := range []string{n.AggregateID, n.PartitionKey, n.Tenant, n.CausationID, n.CorrelationID, hv} {
			require.Empty(t, driver.CheckText(s), "%q", s)
			require.LessOrEqual(t, len(s), 255)
		}
		again, err := driver.Normalize(0, n, core.Limits{})
		require.NoError(t, err)
		require.Equal(t, n, again)
	})
}

// FuzzInboxMessage: Process refuses a message that breaks a rule with a *MessageError before
// anything runs; what it accepts is applied once and then a Duplicate.
func FuzzInboxMessage(f *testing.F) {
	f.Add("c", "e1", "order/1", int64(1), "queue/1", int64(1764547200))
	f.Add("c\n", "", "", int64(-1), "", int64(0))
	f.Add("c", "e", "a\x00", int64(2), "q\u0085", int64(1<<62))
	f.Fuzz(func(t *testing.T, consumer, id, entity string, version int64, pos string, unix int64) {
		b := setupInbox(t, nil)
		msg := core.InboxMessage{EventID: id, Entity: entity, Version: version, SourcePosition: pos}
		if unix != 0 {
			msg.OccurredAt = timeOf(unix)
		}
		res, err := b.inbox.Process(t.Context(), consumer, msg, apply)
		if err != nil {
			var me *core.MessageError
			require.ErrorAs(t, err, &me)
			require.Equal(t, 0, b.store.Counter(id))
			return
		}
		require.Equal(t, core.Applied, res.Outcome)
		res, err = b.inbox.Process(t.Context(), consumer, msg, apply)
		require.NoError(t, err)
		require.Equal(t, core.Duplicate, res.Outcome)
		require.Equal(t, 1, b.store.Counter(id))
	})
}
