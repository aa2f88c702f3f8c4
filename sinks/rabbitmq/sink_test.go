package rabbitmq_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// Bad options are a *core.OptionError naming the field; a bad URL's error never quotes it.
func TestOptionErrors(t *testing.T) {
	t.Parallel()
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	for _, c := range []struct {
		field string
		url   string
		o     *rabbitmq.Options
	}{
		{"url", "", nil},
		{"url", "http://user:s3cret@host/", nil},
		{"Concurrency", url, &rabbitmq.Options{Concurrency: -1}},
		{"ConfirmTimeout", url, &rabbitmq.Options{ConfirmTimeout: -time.Second}},
		{"MaxMessageBytes", url, &rabbitmq.Options{MaxMessageBytes: -1}},
		{"Config.Recovery", url, &rabbitmq.Options{Config: &amqp.Config{Recovery: &amqp.Recovery{}}}},
	} {
		_, err := rabbitmq.New(c.url, c.o)
		var oe *core.OptionError
		require.True(t, errors.As(err, &oe), "%s: %v", c.field, err)
		require.Equal(t, c.field, oe.Field)
		require.NotContains(t, err.Error(), "s3cret")
	}
	s, err := rabbitmq.New(url, nil)
	require.NoError(t, err, "New does not dial")
	require.NoError(t, s.Close())
	out := s.Send(context.Background(), []core.Message{message("queue-name", "a", 0)})
	require.ErrorIs(t, out[0], rabbitmq.ErrClosed)

	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](context.Background(), store, nil)
	require.NoError(t, err)
	h := func(context.Context, *memory.Tx, *rabbitmq.Delivery) error { return nil }
	for _, c := range []struct {
		field string
		queue string
		o     *rabbitmq.ConsumerOptions
	}{
		{"queue", "", nil},
		{"Prefetch", "q", &rabbitmq.ConsumerOptions{Prefetch: 65536}},
		{"MaxBatch", "q", &rabbitmq.ConsumerOptions{MaxBatch: -1}},
		{"MaxBatch", "q", &rabbitmq.ConsumerOptions{MaxBatch: 33}}, // above the default Prefetch, 32
		{"MaxBatch", "q", &rabbitmq.ConsumerOptions{Prefetch: 10, MaxBatch: 11}},
		{"BatchWait", "q", &rabbitmq.ConsumerOptions{BatchWait: -1}},
		{"MaxAttempts", "q", &rabbitmq.ConsumerOptions{MaxAttempts: -1}},
		{"RetryDelay", "q", &rabbitmq.ConsumerOptions{RetryDelay: -1}},
		{"Config.Recovery", "q", &rabbitmq.ConsumerOptions{Config: &amqp.Config{Recovery: &amqp.Recovery{}}}},
	} {
		_, err := rabbitmq.NewConsumer(url, c.queue, inbox, "c", h, c.o)
		var oe *core.OptionError
		require.True(t, errors.As(err, &oe), "%s: %v", c.field, err)
		require.Equal(t, c.field, oe.Field)
	}
}

// TestConfirmTimeout: confirms held back longer than ConfirmTimeout (a 2s latency on the
// broker-to-client direction) make the call's messages fail with the retryable
// ErrConfirmTimeout within about ConfirmTimeout; the next call, on a fresh channel, succeeds
// once the latency is gone.
func TestConfirmTimeout(t *testing.T) {
	t.Parallel()
	q := newQueue(t, nil)
	p, proxied := newProxy(t)
	sink, err := rabbitmq.New(proxied, &rabbitmq.Options{ConfirmTimeout: 300 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	require.Equal(t, []error{nil}, sink.Send(context.Background(), []core.Message{message(q, "a", 0)}))
	_, err = p.Toxics.AddToxicJson(strings.NewReader(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":2000}}`))
	require.NoError(t, err)
	start := time.Now()
	out := sink.Send(context.Background(), []core.Message{message(q, "a", 1), message(q, "b", 1)})
	took := time.Since(start)
	for _, err := range out {
		require.ErrorIs(t, err, rabbitmq.ErrConfirmTimeout)
		require.False(t, core.IsPermanent(err))
	}
	require.Less(t, took, 1500*time.Millisecond, "the call waited past ConfirmTimeout")
	require.NoError(t, p.Toxics.RemoveToxic(context.Background(), "slow"))
	require.Eventually(t, func() bool {
		return sink.Send(context.Background(), []core.Message{message(q, "c", 0)})[0] == nil
	}, 15*time.Second, 100*time.Millisecond)
}
