package sqs_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/encryption"
	"github.com/outboxkit/outbox/sinks/sqs"
)

type consumerBundle struct {
	store    *memory.Store
	consumer *sqs.Consumer[*memory.Tx]
	mu       sync.Mutex
	seen     []*sqs.Delivery
}

func (b *consumerBundle) deliveries() []*sqs.Delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*sqs.Delivery(nil), b.seen...)
}

// startConsumer runs a consumer of url until the test ends. handler (may be nil) runs after the
// bundle recorded the delivery and incremented the counter "applied:<event id>".
func startConsumer(t *testing.T, e *env, url string, opts *sqs.ConsumerOptions, handler sqs.Handler[*memory.Tx]) *consumerBundle {
	t.Helper()
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	b := &consumerBundle{store: store}
	if opts == nil {
		opts = &sqs.ConsumerOptions{}
	}
	if opts.WaitTime == 0 {
		opts.WaitTime = time.Second
	}
	if opts.VisibilityTimeout == 0 {
		// Short, so that messages of a receive whose answer was lost (the SDK retries it; seen
		// on a loaded machine) come back within seconds instead of stalling a FIFO group for the
		// 30 s default. Visibility is renewed while a message is processed, so this changes
		// nothing else.
		opts.VisibilityTimeout = 5 * time.Second
	}
	c, err := sqs.NewConsumer(e.sqs, url, inbox, "test-consumer", func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
		if handler != nil {
			if err := handler(ctx, tx, d); err != nil {
				return err
			}
		}
		b.mu.Lock()
		b.seen = append(b.seen, d)
		b.mu.Unlock()
		return tx.Incr("applied:" + d.Event.ID)
	}, opts)
	require.NoError(t, err)
	b.consumer = c
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return b
}

// eventually polls cond for a bounded time (a wait, not a timing assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestConsumerDeduplicatesThroughInboxAndDeletes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("inbox"), nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	a := event(url, "a", 0, []byte(`{"a":1}`))
	b := event(url, "b", 0, []byte(`{"b":1}`))
	for _, batch := range [][]core.Message{{a, b}, {a}} { // a is delivered twice (a relay resend)
		for _, err := range send(t, sink, batch) {
			require.NoError(t, err)
		}
	}
	cb := startConsumer(t, e, url, nil, nil)
	eventually(t, "3 messages deleted", func() bool { return cb.consumer.Stats().Deleted == 3 })
	st := cb.consumer.Stats()
	require.Equal(t, uint64(2), st.Applied)
	require.Equal(t, uint64(1), st.Duplicate)
	require.Equal(t, uint64(0), st.Failed)
	require.Equal(t, 1, cb.store.Counter("applied:"+a.ID), "effect applied once")
	require.Equal(t, 1, cb.store.Counter("applied:"+b.ID))
	vis, inflight := e.count(t, url)
	require.Equal(t, 0, vis+inflight, "every message deleted")

	var got *sqs.Delivery
	for _, d := range cb.deliveries() {
		if d.Event.ID == a.ID {
			got = d
		}
	}
	require.NotNil(t, got)
	require.Equal(t, a.CreatedAt, got.CreatedAt)
	require.Equal(t, a.Event, got.Event)
	require.Equal(t, url, got.QueueURL)
	require.Equal(t, 1, got.ReceiveCount)
}

func TestConsumerKeepsFIFOGroupOrder(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("order")+".fifo", nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	var msgs []core.Message
	for i := 0; i < 30; i++ {
		msgs = append(msgs, event(url, fmt.Sprint("g", i%3), i/3, []byte(fmt.Sprint(i))))
	}
	for _, err := range send(t, sink, msgs) {
		require.NoError(t, err)
	}
	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{Concurrency: 3, Pollers: 2}, nil)
	eventually(t, "30 applied", func() bool { return cb.consumer.Stats().Deleted == 30 })
	require.Equal(t, uint64(30), cb.consumer.Stats().Applied)
	last := map[string]int64{}
	for _, d := range cb.deliveries() {
		require.Equal(t, d.Event.PartitionKey, d.GroupID)
		require.Equal(t, last[d.GroupID]+1, d.Event.AggregateVersion, "group %s in order", d.GroupID)
		last[d.GroupID] = d.Event.AggregateVersion
	}
}

func dlqPair(t *testing.T, e *env, name string, maxReceive int) (url, dlq string) {
	t.Helper()
	dlq = e.queue(t, name+"-dlq", nil)
	url = e.queue(t, name, map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"%d"}`, e.queueARN(t, dlq), maxReceive),
	})
	return url, dlq
}

func TestConsumerLeavesUndecodableMessageForTheDLQ(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url, dlq := dlqPair(t, e, randName("undecodable"), 2)
	_, err := e.sqs.SendMessage(context.Background(), &awssqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("not an outbox message")})
	require.NoError(t, err)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	good := event(url, "a", 0, []byte("fine"))
	require.NoError(t, send(t, sink, []core.Message{good})[0])

	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{VisibilityTimeout: time.Second, ExtendEvery: 300 * time.Millisecond}, nil)
	got := e.receive(t, dlq, 1, 60*time.Second)
	require.Equal(t, 1, len(got), "the undecodable message reached the DLQ")
	require.Equal(t, "not an outbox message", aws.ToString(got[0].Body))
	st := cb.consumer.Stats()
	require.GreaterOrEqual(t, st.Failed, uint64(2), "received twice, refused twice")
	require.Equal(t, uint64(1), st.Applied)
	require.Equal(t, 1, cb.store.Counter("applied:"+good.ID))
}

func TestClaimCheckRoundTripAndTamperedObject(t *testing.T) {
	t.Parallel()
	e := setup(t)
	bucket := e.bucket(t)
	url, dlq := dlqPair(t, e, randName("claim"), 2)
	sink, err := sqs.New(e.sqs, &sqs.Options{MaxRequestBytes: 4096, ClaimCheck: &sqs.ClaimCheck{Client: e.s3, Bucket: bucket, Prefix: "outbox/"}})
	require.NoError(t, err)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1250) // 20,000 bytes
	small := event(url, "a", 0, []byte("small stays inline"))
	large := event(url, "a", 1, big)
	for _, err := range send(t, sink, []core.Message{small, large}) {
		require.NoError(t, err)
	}
	sum := sha256.Sum256(big)
	key := "outbox/" + hex.EncodeToString(sum[:])
	obj, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	require.NoError(t, err)
	stored, err := io.ReadAll(obj.Body)
	require.NoError(t, err)
	require.NoError(t, obj.Body.Close())
	require.Equal(t, big, stored, "payload stored under its SHA-256")

	// A third event whose object is tampered with before the consumer runs: refused, never
	// deleted, so it lands in the DLQ.
	other := bytes.Repeat([]byte("fedcba9876543210"), 1250)
	victim := event(url, "b", 0, other)
	require.NoError(t, send(t, sink, []core.Message{victim})[0])
	sum = sha256.Sum256(other)
	tampered := append([]byte(nil), other...)
	tampered[100] ^= 1
	_, err = e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket),
		Key: aws.String("outbox/" + hex.EncodeToString(sum[:])), Body: bytes.NewReader(tampered)})
	require.NoError(t, err)

	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{S3: e.s3, ClaimCheckBuckets: []string{bucket},
		VisibilityTimeout: time.Second, ExtendEvery: 300 * time.Millisecond}, nil)
	eventually(t, "2 applied", func() bool { return cb.consumer.Stats().Deleted == 2 })
	var payload []byte
	for _, d := range cb.deliveries() {
		if d.Event.ID == large.ID {
			payload = d.Event.Payload
		}
	}
	require.Equal(t, big, payload)

	got := e.receive(t, dlq, 1, 60*time.Second)
	require.Equal(t, 1, len(got), "the tampered message reached the DLQ")
	require.Equal(t, victim.ID, attr(got[0], "outbox.id"))
	require.Equal(t, 0, cb.store.Counter("applied:"+victim.ID))
	require.GreaterOrEqual(t, cb.consumer.Stats().Failed, uint64(2))
	require.Equal(t, uint64(2), cb.consumer.Stats().Deleted)
}

// The claim-check object of a clear and of an encrypted payload carries their digest, content
// type, event ID, type and schema id, and for the envelope its algorithm and key ID, in its S3
// metadata (issue 34).
func TestClaimCheckObjectMetadata(t *testing.T) {
	t.Parallel()
	e := setup(t)
	bucket := e.bucket(t)
	url := e.queue(t, randName("claimmeta"), nil)
	sink, err := sqs.New(e.sqs, &sqs.Options{MaxRequestBytes: 4096, ClaimCheck: &sqs.ClaimCheck{Client: e.s3, Bucket: bucket, Prefix: "outbox/"}})
	require.NoError(t, err)

	path := filepath.Join(t.TempDir(), "keyring.json")
	_, err = encryption.RotateKey(path, "acme", time.Now())
	require.NoError(t, err)
	kr, err := encryption.OpenKeyring(path)
	require.NoError(t, err)
	keyID, err := kr.CurrentKey(t.Context(), "acme")
	require.NoError(t, err)
	cipher, err := encryption.New(encryption.Options{Keys: kr})
	require.NoError(t, err)

	plain := event(url, "a", 0, bytes.Repeat([]byte(`{"n":"0123456789"}`), 1000))
	plain.Headers["content-type"] = "application/json"
	secret := event(url, "b", 0, bytes.Repeat([]byte(`{"s":"0123456789"}`), 1000))
	secret.Headers["content-type"] = "application/json"
	evs := []core.Event{secret.Event}
	require.NoError(t, cipher.EncryptPayloads(t.Context(), evs))
	secret.Event = evs[0]
	require.True(t, encryption.IsEnvelope(secret.Payload))
	for _, err := range send(t, sink, []core.Message{plain, secret}) {
		require.NoError(t, err)
	}

	for _, tc := range []struct {
		m           core.Message
		contentType string            // of the S3 object
		extra       map[string]string // beyond the fields of every object
	}{
		{plain, "application/json", nil},
		{secret, "application/octet-stream", map[string]string{"outboxkit-encryption": "aes-256-gcm/v1", "outboxkit-key-id": keyID}},
	} {
		sum := sha256.Sum256(tc.m.Payload)
		key := "outbox/" + hex.EncodeToString(sum[:])
		head, err := e.s3.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		require.NoError(t, err)
		obj, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		require.NoError(t, err)
		stored, err := io.ReadAll(obj.Body)
		require.NoError(t, err)
		require.NoError(t, obj.Body.Close())
		require.Equal(t, tc.m.Payload, stored)
		storedSum := sha256.Sum256(stored)

		want := map[string]string{
			"outboxkit-sha256":       hex.EncodeToString(storedSum[:]),
			"outboxkit-content-type": "application/json",
			"outboxkit-event-id":     tc.m.ID,
			"outboxkit-type":         "order.updated",
			"outboxkit-schema-id":    "order.v1",
		}
		maps.Copy(want, tc.extra)
		require.Equal(t, want, head.Metadata, "event %s", tc.m.ID)
		require.Equal(t, tc.contentType, aws.ToString(head.ContentType))
	}
	env, err := encryption.Parse(secret.Payload)
	require.NoError(t, err)
	require.Equal(t, keyID, env.KeyID)
}

func TestConsumerReleasesInFlightMessagesOnShutdown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("shutdown"), nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	m := event(url, "a", 0, []byte("slow"))
	require.NoError(t, send(t, sink, []core.Message{m})[0])

	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	started := make(chan struct{})
	c, err := sqs.NewConsumer(e.sqs, url, inbox, "c", func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}, &sqs.ConsumerOptions{WaitTime: time.Second, VisibilityTimeout: 10 * time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	<-started
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, uint64(1), c.Stats().Released)
	require.Equal(t, uint64(0), c.Stats().Deleted)
	// Released at once: visible again long before its 10-minute visibility timeout.
	got := e.receive(t, url, 1, 30*time.Second)
	require.Equal(t, 1, len(got))
	require.Equal(t, m.ID, attr(got[0], "outbox.id"))
}

func TestConsumerExtendsVisibilityOfSlowHandler(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("slow"), nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	m := event(url, "a", 0, []byte("slow"))
	require.NoError(t, send(t, sink, []core.Message{m})[0])
	var stolen int
	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{VisibilityTimeout: 2 * time.Second, ExtendEvery: 300 * time.Millisecond},
		func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
			// While this handler runs (longer than the visibility timeout), nobody else gets it.
			out, err := e.sqs.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 5})
			if err != nil {
				return err
			}
			stolen = len(out.Messages)
			return nil
		})
	eventually(t, "applied and deleted", func() bool { return cb.consumer.Stats().Deleted == 1 })
	require.Equal(t, 0, stolen)
	require.Equal(t, 1, cb.deliveries()[0].ReceiveCount)
}

func TestConsumerOptionsValidated(t *testing.T) {
	t.Parallel()
	client := awssqs.New(awssqs.Options{Region: testRegion})
	store, err := memory.New(nil)
	require.NoError(t, err)
	inbox, err := core.NewInbox[*memory.Tx](t.Context(), store, nil)
	require.NoError(t, err)
	h := func(context.Context, *memory.Tx, *sqs.Delivery) error { return nil }
	for field, o := range map[string]*sqs.ConsumerOptions{
		"MaxMessages":       {MaxMessages: 11},
		"WaitTime":          {WaitTime: 21 * time.Second},
		"VisibilityTimeout": {VisibilityTimeout: time.Millisecond},
		"ExtendEvery":       {VisibilityTimeout: time.Second, ExtendEvery: time.Second},
		"RequestTimeout":    {RequestTimeout: -time.Second},
	} {
		_, err := sqs.NewConsumer(client, "u", inbox, "c", h, o)
		var oe *core.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, field, oe.Field)
	}
	_, err = sqs.NewConsumer[*memory.Tx](client, "u", nil, "c", h, nil)
	require.ErrorIs(t, err, core.ErrInvalidOptions)
}

// A panicking handler fails its message like an error: nothing is applied, the consumer keeps
// running, and the redelivered message is applied once.
func TestConsumerRecoversHandlerPanic(t *testing.T) {
	t.Parallel()
	e := setup(t)
	url := e.queue(t, randName("panic"), nil)
	sink, err := sqs.New(e.sqs, nil)
	require.NoError(t, err)
	a := event(url, "a", 0, []byte(`{"a":1}`))
	for _, err := range send(t, sink, []core.Message{a}) {
		require.NoError(t, err)
	}
	var calls sync.Map
	cb := startConsumer(t, e, url, &sqs.ConsumerOptions{VisibilityTimeout: time.Second},
		func(ctx context.Context, tx *memory.Tx, d *sqs.Delivery) error {
			if _, again := calls.LoadOrStore(d.Event.ID, true); !again {
				panic("handler bug")
			}
			return nil
		})
	eventually(t, "the redelivered message applied and deleted", func() bool { return cb.consumer.Stats().Deleted == 1 })
	st := cb.consumer.Stats()
	require.Equal(t, uint64(1), st.Failed, "the panicking attempt counts as failed")
	require.Equal(t, uint64(1), st.Applied)
	require.Equal(t, 1, cb.store.Counter("applied:"+a.ID), "applied once, by the second attempt")
}
