package mysql_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// BenchmarkProducerCost measures, in one run, the producer transaction three ways, interleaved
// (A B C, then C B A, ...) over OUTBOXKIT_BENCH_ROUNDS rounds (default 3) of
// OUTBOXKIT_BENCH_TX transactions each (default 3,000) from 4 and 16 clients:
//
//   - domain: one domain row;
//   - bare: one domain row plus a hand-written INSERT of the same outbox row (same table,
//     columns, ~1.1 KiB payload and lane) — no library code;
//   - write: one domain row plus Outbox.Write of the same event (checked against the lane
//     count: driver.LaneInserter, one INSERT ... VALUES whose lane is a subquery on the count read
//     LOCK IN SHARE MODE);
//   - unchecked: write through a store that hides InsertLanes, so Outbox.Write uses the
//     unchecked Insert (the cost of the lane-count check is write against unchecked);
//   - twostep: write through a store whose InsertLanes reads the count LOCK IN SHARE MODE in a
//     statement of its own, then inserts with the plain multi-row INSERT (what InsertLanes does
//     for several records: one more round trip).
//
// It reports the median tx/s of each and the medians of the per-round ratios write/bare,
// bare/domain, write/domain, write/unchecked and twostep/unchecked. Durable server:
//
//	source scripts/lib/mariadb.sh && OUTBOXKIT_MARIADB_DURABLE=1 mariadb_start
//	go test ./adapters/mysql -run '^$' -bench ProducerCost -benchtime 1x
func BenchmarkProducerCost(b *testing.B) {
	benchConfig(b)
	rounds, txs := benchEnvInt("OUTBOXKIT_BENCH_ROUNDS", 3), benchEnvInt("OUTBOXKIT_BENCH_TX", 3000)
	ctx := context.Background()
	for _, clients := range []int{4, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			s := newStore(b, nil)
			_, err := s.DB().Exec(`CREATE TABLE orders (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
				customer VARCHAR(64) NOT NULL, total DECIMAL(12,2) NOT NULL, created_at DATETIME(6) NOT NULL) ENGINE=InnoDB`)
			require.NoError(b, err)
			ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
			require.NoError(b, err)
			unchecked, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](plainInsert{s}), nil)
			require.NoError(b, err)
			twostep, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](twoStepInsert{plainInsert{s}}), nil)
			require.NoError(b, err)
			domain := func(ctx context.Context, tx *sql.Tx, i int64) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, total, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))",
					"c-"+strconv.FormatInt(i%1000, 10), "50.00")
				return err
			}
			writeWith := func(o *core.Outbox[*sql.Tx]) func(context.Context, *sql.Tx, int64) error {
				return func(ctx context.Context, tx *sql.Tx, i int64) error {
					if err := domain(ctx, tx, i); err != nil {
						return err
					}
					_, err := o.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: strconv.FormatInt(i, 10),
						Type: "order.created", Payload: benchPayload})
					return err
				}
			}
			variants := map[string]func(context.Context, *sql.Tx, int64) error{
				"domain": domain,
				"bare": func(ctx context.Context, tx *sql.Tx, i int64) error {
					if err := domain(ctx, tx, i); err != nil {
						return err
					}
					var id [13]byte
					_, _ = rand.Read(id[:])
					agg := strconv.FormatInt(i, 10)
					key := "order/" + agg
					_, err := tx.ExecContext(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key,
						payload, headers, lane, created_at) VALUES (?, ?, ?, ?, ?, ?, '{}', ?, UTC_TIMESTAMP(6))`,
						hex.EncodeToString(id[:]), "order", agg, "order.created", key, benchPayload, driver.LaneOf(key, core.DefaultLanes))
					return err
				},
				"write":     writeWith(ob),
				"unchecked": writeWith(unchecked),
				"twostep":   writeWith(twostep),
			}
			run := func(fn func(context.Context, *sql.Tx, int64) error) float64 {
				var next atomic.Int64
				var failed atomic.Value
				start := time.Now()
				var wg sync.WaitGroup
				for range clients {
					wg.Go(func() {
						for i := next.Add(1); i <= int64(txs); i = next.Add(1) {
							if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error { return fn(ctx, tx, i) }); err != nil {
								failed.Store(err)
								return
							}
						}
					})
				}
				wg.Wait()
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				return float64(txs) / time.Since(start).Seconds()
			}
			order := []string{"domain", "bare", "write", "unchecked", "twostep"}
			rates := map[string][]float64{}
			var wb, bd, wd, wu, tu []float64
			for r := range rounds {
				if r%2 == 1 {
					slices.Reverse(order)
				}
				got := map[string]float64{}
				for _, v := range order {
					got[v] = run(variants[v])
					rates[v] = append(rates[v], got[v])
				}
				wb = append(wb, got["write"]/got["bare"])
				bd = append(bd, got["bare"]/got["domain"])
				wd = append(wd, got["write"]/got["domain"])
				wu = append(wu, got["write"]/got["unchecked"])
				tu = append(tu, got["twostep"]/got["unchecked"])
				b.Logf("round %d: domain %.0f bare %.0f write %.0f unchecked %.0f twostep %.0f tx/s", r,
					got["domain"], got["bare"], got["write"], got["unchecked"], got["twostep"])
			}
			for v, r := range rates {
				b.ReportMetric(benchMedian(r), v+"_tx/s")
			}
			b.ReportMetric(benchMedian(wb), "write/bare")
			b.ReportMetric(benchMedian(bd), "bare/domain")
			b.ReportMetric(benchMedian(wd), "write/domain")
			b.ReportMetric(benchMedian(wu), "write/unchecked")
			b.ReportMetric(benchMedian(tu), "twostep/unchecked")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func benchEnvInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func benchMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// plainInsert is a store with only the OutboxStore methods: Outbox.Write then uses Insert,
// without the lane-count check.
type plainInsert struct{ s *mysql.Store }

func (p plainInsert) LaneCount(ctx context.Context) (int, error) { return p.s.LaneCount(ctx) }
func (p plainInsert) Insert(ctx context.Context, tx *sql.Tx, recs []driver.Record) error {
	return p.s.Insert(ctx, tx, recs)
}

// twoStepInsert checks the lane count with a locking read of its own, then inserts unchecked.
type twoStepInsert struct{ plainInsert }

func (p twoStepInsert) InsertLanes(ctx context.Context, tx *sql.Tx, lanes int, recs []driver.Record) error {
	var v string
	if err := tx.QueryRowContext(ctx, "SELECT value FROM outbox_meta WHERE name = 'lanes' LOCK IN SHARE MODE").Scan(&v); err != nil {
		return err
	}
	if v != strconv.Itoa(lanes) {
		return core.ErrLaneCountChanged
	}
	return p.s.Insert(ctx, tx, recs)
}
