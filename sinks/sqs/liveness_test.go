package sqs_test

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/sqs"
)

// silentEnv is e with its SQS client going through a testkit.BlackHole to the emulator (its own
// transport: no connection shared with other tests).
func silentEnv(t *testing.T, e *env) (*env, *testkit.BlackHole) {
	t.Helper()
	u, err := url.Parse(e.ep)
	require.NoError(t, err)
	bh := testkit.NewBlackHole(t, u.Host)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	reqs := &counter{base: tr}
	p := *e
	p.reqs = reqs
	p.sqs = awssqs.NewFromConfig(awsConfig(reqs), func(o *awssqs.Options) { o.BaseEndpoint = aws.String("http://" + bh.Addr()) })
	return &p, bh
}

// A receive whose endpoint goes silent with the connection left open (the long poll in
// flight loses its answer, and so does every request on it) ends after WaitTime +
// RequestTimeout: the poller reconnects and, once the endpoint answers again, consumes within
// a few seconds. Without the bound the poller would wait on the dead connection for ever.
func TestConsumerReceiveBoundedOnSilentEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qurl := e.queue(t, randName("silent-recv"), nil)
	p, bh := silentEnv(t, e)
	direct, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	a, b := event(qurl, "a", 0, []byte(`{"a":1}`)), event(qurl, "b", 0, []byte(`{"b":1}`))
	cb := startConsumer(t, p, qurl, &sqs.ConsumerOptions{WaitTime: time.Second, RequestTimeout: time.Second}, nil)
	for _, err := range send(t, direct, []core.Message{a}) {
		require.NoError(t, err)
	}
	eventually(t, "a applied and deleted through the proxy", func() bool { return cb.consumer.Stats().Deleted == 1 })

	bh.Swallow()
	before := bh.Accepted()
	time.Sleep(2500 * time.Millisecond) // the poll in flight and the next are swallowed
	bh.Restore()
	for _, err := range send(t, direct, []core.Message{b}) {
		require.NoError(t, err)
	}
	restored := time.Now()
	// Bound: what is left of a swallowed receive (WaitTime + RequestTimeout = 2s), the pause
	// after failed receives (at most 800ms here), then a receive and the inbox: 6s is ample.
	require.Eventually(t, func() bool { return cb.store.Counter("applied:"+b.ID) == 1 }, 6*time.Second, 20*time.Millisecond,
		"b consumed within the bound after the endpoint answers again")
	t.Logf("consumed %v after the endpoint answered again; connections opened meanwhile: %d", time.Since(restored).Round(time.Millisecond), bh.Accepted()-before)
	require.Greater(t, bh.Accepted(), before, "the poller reconnected")
}

// A delete whose endpoint goes silent ends after RequestTimeout (the message is consumed again
// later, a duplicate for the inbox): the poller goes on receiving. Without the bound it would
// wait on the dead connection for ever, and the queue would no longer be consumed.
func TestConsumerDeleteBoundedOnSilentEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qurl := e.queue(t, randName("silent-del"), nil)
	p, bh := silentEnv(t, e)
	direct, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	a, b := event(qurl, "a", 0, []byte(`{"a":1}`)), event(qurl, "b", 0, []byte(`{"b":1}`))
	var swallowed atomic.Bool
	cb := startConsumer(t, p, qurl, &sqs.ConsumerOptions{WaitTime: time.Second, RequestTimeout: time.Second, VisibilityTimeout: 3 * time.Second},
		func(_ context.Context, _ *memory.Tx, d *sqs.Delivery) error {
			if d.Event.ID == a.ID && swallowed.CompareAndSwap(false, true) {
				bh.Swallow() // the inbox commits a; its delete goes into the black hole
				go func() {
					time.Sleep(300 * time.Millisecond)
					bh.Restore()
				}()
			}
			return nil
		})
	for _, err := range send(t, direct, []core.Message{a}) {
		require.NoError(t, err)
	}
	eventually(t, "a applied", func() bool { return cb.store.Counter("applied:"+a.ID) == 1 })
	for _, err := range send(t, direct, []core.Message{b}) {
		require.NoError(t, err)
	}
	// Bound: the swallowed delete (RequestTimeout = 1s), a receive swallowed before Restore
	// (2s), a pause and a receive: 8s is ample.
	require.Eventually(t, func() bool { return cb.store.Counter("applied:"+b.ID) == 1 }, 8*time.Second, 20*time.Millisecond,
		"b consumed although a's delete was swallowed")
	// a's delete was lost: a comes back after its visibility timeout, a duplicate.
	eventually(t, "a redelivered as a duplicate and deleted", func() bool { return cb.consumer.Stats().Duplicate >= 1 })
	require.Equal(t, 1, cb.store.Counter("applied:"+a.ID), "applied once")
}

// A Send whose endpoint goes silent returns after RequestTimeout with retryable failures (the
// relay gives Send no deadline: without the bound it would wait for ever); once the endpoint
// answers again the next Send succeeds.
func TestSinkSendBoundedOnSilentEndpoint(t *testing.T) {
	t.Parallel()
	e := setup(t)
	qurl := e.queue(t, randName("silent-send"), nil)
	p, bh := silentEnv(t, e)
	sink, err := sqs.New(p.sqs, &sqs.Options{RequestTimeout: time.Second})
	require.NoError(t, err)
	msgs := []core.Message{event(qurl, "a", 0, []byte(`{"a":1}`)), event(qurl, "b", 0, []byte(`{"b":1}`))}
	for _, err := range send(t, sink, msgs[:1]) {
		require.NoError(t, err, "through the proxy")
	}

	bh.Swallow()
	began := time.Now()
	done := make(chan []error, 1)
	go func() { done <- sink.Send(context.Background(), msgs[1:]) }()
	select {
	case out := <-done:
		took := time.Since(began)
		t.Logf("Send returned after %v: %v", took.Round(time.Millisecond), out)
		require.Less(t, took, 3*time.Second)
		require.Error(t, out[0])
		require.False(t, core.IsPermanent(out[0]), "a timeout is retryable")
	case <-time.After(5 * time.Second):
		t.Fatal("Send still waiting on a silent endpoint after 5s (RequestTimeout is 1s)")
	}
	bh.Restore()
	for _, err := range send(t, sink, msgs[1:]) {
		require.NoError(t, err, "the endpoint answers again")
	}
	require.Len(t, e.receive(t, qurl, 2, 10*time.Second), 2)
}
