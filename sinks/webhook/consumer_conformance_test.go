package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	"github.com/outboxkit/outbox/sinks/webhook"
)

// TestConsumerConformance runs the consumer suite against the Handler. A webhook has no broker
// queue: the sender is the queue. So the suite's "broker" is a tiny in-test relay (pusher): the
// suite's Sink puts each message in the pusher's outbox and returns; the pusher sends every
// outboxed message with this package's Sink to an httptest server serving the Handler, again
// and again (100ms apart) until the answer is 2xx (acknowledged) or permanent (the relay parks
// it: the dead-letter path). Pending counts the messages neither acknowledged nor parked.
// Before Start, the endpoint answers 503 (the consumer is not running: the messages wait in
// the outbox). PublishUndecodable outboxes a request signed with the Standard Webhooks
// reference library but without the ce- headers.
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		secret := newSecret(t)
		var serving atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := serving.Load()
			if h == nil {
				http.Error(w, "consumer not running", http.StatusServiceUnavailable)
				return
			}
			(*h).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		sink := newSink(t, webhook.Options{Secrets: []string{secret}, Timeout: 30 * time.Second})
		p := newPusher(t)
		dest := srv.URL + "/events"
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: dest,
			Sink:        p.sinkOf(sink),
			PublishUndecodable: func(ctx context.Context) error {
				wh, err := standardwebhooks.NewWebhook(secret)
				if err != nil {
					return err
				}
				p.add(func(ctx context.Context) error {
					return postRaw(ctx, wh, dest, "raw-"+p.nextID(), []byte("not an outbox event"))
				})
				return nil
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				rc, err := webhook.NewHandler(inbox, consumer, func(ctx context.Context, tx *memory.Tx, d *webhook.Delivery) error {
					return h(ctx, tx, &d.Event)
				}, &webhook.HandlerOptions{Secrets: []string{secret}, Logger: quiet()})
				require.NoError(t, err)
				var hh http.Handler = rc
				serving.Store(&hh)
				t.Cleanup(func() { serving.Store(nil) })
			},
			Pending:     func(context.Context) (int, error) { return p.pending(), nil },
			DeadLetters: func(context.Context) (int, error) { return p.parked(), nil },
		}
	})
	conformance.RunConsumer(t, h)
}

// pusher is the outbox and delivery loop of a relay, in a test: it sends each outboxed
// message, in order, until it is acknowledged or refused for good.
type pusher struct {
	mu    sync.Mutex
	queue []func(ctx context.Context) error
	dead  int
	busy  int // being sent now: still pending
	seq   atomic.Int64
	wake  chan struct{}
}

func newPusher(t *testing.T) *pusher {
	p := &pusher{wake: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.loop(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return p
}

func (p *pusher) nextID() string { return fmt.Sprint(p.seq.Add(1)) }

func (p *pusher) add(send func(ctx context.Context) error) {
	p.mu.Lock()
	p.queue = append(p.queue, send)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *pusher) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) + p.busy
}

func (p *pusher) parked() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dead
}

// loop sends the head of the outbox until it is done with it (acknowledged or parked); a
// retryable failure waits 100ms and tries again. One message at a time, in order: what a
// relay does for one partition key.
func (p *pusher) loop(ctx context.Context) {
	for ctx.Err() == nil {
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-p.wake:
			}
			continue
		}
		send := p.queue[0]
		p.queue = p.queue[1:]
		p.busy = 1
		p.mu.Unlock()
		for {
			err := send(ctx)
			if err == nil || core.IsPermanent(err) {
				p.mu.Lock()
				p.busy = 0
				if err != nil {
					p.dead++
				}
				p.mu.Unlock()
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// sinkOf is the suite's sink: it outboxes each message for s and acknowledges it at once.
func (p *pusher) sinkOf(s *webhook.Sink) core.Sink { return outboxSink{p, s} }

type outboxSink struct {
	p *pusher
	s *webhook.Sink
}

func (o outboxSink) Send(ctx context.Context, msgs []core.Message) []error {
	for _, m := range msgs {
		o.p.add(func(ctx context.Context) error { return o.s.Send(ctx, []core.Message{m})[0] })
	}
	return make([]error, len(msgs))
}

// postRaw posts body signed by wh with webhook-id id and no other header; the outcome is
// classified as the Sink does (2xx acknowledged, 408/409/425/429/5xx retryable, else
// permanent).
func postRaw(ctx context.Context, wh *standardwebhooks.Webhook, url, id string, body []byte) error {
	now := time.Now()
	sig, err := wh.Sign(id, now, body)
	if err != nil {
		return core.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return core.Permanent(err)
	}
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(now.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	err = fmt.Errorf("status %d", resp.StatusCode)
	switch c := resp.StatusCode; {
	case c >= 200 && c < 300:
		return nil
	case c == 408 || c == 409 || c == 425 || c == 429 || c >= 500:
		return err
	}
	return core.Permanent(err)
}
