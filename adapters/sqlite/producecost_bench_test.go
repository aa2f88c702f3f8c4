package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// BenchmarkQueueInsert prices how the pending layout (migration 0007) gets a queue row to each
// written event: producer transactions (BEGIN, one domain row, Outbox.Write of one ~256-byte
// event, COMMIT) on a fresh database opened with OpenDB's settings, three ways:
//
//   - trigger: as shipped, the AFTER INSERT trigger writes the queue row in the INSERT's
//     statement;
//   - explicit: the trigger dropped, the writer runs a second statement in its transaction
//     (INSERT INTO queue SELECT ... WHERE seq = last_insert_rowid(): the cheapest explicit form,
//     good for one row per Write only);
//   - none: the trigger dropped and no queue row at all (the insert without any pending
//     bookkeeping: not a working outbox, the floor).
//
// It runs OUTBOXKIT_BENCH_ROUNDS rounds (default 5) of OUTBOXKIT_BENCH_TX transactions per way
// (default 3,000), the ways' order rotating each round, and reports the median tx/s of each way
// and the medians of the per-round ratios trigger/explicit and trigger/none:
//
//	go test -run '^$' -bench QueueInsert -benchtime 1x ./adapters/sqlite
func BenchmarkQueueInsert(b *testing.B) {
	rounds, txs := benchEnv("OUTBOXKIT_BENCH_ROUNDS", 5), benchEnv("OUTBOXKIT_BENCH_TX", 3000)
	modes := []string{"trigger", "explicit", "none"}
	rates := map[string][]float64{}
	var perTrigExp, perTrigNone []float64
	for range b.N {
		for r := range rounds {
			got := map[string]float64{}
			for i := range modes {
				m := modes[(i+r)%len(modes)]
				got[m] = queueInsertRound(b, m, txs)
				rates[m] = append(rates[m], got[m])
			}
			perTrigExp = append(perTrigExp, got["trigger"]/got["explicit"])
			perTrigNone = append(perTrigNone, got["trigger"]/got["none"])
			b.Logf("round %d: trigger %.0f, explicit %.0f, none %.0f tx/s", r, got["trigger"], got["explicit"], got["none"])
		}
	}
	for _, m := range modes {
		b.ReportMetric(benchMedian(rates[m]), m+"_tx/s")
	}
	b.ReportMetric(benchMedian(perTrigExp), "trigger/explicit")
	b.ReportMetric(benchMedian(perTrigNone), "trigger/none")
	b.ReportMetric(0, "ns/op")
}

func queueInsertRound(b *testing.B, mode string, txs int) float64 {
	ctx := context.Background()
	db, err := OpenDB(ctx, filepath.Join(b.TempDir(), "produce.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, err := New(db, &Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE domain (k INTEGER NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	if mode != "trigger" {
		if _, err := db.ExecContext(ctx, `DROP TRIGGER outbox_queue_insert`); err != nil {
			b.Fatal(err)
		}
	}
	const explicit = `INSERT INTO outbox_queue (seq, lane, partition_key)
		SELECT seq, lane, partition_key FROM outbox WHERE seq = last_insert_rowid()`
	out, err := core.NewOutbox[*sql.Tx](ctx, s, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range txs {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO domain (k) VALUES (?)`, i); err != nil {
			b.Fatal(err)
		}
		if _, err := out.Write(ctx, tx, core.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % 1000),
			Type: "order.created", Payload: benchPayloadInternal}); err != nil {
			b.Fatal(err)
		}
		if mode == "explicit" {
			if _, err := tx.ExecContext(ctx, explicit); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(txs) / time.Since(start).Seconds()
	var queued int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM outbox_queue`).Scan(&queued); err != nil {
		b.Fatal(err)
	}
	if want := map[string]int{"trigger": txs, "explicit": txs}[mode]; queued != want {
		b.Fatalf("%s: %d queue rows, want %d", mode, queued, want)
	}
	return rate
}

func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func benchMedian(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// benchPayloadInternal is bench_test.go's ~256-byte payload (that file is package sqlite_test).
var benchPayloadInternal = []byte(`{"order_id":"00000000-0000-0000-0000-000000000000","customer":"c-000000","lines":[{"sku":"sku-1","qty":1,"price":"10.00"},{"sku":"sku-2","qty":2,"price":"20.00"}],"total":"50.00","currency":"EUR","note":"benchmark payload of about two hundred and fifty-six bytes"}`)
