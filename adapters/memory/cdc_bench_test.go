package memory_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/memory"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testkit"
)

// BenchmarkCDCDrain measures the CDC relay's own cost on the reference adapter: draining a
// 200,000-event backlog from the in-memory change log (no database).
//
//	go test ./adapters/memory -run '^$' -bench CDC -benchtime 1x
func BenchmarkCDCDrain(b *testing.B) {
	for range b.N {
		s, err := memory.New(&memory.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		ob, err := core.NewOutbox[*memory.Tx](context.Background(), s, nil)
		if err != nil {
			b.Fatal(err)
		}
		testkit.CheckpointHead(b, s, s.ChangeSource())
		const n = 200000
		for i := 0; i < n; i += 1000 {
			err := s.InTx(context.Background(), func(ctx context.Context, tx *memory.Tx) error {
				evs := make([]core.Event, 1000)
				for j := range evs {
					evs[j] = core.Event{AggregateType: "a", AggregateID: fmt.Sprint(i + j), Type: "t", PartitionKey: fmt.Sprint((i + j) % 1000), Payload: make([]byte, 256)}
				}
				_, err := ob.Write(ctx, tx, evs...)
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		d, rate := testkit.Drain(b, s, s.ChangeSource(), n, 1000, false)
		b.ReportMetric(rate, "events/s")
		b.Logf("drained %d in %v", n, d.Round(time.Millisecond))
	}
}
