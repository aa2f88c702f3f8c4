package binlog_test

// CDC relay benchmarks against a real server (skipped without OUTBOXKIT_MYSQL_DSN):
//
//	source scripts/lib/mariadb.sh && OUTBOXKIT_MARIADB_DURABLE=1 mariadb_start
//	go test -c -o /tmp/myb/cdc.test ./adapters/mysql/binlog && cd adapters/mysql/binlog
//	/tmp/myb/cdc.test -test.run '^$' -test.bench 'CDCDrain' -test.benchtime 1x -test.v
//	OUTBOXKIT_BENCH_SECONDS=30 /tmp/myb/cdc.test -test.run '^$' -test.bench 'CDCLatency' -test.benchtime 1x -test.v
//
// BenchmarkCDCDrain measures, in OUTBOXKIT_BENCH_ROUNDS (default 3) interleaved rounds, the
// drain of OUTBOXKIT_BENCH_EVENTS (default 200,000) events of ~1.1 KiB over 1,000 keys,
// committed in transactions of 1,000 through core.Outbox: by the polling relay (1 worker, batch
// 1,000) and by the CDC relay reading them from the binary log (batch 1,000), both marking rows
// published (mark) and both deleting them (delete). BenchmarkCDCLatency measures
// commit-to-publish latency at 1,000 events/s from 8 producers.

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

func benchSeconds() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 10 * time.Second
}

// cdcBenchStore returns a migrated store on a fresh database and a change source on it.
func cdcBenchStore(b *testing.B) (*mysql.Store, *binlog.ChangeSource) {
	b.Helper()
	db, name := newDB(b)
	s := storeOn(b, db, nil)
	src, err := binlog.NewChangeSource(s, &binlog.Options{DSN: dsnOf(b, name), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	return s, src
}

// seedTxs writes n events through core.Outbox, 1,000 per transaction.
func seedTxs(b *testing.B, s *mysql.Store, n int) {
	b.Helper()
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	if err != nil {
		b.Fatal(err)
	}
	for start := 0; start < n; start += 1000 {
		evs := make([]core.Event, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			evs = append(evs, core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i % benchKeys), Type: "order.created",
				Payload: benchPayload, Headers: map[string]string{"trace_id": "0af7651916cd43dd8448eb211c80319c"}})
		}
		if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
			_, err := ob.Write(ctx, tx, evs...)
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCDCDrain(b *testing.B) {
	benchConfig(b)
	n := benchEvents()
	testkit.CompareDrains(b, benchRounds(), func(b *testing.B, mode testkit.DrainMode) (float64, float64) {
		s, _ := cdcBenchStore(b)
		seedTxs(b, s, n)
		_, polling := testkit.PollDrain(b, s, n, 1000, mode.Delete)

		s, src := cdcBenchStore(b)
		testkit.CheckpointHead(b, s, src)
		seedTxs(b, s, n)
		_, cdc := testkit.Drain(b, s, src, n, 1000, mode.Delete)
		return polling, cdc
	})
}

func BenchmarkCDCLatency(b *testing.B) {
	benchConfig(b)
	ctx := context.Background()
	for range b.N {
		s, src := cdcBenchStore(b)
		ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
		if err != nil {
			b.Fatal(err)
		}
		fromCommit, fromBegin := testkit.Latency(b, s, src, 1000, benchSeconds(), testkit.Writer(driver.Transactor[*sql.Tx](s), ob, 1, benchPayload))
		testkit.ReportLatency(b, "commit-", fromCommit)
		testkit.ReportLatency(b, "begin-", fromBegin)
	}
	b.ReportMetric(0, "ns/op")
}
