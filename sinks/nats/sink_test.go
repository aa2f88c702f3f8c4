package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// TestDuplicateWithinWindowStoredOnce: an event sent again within the stream's duplicate
// window (a relay's resend after a lost PubAck) is acknowledged and stored once, whether it
// comes in a later Send or twice in one.
func TestDuplicateWithinWindowStoredOnce(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("d") + ".events"
	stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, Duplicates: time.Minute})
	sink, err := natssink.New(nc, nil)
	require.NoError(t, err)
	ctx := context.Background()
	a, b := message(subject, "a", 0), message(subject, "a", 1)
	for _, err := range sink.Send(ctx, []core.Message{a, b}) {
		require.NoError(t, err)
	}
	for _, err := range sink.Send(ctx, []core.Message{a, b, a}) {
		require.NoError(t, err, "a duplicate is acknowledged")
	}
	n, err := streamMsgs(ctx, stream)
	require.NoError(t, err)
	require.Equal(t, 2, n, "each event stored once")
	raw, err := readStream(ctx, stream, 2)
	require.NoError(t, err)
	require.Equal(t, a.ID, raw[0].Header.Get(natssink.HeaderMsgID))
	require.Equal(t, b.ID, raw[1].Header.Get(natssink.HeaderMsgID))
}

// TestInvalidSubjectPermanent: a destination that is no publish subject is refused before
// sending, permanently, and holds back the later messages of its key only.
func TestInvalidSubjectPermanent(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("v") + ".events"
	stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}})
	sink, err := natssink.New(nc, nil)
	require.NoError(t, err)
	for _, bad := range []string{"", "a b", "a.*", "a.>", "a..b", ".a", "a."} {
		m1, m2, other := message(subject, "k", 0), message(subject, "k", 1), message(subject, "o", 0)
		m1.Destination = bad
		res := sink.Send(context.Background(), []core.Message{m1, m2, other})
		require.ErrorIs(t, res[0], natssink.ErrInvalidSubject, "%q", bad)
		require.ErrorIs(t, res[0], core.ErrUnknownDestination)
		require.True(t, core.IsPermanent(res[0]))
		require.ErrorIs(t, res[1], core.ErrNotAcknowledged)
		require.NoError(t, res[2])
	}
	n, err := streamMsgs(context.Background(), stream)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the other key's message, once (deduplicated)")
}

// TestNewOptions: bad options are *core.OptionError naming the field.
func TestNewOptions(t *testing.T) {
	t.Parallel()
	_, err := natssink.New(nil, nil)
	var oe *core.OptionError
	require.True(t, errors.As(err, &oe))
	require.Equal(t, "nc", oe.Field)
	nc := connect(t)
	for field, o := range map[string]natssink.Options{
		"Concurrency": {Concurrency: -1}, "MaxInFlight": {MaxInFlight: -1}, "AckTimeout": {AckTimeout: -time.Second},
	} {
		_, err := natssink.New(nc, &o)
		require.True(t, errors.As(err, &oe), field)
		require.Equal(t, field, oe.Field)
	}
}

// TestMaxPayloadBoundary: a message whose payload plus header block is exactly the server's
// max_payload is published; one byte more is refused before sending (the sink's own check,
// not the client's), permanently.
func TestMaxPayloadBoundary(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("m") + ".events"
	stream := newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}})
	sink, err := natssink.New(nc, nil)
	require.NoError(t, err)
	limit := int(nc.MaxPayload())
	fit := message(subject, "a", 0)
	fit.Payload = nil
	fit.Payload = make([]byte, limit-natssink.EncodedSize(&fit))
	require.Equal(t, limit, natssink.EncodedSize(&fit))
	over := message(subject, "b", 0)
	over.Payload = nil
	over.Payload = make([]byte, limit-natssink.EncodedSize(&over)+1)
	res := sink.Send(context.Background(), []core.Message{fit, over})
	require.NoError(t, res[0], "exactly max_payload")
	require.ErrorIs(t, res[1], natssink.ErrMessageTooLarge)
	require.True(t, core.IsPermanent(res[1]))
	require.Contains(t, res[1].Error(), "server max_payload", "refused before sending")
	raw, err := readStream(context.Background(), stream, 1)
	require.NoError(t, err)
	require.Len(t, raw[0].Data, len(fit.Payload))
}

// TestAckTimeoutRetryable: a publish nobody answers within AckTimeout (a stream that does not
// respond) is retryable, not permanent, and Send returns soon after AckTimeout.
func TestAckTimeoutRetryable(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	subject := unique("t") + ".events"
	f := newFakeStream(t, connect(t), subject, time.Hour, func(string) bool { return false })
	sink, err := natssink.New(nc, &natssink.Options{AckTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	res := sink.Send(context.Background(), []core.Message{message(subject, "a", 0), message(subject, "a", 1)})
	require.Error(t, res[0])
	require.False(t, core.IsPermanent(res[0]), "%v", res[0])
	require.ErrorIs(t, res[1], core.ErrNotAcknowledged, "not published behind the timed-out message")
	require.Less(t, time.Since(start), 3*time.Second)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.order["order/a"], 1, "the second message of the key was never published")
}

// TestStreamMaxMsgSizePermanent: a stream refusing a message as larger than its
// max_msg_size is a permanent ErrMessageTooLarge; the other key goes through.
func TestStreamMaxMsgSizePermanent(t *testing.T) {
	t.Parallel()
	nc := connect(t)
	js := newJS(t, nc)
	subject := unique("z") + ".events"
	newStream(t, js, jetstream.StreamConfig{Subjects: []string{subject}, MaxMsgSize: 2048})
	sink, err := natssink.New(nc, nil)
	require.NoError(t, err)
	big, small := message(subject, "a", 0), message(subject, "b", 0)
	big.Payload = make([]byte, 4096)
	res := sink.Send(context.Background(), []core.Message{big, small})
	require.ErrorIs(t, res[0], natssink.ErrMessageTooLarge)
	require.True(t, core.IsPermanent(res[0]), "%v", res[0])
	require.NoError(t, res[1])
}
