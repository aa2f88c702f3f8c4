package core_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

func valid() core.Event {
	return core.Event{AggregateType: "order", AggregateID: "42", Type: "order.created", Payload: []byte(`{}`)}
}

func TestNormalizeFillsDefaults(t *testing.T) {
	t.Parallel()
	ev, err := driver.Normalize(0, valid(), core.Limits{})
	require.NoError(t, err)
	id, err := uuid.Parse(ev.ID)
	require.NoError(t, err)
	require.Equal(t, uuid.Version(7), id.Version())
	require.Equal(t, "order/42", ev.PartitionKey)

	in := valid()
	in.ID, in.PartitionKey = "my-id", "custom"
	ev, err = driver.Normalize(0, in, core.Limits{})
	require.NoError(t, err)
	require.Equal(t, "my-id", ev.ID)
	require.Equal(t, "custom", ev.PartitionKey)
}

func TestNormalizeRejectsInvalidFields(t *testing.T) {
	t.Parallel()
	cases := map[string]func(*core.Event){
		"ID":               func(e *core.Event) { e.ID = "has space" },
		"AggregateType":    func(e *core.Event) { e.AggregateType = "" },
		"AggregateID":      func(e *core.Event) { e.AggregateID = "" },
		"Type":             func(e *core.Event) { e.Type = "order created" },
		"SchemaID":         func(e *core.Event) { e.SchemaID = "a/b" },
		"Destination":      func(e *core.Event) { e.Destination = "x;drop" },
		"PartitionKey":     func(e *core.Event) { e.PartitionKey = "bad\x00key" },
		"Tenant":           func(e *core.Event) { e.Tenant = strings.Repeat("t", 256) },
		"CausationID":      func(e *core.Event) { e.CausationID = "\xff" },
		"CorrelationID":    func(e *core.Event) { e.CorrelationID = "a\nb" },
		"AggregateVersion": func(e *core.Event) { e.AggregateVersion = -1 },
		"Payload":          func(e *core.Event) { e.Payload = make([]byte, 11) },
		"Headers":          func(e *core.Event) { e.Headers = map[string]string{"bad key": "v"} },
	}
	for field, mutate := range cases {
		t.Run(field, func(t *testing.T) {
			t.Parallel()
			ev := valid()
			mutate(&ev)
			_, err := driver.Normalize(3, ev, core.Limits{MaxPayloadBytes: 10})
			require.ErrorIs(t, err, core.ErrInvalidEvent)
			var ve *core.ValidationError
			require.True(t, errors.As(err, &ve))
			require.Equal(t, field, ve.Field)
			require.Equal(t, 3, ve.Index)
		})
	}
}

func TestNormalizeHeaderLimits(t *testing.T) {
	t.Parallel()
	ev := valid()
	ev.Headers = map[string]string{"a": "1", "b": "2", "c": "3"}
	_, err := driver.Normalize(0, ev, core.Limits{MaxHeaders: 2})
	require.ErrorIs(t, err, core.ErrInvalidEvent)
	_, err = driver.Normalize(0, ev, core.Limits{MaxHeaderBytes: 5})
	require.ErrorIs(t, err, core.ErrInvalidEvent)
	_, err = driver.Normalize(0, ev, core.Limits{})
	require.NoError(t, err)
}

// The lane function is part of the storage format: every adapter stores its value, so it must
// never change. These golden values pin it.
func TestLaneOfIsStable(t *testing.T) {
	t.Parallel()
	// Computed independently (Python FNV-1a 32-bit of the UTF-8 bytes, mod 64).
	golden := map[string]int{"": 5, "order/42": 18, "customer/7": 47, "ünïcode": 43}
	for key, want := range golden {
		require.Equal(t, want, driver.LaneOf(key, 64), "key %q", key)
	}
	for i := 0; i < 1000; i++ {
		l := driver.LaneOf(fmt.Sprint(i), 7)
		require.True(t, l >= 0 && l < 7)
	}
}

func TestTruncateErrorKeepsUTF8(t *testing.T) {
	t.Parallel()
	s := strings.Repeat("é", 1000) // 2000 bytes
	got := driver.TruncateError(s)
	require.LessOrEqual(t, len(got), 1024)
	require.True(t, strings.HasPrefix(s, got))
	require.Equal(t, "short", driver.TruncateError("short"))
}

func TestDefaultLimits(t *testing.T) {
	t.Parallel()
	require.Equal(t, driver.DefaultListLimit, driver.ListParams{}.PageSize())
	require.Equal(t, driver.DefaultListLimit, driver.ListParams{Limit: -1}.PageSize())
	require.Equal(t, 7, driver.ListParams{Limit: 7}.PageSize())
	require.Equal(t, driver.DefaultPruneLimit, driver.PruneParams{}.BatchSize())
	require.Equal(t, 7, driver.PruneParams{Limit: 7}.BatchSize())
	require.Equal(t, driver.DefaultPruneLimit, driver.PruneLimit(0))
	require.Equal(t, 3, driver.PruneLimit(3))
}

func TestLanesOption(t *testing.T) {
	t.Parallel()
	n, err := driver.LanesOption(0)
	require.NoError(t, err)
	require.Equal(t, core.DefaultLanes, n)
	n, err = driver.LanesOption(core.MaxLanes)
	require.NoError(t, err)
	require.Equal(t, core.MaxLanes, n)
	for _, bad := range []int{-1, core.MaxLanes + 1} {
		_, err := driver.LanesOption(bad)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "Lanes", oe.Field)
		require.ErrorIs(t, err, core.ErrInvalidOptions)
	}
}
