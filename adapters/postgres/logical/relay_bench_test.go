package logical

// CDC relay benchmarks against a real server (skipped without OUTBOXKIT_POSTGRES_DSN):
//
//	source scripts/lib/postgres.sh && PG_DURABLE=1 pg_start
//	go test -c -o /tmp/pgb/cdc.test ./adapters/postgres/logical && cd adapters/postgres/logical
//	/tmp/pgb/cdc.test -test.run '^$' -test.bench 'CDCDrain' -test.benchtime 1x -test.v
//	OUTBOXKIT_BENCH_SECONDS=30 /tmp/pgb/cdc.test -test.run '^$' -test.bench 'CDCLatency' -test.benchtime 1x -test.v
//
// BenchmarkCDCDrain measures, in OUTBOXKIT_BENCH_ROUNDS (default 3) interleaved rounds, the
// drain of a backlog of OUTBOXKIT_BENCH_EVENTS (default 200,000) events of ~1 KiB over 10,000
// keys, committed in transactions of 1,000: by the polling relay (1 worker, batch 1,000) and
// by the CDC relay reading the same kind of backlog from its slot (batch 1,000), both marking
// rows published (mark) and both deleting them (delete). BenchmarkCDCLatency measures
// commit-to-publish latency of the CDC relay at a steady 1,000 events/s from 8 producers.

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/internal/pgtest"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

const benchKeys = 10000

func benchEvents() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 200000
}

func benchSeconds() time.Duration {
	if n, err := strconv.ParseFloat(os.Getenv("OUTBOXKIT_BENCH_SECONDS"), 64); err == nil && n > 0 {
		return time.Duration(n * float64(time.Second))
	}
	return 30 * time.Second
}

func benchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// seedTxs writes n events of ~1 KiB over benchKeys keys with COPY, 1,000 per transaction.
func seedTxs(b *testing.B, d *testDB, n int) {
	b.Helper()
	ctx := context.Background()
	payload := make([]byte, 1024)
	_, _ = rand.Read(payload)
	for start := 0; start < n; start += 1000 {
		rows := make([][]any, 0, 1000)
		for i := start; i < min(start+1000, n); i++ {
			agg := strconv.Itoa(i % benchKeys)
			key := "order/" + agg
			rows = append(rows, []any{fmt.Sprintf("ev-%d", i), "order", agg, int64(0), "order.created", key,
				payload, "{}", int32(driver.LaneOf(key, core.DefaultLanes))})
		}
		_, err := d.Pool.CopyFrom(ctx, pgx.Identifier{d.Schema, "outbox"},
			[]string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "type", "partition_key", "payload", "headers", "lane"},
			pgx.CopyFromRows(rows))
		require.NoError(b, err)
	}
	for _, sql := range []string{"VACUUM ANALYZE outbox", "CHECKPOINT"} {
		_, err := d.Pool.Exec(ctx, sql)
		require.NoError(b, err)
	}
}

func benchSource(b *testing.B, s *postgres.Store[pgx.Tx]) *ChangeSource {
	b.Helper()
	src, err := NewChangeSource(s, nil)
	require.NoError(b, err)
	b.Cleanup(func() { _ = src.DropSlot(context.Background()) })
	return src
}

func BenchmarkCDCDrain(b *testing.B) {
	pgtest.DSN(b)
	n := benchEvents()
	testkit.CompareDrains(b, benchRounds(), func(b *testing.B, mode testkit.DrainMode) (float64, float64) {
		s, d := migratedStore(b, dbOptions{MaxConns: 8}, &postgres.Options{})
		seedTxs(b, d, n)
		_, polling := testkit.PollDrain(b, s, n, 1000, mode.Delete)

		s, d = migratedStore(b, dbOptions{MaxConns: 8}, &postgres.Options{})
		src := benchSource(b, s)
		testkit.CheckpointHead(b, s, src)
		seedTxs(b, d, n)
		_, cdc := testkit.Drain(b, s, src, n, 1000, mode.Delete)
		return polling, cdc
	})
}

func BenchmarkCDCLatency(b *testing.B) {
	pgtest.DSN(b)
	ctx := context.Background()
	for range b.N {
		s, _ := migratedStore(b, dbOptions{MaxConns: 16}, &postgres.Options{})
		src := benchSource(b, s)
		ob, err := core.NewOutbox(ctx, s, nil)
		require.NoError(b, err)
		payload := make([]byte, 1024)
		fromCommit, fromBegin := testkit.Latency(b, s, src, 1000, benchSeconds(), testkit.Writer(s, ob, 1, payload))
		testkit.ReportLatency(b, "commit-", fromCommit)
		testkit.ReportLatency(b, "begin-", fromBegin)
	}
	b.ReportMetric(0, "ns/op")
}
