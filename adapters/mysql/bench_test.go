package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// Benchmarks need OUTBOXKIT_MYSQL_DSN (they skip without it, CI or not: CI does not run
// benchmarks). OUTBOXKIT_BENCH_EVENTS sets the drain backlog (default 200,000).
//
//	go test ./adapters/mysql -run '^$' -bench . -benchtime 1x -count 3

func benchConfig(b *testing.B) {
	if os.Getenv("OUTBOXKIT_MYSQL_DSN") == "" {
		b.Skip("OUTBOXKIT_MYSQL_DSN is not set")
	}
}

func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// benchPayload is a ~1.1 KiB JSON payload.
var benchPayload = func() []byte {
	p := []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"c-000000","lines":[`)
	for i := range 12 {
		p = fmt.Appendf(p, `{"sku":"sku-%03d","qty":%d,"price":"10.00","description":"a line of about sixty bytes"},`, i, i+1)
	}
	return append(p[:len(p)-1], `],"total":"50.00","currency":"EUR"}`...)
}()

const benchKeys = 1000

// seed writes n committed events over benchKeys partition keys: the first 1,000 through the
// store, the rest copied server-side (INSERT ... SELECT) with fresh ids, keeping key order.
func seed(b *testing.B, s *mysql.Store, n int) {
	b.Helper()
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	if err != nil {
		b.Fatal(err)
	}
	first := min(n, benchKeys)
	evs := make([]core.Event, first)
	for i := range evs {
		evs[i] = core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i % benchKeys), Type: "order.created",
			Payload: benchPayload, Headers: map[string]string{"trace_id": "0af7651916cd43dd8448eb211c80319c"}}
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, evs...)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	have := first
	for round := 1; have < n; round++ {
		res, err := s.DB().ExecContext(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version,
			type, schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id,
			lane, created_at)
			SELECT CONCAT('r', ?, '-', seq), aggregate_type, aggregate_id, aggregate_version, type, schema_id,
			partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, UTC_TIMESTAMP(6)
			FROM outbox ORDER BY seq LIMIT ?`, round, min(have, n-have))
		if err != nil {
			b.Fatal(err)
		}
		k, _ := res.RowsAffected()
		have += int(k)
	}
	if _, err := s.DB().ExecContext(ctx, "ANALYZE TABLE outbox"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDrain: n committed events are drained by W core.Relay workers (ordered, batch 500,
// mark mode "set" unless -delete) into a sink that acknowledges everything; "raw-delete" is the
// ceiling of the same database: a bare DELETE ... ORDER BY seq LIMIT 1000 loop. Each iteration
// drains a fresh backlog (seeding is not timed); events/s is the metric.
func BenchmarkDrain(b *testing.B) {
	benchConfig(b)
	n := benchEvents()
	cases := []struct {
		name    string
		workers int
		delete  bool
	}{
		{"raw-delete", 0, true},
		{"relay-1", 1, false},
		{"relay-2", 2, false},
		{"relay-4", 4, false},
		{"relay-1-delete", 1, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				s := newStore(b, nil)
				seed(b, s, n)
				b.StartTimer()
				start := time.Now()
				if c.workers == 0 {
					rawDrain(b, s.DB())
				} else {
					relayDrain(b, s, c.workers, c.delete, n)
				}
				total += time.Since(start)
				b.StopTimer()
				b.Logf("%s: %d events in %v, deadlock retries %d", c.name, n, time.Since(start).Round(time.Millisecond), s.DeadlockRetries())
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
}

func rawDrain(b *testing.B, db *sql.DB) {
	for {
		res, err := db.Exec("DELETE FROM outbox ORDER BY seq LIMIT 1000")
		if err != nil {
			b.Fatal(err)
		}
		if k, _ := res.RowsAffected(); k == 0 {
			return
		}
	}
}

func relayDrain(b *testing.B, s *mysql.Store, workers int, del bool, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var published atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	sink := core.SinkFunc(func(ctx context.Context, msgs []core.Message) []error {
		if published.Add(int64(len(msgs))) >= int64(n) {
			once.Do(func() { close(done) })
		}
		return make([]error, len(msgs))
	})
	// Register every worker first, as in a steady state: each relay's first claim then takes
	// its fair share instead of the first one taking every lane until the next rebalance.
	for i := range workers {
		if _, err := s.Heartbeat(ctx, driver.HeartbeatParams{Owner: fmt.Sprintf("bench-%d", i), TTL: 30 * time.Second}); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	relays := make([]*core.Relay, workers)
	for i := range relays {
		r, err := core.NewRelay(s, sink, core.StaticRouter{Default: "null"}, &core.RelayOptions{
			Owner: fmt.Sprintf("bench-%d", i), DeleteOnPublish: del, Logger: quietLogger(),
			PollInterval: 10 * time.Millisecond,
		})
		if err != nil {
			b.Fatal(err)
		}
		relays[i] = r
		wg.Go(func() { _ = r.Run(ctx) })
	}
	select {
	case <-done:
	case <-time.After(10 * time.Minute):
		b.Fatalf("drain did not finish: %d of %d sent", published.Load(), n)
	}
	// Sent is not settled: wait until every record is marked.
	for {
		var settled uint64
		for _, r := range relays {
			settled += r.Stats().Published
		}
		if settled >= uint64(n) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	wg.Wait()
	for i, r := range relays {
		st := r.Stats()
		fetches := max(st.Fetches, 1)
		per := func(d time.Duration) time.Duration { return (d / time.Duration(fetches)).Round(10 * time.Microsecond) }
		b.Logf("relay %d: sends %d published %d claim-lost %d; per batch (%d records): fetch %v send %v settle %v",
			i, st.Sends, st.Published, st.ClaimLost, st.Published/fetches, per(st.FetchTime), per(st.SendTime), per(st.SettleTime))
	}
}

// BenchmarkProducer: one transaction per op inserting a domain row ("domain") or a domain row
// plus one outbox event of ~1.1 KiB ("outbox"), from C concurrent clients. tx/s is the metric.
func BenchmarkProducer(b *testing.B) {
	benchConfig(b)
	for _, clients := range []int{1, 4, 16} {
		for _, withOutbox := range []bool{false, true} {
			name := fmt.Sprintf("domain/clients-%d", clients)
			if withOutbox {
				name = fmt.Sprintf("outbox/clients-%d", clients)
			}
			b.Run(name, func(b *testing.B) {
				s := newStore(b, nil)
				ctx := context.Background()
				if _, err := s.DB().Exec(`CREATE TABLE orders (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
					customer VARCHAR(64) NOT NULL, total DECIMAL(12,2) NOT NULL, created_at DATETIME(6) NOT NULL)
					ENGINE=InnoDB`); err != nil {
					b.Fatal(err)
				}
				ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, clients)
				for c := range clients {
					wg.Go(func() {
						for {
							i := next.Add(1)
							if i > int64(b.N) {
								return
							}
							err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
								if _, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, total, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
									fmt.Sprintf("c-%d", c), "50.00"); err != nil {
									return err
								}
								if !withOutbox {
									return nil
								}
								_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: strconv.FormatInt(i, 10),
									Type: "order.created", Payload: benchPayload})
								return err
							})
							if err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				select {
				case err := <-errs:
					b.Fatal(err)
				default:
				}
				b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tx/s")
			})
		}
	}
}

// BenchmarkInboxApply measures core.Inbox of distinct, unversioned messages with a one-INSERT
// handler: serial (one consumer) and with 8 concurrent consumers of one consumer name, one
// transaction per message (Process, batch=1) or 100 per transaction (ProcessBatch). msgs/s is
// the metric.
func BenchmarkInboxApply(b *testing.B) {
	for _, par := range []int{1, 8} {
		for _, batch := range []int{1, 100} {
			b.Run(fmt.Sprintf("consumers=%d/batch=%d", par, batch), func(b *testing.B) {
				ctx := context.Background()
				benchConfig(b)
				s := newStore(b, nil)
				if _, err := s.DB().ExecContext(ctx, `CREATE TABLE bench_effects (id varchar(64) PRIMARY KEY)`); err != nil {
					b.Fatal(err)
				}
				in, err := core.NewInbox[*sql.Tx](ctx, s, nil)
				if err != nil {
					b.Fatal(err)
				}
				handler := func(ctx context.Context, tx *sql.Tx, msg core.InboxMessage) error {
					_, err := tx.ExecContext(ctx, `INSERT INTO bench_effects (id) VALUES (?)`, msg.EventID)
					return err
				}
				testkit.InboxApply(b, in, par, batch, handler)
			})
		}
	}
}
