// Package cetest holds the sinks' CloudEvents decode check: what an independent reader
// (cloudevents/sdk-go's protocol bindings) decodes from a message a sink wrote must be the
// event, attribute by attribute. Tests only.
package cetest

import (
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
)

// RequireDecoded checks that sdk-go read msg in binary content mode into a valid CloudEvent
// of m: specversion 1.0, id, source, type, subject, content type, time, the payload byte for
// byte, and exactly extensions as string attributes.
func RequireDecoded(t testing.TB, msg binding.Message, m core.Message, source, contentType string, extensions map[string]string) *event.Event {
	t.Helper()
	require.Equal(t, binding.EncodingBinary, msg.ReadEncoding())
	ev, err := binding.ToEvent(t.Context(), msg)
	require.NoError(t, err)
	require.NoError(t, ev.Validate())
	require.Equal(t, "1.0", ev.SpecVersion())
	require.Equal(t, m.ID, ev.ID())
	require.Equal(t, source, ev.Source())
	require.Equal(t, m.Type, ev.Type())
	require.Equal(t, m.AggregateType+"/"+m.AggregateID, ev.Subject())
	require.Equal(t, contentType, ev.DataContentType())
	require.True(t, m.CreatedAt.Equal(ev.Time()), "time %v, want %v", ev.Time(), m.CreatedAt)
	require.Equal(t, m.Payload, ev.Data())
	ext := map[string]string{}
	for k, v := range ev.Extensions() {
		s, ok := v.(string)
		require.True(t, ok, "extension %s is %T", k, v)
		ext[k] = s
	}
	require.Equal(t, extensions, ext)
	return ev
}
