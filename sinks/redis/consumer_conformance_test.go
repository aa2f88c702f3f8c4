package redis_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/conformance"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
	redissink "github.com/outboxkit/outbox/sinks/redis"
)

// TestConsumerConformance runs the consumer suite against the consumer on the test server: a
// fresh stream and group per subtest, the sink of this package to publish, and the in-memory
// inbox. A message is acknowledged once it left the group's pending entries list (XACK) and
// the group has read past it. It runs with the default MaxBatch (the entries of a read in one
// inbox transaction) and, as TestConsumerConformanceUnbatched, with MaxBatch 1.
func TestConsumerConformance(t *testing.T) {
	t.Parallel()
	consumerConformance(t, 0)
}

// TestConsumerConformanceUnbatched is TestConsumerConformance with MaxBatch 1: one inbox
// transaction per entry.
func TestConsumerConformanceUnbatched(t *testing.T) {
	t.Parallel()
	consumerConformance(t, 1)
}

func consumerConformance(t *testing.T, maxBatch int) {
	h := testkit.MemoryConsumer(func(t *testing.T) conformance.ConsumerBroker[*memory.Tx] {
		cl := newClient(t)
		stream := newStream(t)
		group := "g"
		sink, err := redissink.New(cl, &redissink.Options{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		return conformance.ConsumerBroker[*memory.Tx]{
			Destination: stream,
			Sink:        sink,
			PublishUndecodable: func(ctx context.Context) error {
				return cl.XAdd(ctx, &goredis.XAddArgs{Stream: stream, Values: []any{"body", "not an outbox entry"}}).Err()
			},
			Start: func(t *testing.T, inbox *core.Inbox[*memory.Tx], consumer string, h conformance.ConsumerHandler[*memory.Tx]) {
				c, err := redissink.NewConsumer(cl, stream, group, inbox, consumer, func(ctx context.Context, tx *memory.Tx, d *redissink.Delivery) error {
					return h(ctx, tx, &d.Event)
				}, &redissink.ConsumerOptions{Name: "c1", Block: 100 * time.Millisecond, RetryBackoff: 100 * time.Millisecond,
					MaxDeliveries: 3, MaxBatch: maxBatch, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- c.Run(ctx) }()
				t.Cleanup(func() {
					cancel()
					require.NoError(t, <-done)
				})
			},
			Pending: func(ctx context.Context) (int, error) { return pending(ctx, cl, stream, group) },
			DeadLetters: func(ctx context.Context) (int, error) {
				n, err := cl.XLen(ctx, stream+".dlq").Result()
				return int(n), err
			},
		}
	})
	conformance.RunConsumer(t, h)
}

// pending counts the entries of stream that group has not acknowledged: its pending entries
// list plus the entries after its last-delivered-id (before the group exists, the whole
// stream), read in one MULTI/EXEC so that the consumer cannot move in between. On Redis 7 it
// cross-checks XINFO GROUPS' pending and lag.
func pending(ctx context.Context, cl *goredis.Client, stream, group string) (int, error) {
	var info *goredis.XInfoGroupsCmd
	var sum *goredis.XPendingCmd
	var all *goredis.XMessageSliceCmd
	_, err := cl.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		info = p.XInfoGroups(ctx, stream)
		sum = p.XPending(ctx, stream, group)
		all = p.XRange(ctx, stream, "-", "+")
		return nil
	})
	if err != nil {
		if goredis.HasErrorPrefix(err, "ERR no such key") || goredis.HasErrorPrefix(err, "NOGROUP") {
			n, err := cl.XLen(ctx, stream).Result() // the consumer has not created its group yet
			return int(n), err
		}
		return 0, err
	}
	for _, g := range info.Val() {
		if g.Name != group {
			continue
		}
		last := entryID(g.LastDeliveredID)
		after := 0
		for _, m := range all.Val() {
			if id := entryID(m.ID); id[0] > last[0] || id[0] == last[0] && id[1] > last[1] {
				after++
			}
		}
		n := int(sum.Val().Count) + after
		if g.Lag >= 0 && int(g.Pending+g.Lag) != n {
			return 0, fmt.Errorf("XINFO GROUPS says pending %d + lag %d, XPENDING and XRANGE say %d + %d", g.Pending, g.Lag, sum.Val().Count, after)
		}
		return n, nil
	}
	return 0, fmt.Errorf("group %s of %s not found", group, stream)
}

// entryID parses a stream entry ID "ms-seq".
func entryID(s string) [2]uint64 {
	ms, seq, _ := strings.Cut(s, "-")
	a, _ := strconv.ParseUint(ms, 10, 64)
	b, _ := strconv.ParseUint(seq, 10, 64)
	return [2]uint64{a, b}
}
