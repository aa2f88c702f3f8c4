package testkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// InboxApply is the adapters' BenchmarkInboxApply body: b.N distinct, unversioned messages of
// consumer "bench" through in, from par goroutines, batch messages per transaction
// (Inbox.Process when batch is 1, Inbox.ProcessBatch otherwise), each applied by handler. It
// reports msgs/s.
func InboxApply[TTx any](b *testing.B, in *core.Inbox[TTx], par, batch int, handler core.Handler[TTx]) {
	ctx := context.Background()
	now := time.Now()
	msg := func(i int64) core.InboxMessage {
		return core.InboxMessage{EventID: fmt.Sprint("evt-", i), Payload: []byte(`{"n":1}`), OccurredAt: now}
	}
	var next atomic.Int64 // messages taken
	b.ResetTimer()
	var wg sync.WaitGroup
	for range par {
		wg.Go(func() {
			for {
				end := next.Add(int64(batch))
				first := end - int64(batch) + 1
				if first > int64(b.N) {
					return
				}
				end = min(end, int64(b.N))
				if batch == 1 {
					res, err := in.Process(ctx, "bench", msg(first), handler)
					if err != nil || res.Outcome != core.Applied {
						b.Errorf("Process: %v %v", res.Outcome, err)
						return
					}
					continue
				}
				msgs := make([]core.InboxMessage, 0, end-first+1)
				for i := first; i <= end; i++ {
					msgs = append(msgs, msg(i))
				}
				res, err := in.ProcessBatch(ctx, "bench", msgs, func(ctx context.Context, tx TTx, _ int, m core.InboxMessage) error {
					return handler(ctx, tx, m)
				})
				if err != nil {
					b.Errorf("ProcessBatch: %v", err)
					return
				}
				for _, r := range res {
					if r.Outcome != core.Applied {
						b.Errorf("ProcessBatch: outcome %v", r.Outcome)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
