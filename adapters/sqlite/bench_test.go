package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/sqlite"
	"github.com/outboxkit/outbox/core"
)

const (
	drainEvents = 20000
	drainKeys   = 1000
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// benchPayload is a ~256-byte JSON payload.
var benchPayload = []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"c-000000","lines":[{"sku":"sku-1","qty":1,"price":"10.00"},{"sku":"sku-2","qty":2,"price":"20.00"}],"total":"50.00","currency":"EUR","note":"benchmark payload of about two hundred and fifty-six bytes"}`)

// fillOutbox writes n events over keys partition keys, 1,000 per transaction.
func fillOutbox(b *testing.B, s *sqlite.Store, n, keys int) {
	b.Helper()
	ctx := context.Background()
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	if err != nil {
		b.Fatal(err)
	}
	const perTx = 1000
	for start := 0; start < n; start += perTx {
		evs := make([]core.Event, 0, perTx)
		for i := start; i < min(start+perTx, n); i++ {
			evs = append(evs, core.Event{
				AggregateType: "order", AggregateID: fmt.Sprint(i % keys), Type: "order.created",
				Payload: benchPayload, Headers: map[string]string{"trace_id": "0af7651916cd43dd8448eb211c80319c"},
			})
		}
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := out.Write(ctx, tx, evs...); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDrain measures the relay's drain rate: drainEvents events over drainKeys keys are
// written before the timer starts, then one core.Relay (ordered, default batch, core.DefaultBatchSize)
// delivers them to a sink that acknowledges everything. events/s is the metric. Sub-benchmarks:
// mark mode "set" or "delete", with OpenDB's synchronous=NORMAL or with synchronous=FULL.
func BenchmarkDrain(b *testing.B) {
	for _, c := range []struct {
		name      string
		del, full bool
	}{
		{"mark=set", false, false},
		{"mark=delete", true, false},
		{"mark=set/sync=full", false, true},
	} {
		del := c.del
		b.Run(c.name, func(b *testing.B) {
			var total int
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s := newTestStoreSync(b, &sqlite.Options{Logger: quiet}, c.full)
				fillOutbox(b, s, drainEvents, drainKeys)
				sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
					return make([]error, len(msgs))
				})
				relay, err := core.NewRelay(s, sink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
					PollInterval: 5 * time.Millisecond, DeleteOnPublish: del, Logger: quiet,
				})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				b.StartTimer()
				go func() { done <- relay.Run(ctx) }()
				for relay.Stats().Published < drainEvents {
					time.Sleep(200 * time.Microsecond)
				}
				b.StopTimer()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				total += drainEvents
				st, err := s.Stats(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if st.Pending != 0 {
					b.Fatalf("%d events still pending", st.Pending)
				}
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkInboxApply measures core.Inbox.Process of distinct messages with a trivial
// handler (one upsert in the same transaction), one transaction per message. msgs/s is the
// metric; sync=normal is OpenDB's setting, sync=full fsyncs every commit.
func BenchmarkInboxApply(b *testing.B) {
	b.Run("sync=normal", func(b *testing.B) { benchInboxApply(b, false) })
	b.Run("sync=full", func(b *testing.B) { benchInboxApply(b, true) })
}

func benchInboxApply(b *testing.B, full bool) {
	s := newTestStoreSync(b, &sqlite.Options{Logger: quiet}, full)
	in, err := core.NewInbox[*sql.Tx](b.Context(), s, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	handler := func(ctx context.Context, tx *sql.Tx, msg core.InboxMessage) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO effects (key, n) VALUES ('applied', 1)
			ON CONFLICT (key) DO UPDATE SET n = n + 1`)
		return err
	}
	now := time.Now()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := in.Process(ctx, "bench", core.InboxMessage{
			EventID: fmt.Sprint("evt-", i), Payload: benchPayload, OccurredAt: now,
		}, handler)
		if err != nil {
			b.Fatal(err)
		}
		if res.Outcome != core.Applied {
			b.Fatalf("outcome %v", res.Outcome)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkWrite measures producer transactions of one domain row and one event (BEGIN, domain
// INSERT, Outbox.Write, COMMIT) with OpenDB's settings; tx/s is the metric. It prices Insert's
// per-call transaction check (the database file of the caller's transaction).
func BenchmarkWrite(b *testing.B) {
	s := newTestStore(b, &sqlite.Options{Logger: quiet})
	ctx := context.Background()
	if _, err := s.DB().ExecContext(ctx, `CREATE TABLE domain (k INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO domain (k) VALUES (?)`, i); err != nil {
			b.Fatal(err)
		}
		if _, err := out.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % 1000),
			Type: "order.created", Payload: benchPayload}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tx/s")
}
