package sinkkit

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/sinks/internal/wire"
)

// A map lent again holds only the attributes of its new entry: one left over from an earlier
// request would be sent as the new message's attribute.
func TestAttrMapsLendClearedMaps(t *testing.T) {
	p := NewAttrMaps(func(a *wire.Attr) string { return a.Value })
	entry := func(attrs ...wire.Attr) Entry { return Entry{Enc: &wire.Encoded{Attrs: attrs}} }
	for range 3 { // a sync.Pool may drop what was put back: only a reuse can keep stale entries
		maps, release := p.Fill([]Entry{
			entry(wire.Attr{Name: "id", Value: "1"}, wire.Attr{Name: "tenant", Value: "t1"}),
			entry(wire.Attr{Name: "id", Value: "2"}),
		})
		require.Equal(t, []map[string]string{{"id": "1", "tenant": "t1"}, {"id": "2"}}, maps)
		release()
		maps, release = p.Fill([]Entry{entry(wire.Attr{Name: "id", Value: "3"})})
		require.Equal(t, []map[string]string{{"id": "3"}}, maps)
		release()
		maps, release = p.Fill([]Entry{entry(), entry(wire.Attr{Name: "type", Value: "x"})})
		require.Equal(t, []map[string]string{{}, {"type": "x"}}, maps)
		release()
	}
}
