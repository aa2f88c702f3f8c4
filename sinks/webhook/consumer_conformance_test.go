package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
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
	runConsumerSuite(t, 0)
}

// TestConsumerConformanceBatch runs the consumer suite with the Sink in batch mode
// (Options.BatchSize 4): the pusher sends up to 4 queued messages per Send, so the Handler
// gets batch requests (one inbox transaction each), and a batch it refuses for good (a
// poison event in it) is sent again one event per request by the Sink.
func TestConsumerConformanceBatch(t *testing.T) {
	t.Parallel()
	runConsumerSuite(t, 4)
}

func runConsumerSuite(t *testing.T, batchSize int) {
	var batches atomic.Int64
	t.Cleanup(func() {
		if batchSize > 1 && batches.Load() == 0 {
			t.Errorf("batch mode: the Handler got no batch request")
		}
		t.Logf("%d batch requests", batches.Load())
	})
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		secret := newSecret(t)
		var serving atomic.Pointer[http.Handler]
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Content-Type") == webhook.BatchContentType {
				batches.Add(1)
			}
			h := serving.Load()
			if h == nil {
				http.Error(w, "consumer not running", http.StatusServiceUnavailable)
				return
			}
			(*h).ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		sink := newSink(t, webhook.Options{Secrets: []string{secret}, Timeout: 30 * time.Second, BatchSize: batchSize})
		p := newPusher(t, sink, batchSize)
		dest := srv.URL + "/events"
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: dest,
			Sink:        outboxSink{p},
			PublishUndecodable: func(ctx context.Context) error {
				wh, err := standardwebhooks.NewWebhook(secret)
				if err != nil {
					return err
				}
				p.add(entry{raw: func(ctx context.Context) error {
					return postRaw(ctx, wh, dest, "raw-"+p.nextID(), []byte("not an outbox event"))
				}})
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
	sink  *webhook.Sink
	batch int // most messages per Send

	mu    sync.Mutex
	queue []entry
	dead  int
	busy  int // being sent now: still pending
	seq   atomic.Int64
	wake  chan struct{}
}

// entry is an outboxed message, or a raw request (raw != nil).
type entry struct {
	m   core.Message
	raw func(ctx context.Context) error
}

func newPusher(t *testing.T, sink *webhook.Sink, batch int) *pusher {
	p := &pusher{sink: sink, batch: max(batch, 1), wake: make(chan struct{}, 1)}
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

func (p *pusher) add(e entry) {
	p.mu.Lock()
	p.queue = append(p.queue, e)
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

// loop sends the head of the outbox (a raw request, or up to batch messages in one Send) until
// it is done with each (acknowledged or parked); the retryable ones go back to the head and are
// tried again 100ms later. In order: what a relay does for one partition key.
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
			if p.batch > 1 {
				// Let the suite's publishes (one message per Send) gather into a batch.
				time.Sleep(20 * time.Millisecond)
			}
			continue
		}
		n := 1
		if p.queue[0].raw == nil {
			for n < len(p.queue) && n < p.batch && p.queue[n].raw == nil {
				n++
			}
		}
		head := slices.Clone(p.queue[:n])
		p.queue = p.queue[n:]
		p.busy = n
		p.mu.Unlock()
		var out []error
		if head[0].raw != nil {
			out = []error{head[0].raw(ctx)}
		} else {
			msgs := make([]core.Message, n)
			for i := range head {
				msgs[i] = head[i].m
			}
			out = p.sink.Send(ctx, msgs)
		}
		var again []entry
		p.mu.Lock()
		for i, err := range out {
			switch {
			case err == nil:
			case core.IsPermanent(err):
				p.dead++
			default:
				again = append(again, head[i])
			}
		}
		p.queue = append(again, p.queue...)
		p.busy = 0
		p.mu.Unlock()
		if len(again) > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
}

// outboxSink is the suite's sink: it outboxes each message for the pusher and acknowledges it
// at once.
type outboxSink struct{ p *pusher }

func (o outboxSink) Send(ctx context.Context, msgs []core.Message) []error {
	for _, m := range msgs {
		o.p.add(entry{m: m})
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
