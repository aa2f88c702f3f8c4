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
	inboxApply(b, par, batch, func(msgs []core.InboxMessage) ([]core.InboxResult, error) {
		if batch == 1 {
			res, err := in.Process(ctx, "bench", msgs[0], handler)
			return []core.InboxResult{res}, err
		}
		return in.ProcessBatch(ctx, "bench", msgs, func(ctx context.Context, tx TTx, _ int, m core.InboxMessage) error {
			return handler(ctx, tx, m)
		})
	})
}

// InboxApplySet is InboxApply through Inbox.ProcessSet: handler applies each batch's messages
// at once.
func InboxApplySet[TTx any](b *testing.B, in *core.Inbox[TTx], par, batch int, handler core.SetHandler[TTx]) {
	ctx := context.Background()
	inboxApply(b, par, batch, func(msgs []core.InboxMessage) ([]core.InboxResult, error) {
		return in.ProcessSet(ctx, "bench", msgs, handler)
	})
}

// inboxApply hands b.N distinct messages, batch at a time, from par goroutines, to process and
// checks that each was Applied.
func inboxApply(b *testing.B, par, batch int, process func([]core.InboxMessage) ([]core.InboxResult, error)) {
	now := time.Now()
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
				msgs := make([]core.InboxMessage, 0, end-first+1)
				for i := first; i <= end; i++ {
					msgs = append(msgs, core.InboxMessage{EventID: fmt.Sprint("evt-", i), Payload: []byte(`{"n":1}`), OccurredAt: now})
				}
				res, err := process(msgs)
				if err != nil {
					b.Errorf("process: %v", err)
					return
				}
				for _, r := range res {
					if r.Outcome != core.Applied {
						b.Errorf("process: outcome %v", r.Outcome)
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
