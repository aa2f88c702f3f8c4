package consume_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/encryption"
	"github.com/outboxkit/outbox/sinks/internal/consume"
)

// sealedDelivery is a consumer's Delivery: the event in a field Event.
type sealedDelivery struct {
	Event core.Event
}

// With an inbox that decrypts (core.InboxOptions.Decrypter), the handler reads the plaintext
// in its sealedDelivery; once the tenant's key is destroyed, the message is poison: Decide
// dead-letters it and the inbox recorded nothing.
func TestProcessorDecryptsAndDeadLettersShredded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "keyring.json")
	_, err := encryption.RotateKey(path, "acme", time.Now())
	require.NoError(t, err)
	kr, err := encryption.OpenKeyring(path)
	require.NoError(t, err)
	c, err := encryption.New(encryption.Options{Keys: kr})
	require.NoError(t, err)

	events := []core.Event{
		{ID: "d1", AggregateType: "order", AggregateID: "1", Type: "order.placed", Tenant: "acme", Payload: []byte("plain one")},
		{ID: "d2", AggregateType: "order", AggregateID: "2", Type: "order.placed", Tenant: "acme", Payload: []byte("plain two")},
		{ID: "d3", AggregateType: "order", AggregateID: "3", Type: "order.placed", Tenant: "acme", Payload: []byte("plain three")},
	}
	require.NoError(t, c.EncryptPayloads(ctx, events))

	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](ctx, store, &core.InboxOptions{Decrypter: c})
	require.NoError(t, err)
	var seen []string
	proc, err := consume.NewProcessor(inbox, "c", func(_ context.Context, tx *memory.Tx, d *sealedDelivery) error {
		seen = append(seen, string(d.Event.Payload))
		return tx.Incr("applied")
	}, func(d *sealedDelivery) *core.Event { return &d.Event }, errPanic)
	require.NoError(t, err)

	d := &sealedDelivery{Event: events[0]}
	_, err = proc.Process(ctx, d, consume.Message(&d.Event, time.Time{}, nil, "q/1"))
	require.NoError(t, err)
	ds := []*sealedDelivery{{Event: events[1]}}
	_, err = proc.ProcessBatch(ctx, ds, []core.InboxMessage{consume.Message(&ds[0].Event, time.Time{}, nil, "q/2")})
	require.NoError(t, err)
	require.Equal(t, []string{"plain one", "plain two"}, seen)

	// Tampered: poison.
	bad := &sealedDelivery{Event: events[2]}
	bad.Event.Payload = append([]byte(nil), events[2].Payload...)
	bad.Event.Payload[len(bad.Event.Payload)-1] ^= 1
	_, err = proc.Process(ctx, bad, consume.Message(&bad.Event, time.Time{}, nil, "q/3"))
	require.ErrorIs(t, err, encryption.ErrTampered)
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))

	// Shredded: poison, nothing recorded, the handler not run.
	_, err = encryption.DestroyKeys(path, "acme", "", time.Now())
	require.NoError(t, err)
	require.NoError(t, kr.Reload()) // a running Keyring sees it within a second
	d3 := &sealedDelivery{Event: events[2]}
	_, err = proc.Process(ctx, d3, consume.Message(&d3.Event, time.Time{}, nil, "q/3"))
	require.ErrorIs(t, err, encryption.ErrKeyDestroyed)
	require.True(t, consume.IsPoison(err))
	require.Equal(t, consume.DeadLetter, consume.Decide(ctx, err))
	require.EqualValues(t, 2, store.Counter("applied"))
	require.Len(t, seen, 2)
	// A key this process does not know (yet) is retried, not dead-lettered.
	require.Equal(t, consume.Retry, consume.Decide(ctx, encryption.ErrUnknownKey))
}
