package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// BenchmarkProducerCost measures, in one run, the producer transaction three ways, interleaved
// (A B C, then C B A, ...) over OUTBOXKIT_BENCH_ROUNDS rounds (default 3) of
// OUTBOXKIT_BENCH_TX transactions each (default 3,000) from 4 and 16 clients:
//
//   - domain: one domain row;
//   - bare: one domain row plus a hand-written INSERT of the same outbox row (same table,
//     columns, 1 KiB payload, transaction-group headers and lane) — no library code;
//   - write: one domain row plus Outbox.Write of the same event;
//   - unchecked: write through a store that hides InsertLanes, so Outbox.Write uses the
//     unchecked Insert (the cost of the lane-count check of driver.LaneInserter is write against
//     unchecked).
//
// It reports the median tx/s of each and the medians of the per-round ratios write/bare,
// bare/domain, write/domain and write/unchecked. Durable server:
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test ./adapters/postgres -run '^$' -bench ProducerCost -benchtime 1x
func BenchmarkProducerCost(b *testing.B) {
	testDSN(b)
	rounds, txs := envInt("OUTBOXKIT_BENCH_ROUNDS", 3), envInt("OUTBOXKIT_BENCH_TX", 3000)
	ctx := context.Background()
	for _, clients := range []int{4, 16} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			s, d := migratedStore(b, dbOptions{maxConns: int32(clients + 2)}, &Options{})
			_, err := d.pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL,
				amount bigint NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
			require.NoError(b, err)
			ob, err := core.NewOutbox(ctx, s, nil)
			require.NoError(b, err)
			unchecked, err := core.NewOutbox(ctx, driver.OutboxStore[pgx.Tx](plainInsert{s}), nil)
			require.NoError(b, err)
			payload := make([]byte, 1024)
			_, _ = rand.Read(payload)
			domain := func(ctx context.Context, tx pgx.Tx, i int64) error {
				_, err := tx.Exec(ctx, `INSERT INTO orders (customer, amount) VALUES ($1, $2)`,
					"customer-"+strconv.FormatInt(i%1000, 10), i)
				return err
			}
			variants := map[string]func(context.Context, pgx.Tx, int64) error{
				"domain": domain,
				"bare": func(ctx context.Context, tx pgx.Tx, i int64) error {
					if err := domain(ctx, tx, i); err != nil {
						return err
					}
					var id [13]byte
					_, _ = rand.Read(id[:])
					agg := strconv.FormatInt(i, 10)
					key := "order/" + agg
					// The headers Write stamps on a one-event call (its transaction group), so
					// that both rows carry the same bytes.
					headers := `{"outbox.tx_count":"1","outbox.tx_id":"` + uuid.Must(uuid.NewV7()).String() + `","outbox.tx_index":"0"}`
					_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, type, partition_key, payload, headers, lane)
						VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, hex.EncodeToString(id[:]), "order", agg, "order.created", key,
						payload, headers, driver.LaneOf(key, core.DefaultLanes))
					return err
				},
				"write": func(ctx context.Context, tx pgx.Tx, i int64) error {
					if err := domain(ctx, tx, i); err != nil {
						return err
					}
					_, err := ob.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: strconv.FormatInt(i, 10),
						Type: "order.created", Payload: payload})
					return err
				},
				"unchecked": func(ctx context.Context, tx pgx.Tx, i int64) error {
					if err := domain(ctx, tx, i); err != nil {
						return err
					}
					_, err := unchecked.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: strconv.FormatInt(i, 10),
						Type: "order.created", Payload: payload})
					return err
				},
			}
			order := []string{"domain", "bare", "write", "unchecked"}
			rates := map[string][]float64{}
			var wb, bd, wd, wu []float64
			for r := range rounds {
				if r%2 == 1 {
					slices.Reverse(order)
				}
				got := map[string]float64{}
				for _, v := range order {
					elapsed := produce(b, txs, d.pool, clients, false, nil, variants[v])
					got[v] = float64(txs) / elapsed.Seconds()
					rates[v] = append(rates[v], got[v])
				}
				wb = append(wb, got["write"]/got["bare"])
				bd = append(bd, got["bare"]/got["domain"])
				wd = append(wd, got["write"]/got["domain"])
				wu = append(wu, got["write"]/got["unchecked"])
				b.Logf("round %d: domain %.0f bare %.0f write %.0f unchecked %.0f tx/s", r, got["domain"], got["bare"], got["write"], got["unchecked"])
			}
			for v, r := range rates {
				b.ReportMetric(median(r), v+"_tx/s")
			}
			b.ReportMetric(median(wb), "write/bare")
			b.ReportMetric(median(bd), "bare/domain")
			b.ReportMetric(median(wd), "write/domain")
			b.ReportMetric(median(wu), "write/unchecked")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// plainInsert is a store with only the OutboxStore methods: Outbox.Write then uses Insert,
// without the lane-count check.
type plainInsert struct{ s *Store[pgx.Tx] }

func (p plainInsert) LaneCount(ctx context.Context) (int, error) { return p.s.LaneCount(ctx) }
func (p plainInsert) Insert(ctx context.Context, tx pgx.Tx, recs []driver.Record) error {
	return p.s.Insert(ctx, tx, recs)
}
