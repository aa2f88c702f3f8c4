package logical

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
)

// IdentitySlot reads the slot back from a ChangeSource's Identity (a checkpoint's Source), and
// refuses other forms.
func TestIdentitySlot(t *testing.T) {
	t.Parallel()
	s, err := postgres.New(nilPool(t), &postgres.Options{Schema: "sales", Table: "outbox"})
	require.NoError(t, err)
	src, err := NewChangeSource(s, &Options{Slot: "relay_b"})
	require.NoError(t, err)
	slot, ok := IdentitySlot(src.identity("7301234567890123456"))
	require.True(t, ok)
	require.Equal(t, "relay_b", slot)
	for _, id := range []string{"", "log-1", "mysql:1/db.outbox", "postgres:1", "postgres:1/Bad-Slot/public.outbox", "postgres:1/s"} {
		_, ok := IdentitySlot(id)
		require.False(t, ok, id)
	}
}
