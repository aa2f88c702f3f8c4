package binlog_test

import (
	"context"
	"database/sql"
	"os"
	"strconv"
	"testing"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// BenchmarkChangeSourceNext measures raw ChangeStream.Next throughput: a backlog of
// OUTBOXKIT_CDC_BENCH_EVENTS (default 50,000) ~1.1 KiB outbox rows, committed in transactions
// of 500 rows after Start, is read from the binary log by a stream resumed at the start
// position (each iteration reads it again). Seeding is not timed; events/s is the metric.
//
//	go test ./adapters/mysql -run '^$' -bench ChangeSourceNext -benchtime 3x
func BenchmarkChangeSourceNext(b *testing.B) {
	benchConfig(b)
	binlogMu.RLock()
	defer binlogMu.RUnlock()
	n := 50_000
	if v, err := strconv.Atoi(os.Getenv("OUTBOXKIT_CDC_BENCH_EVENTS")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	db, name := newDB(b)
	s := storeOn(b, db, &mysql.Options{Lanes: 16})
	c := testConfig(b).Clone()
	c.DBName = name
	src, err := binlog.NewChangeSource(s, &binlog.Options{DSN: c.FormatDSN(), Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	st, pos0, err := src.Start(ctx)
	if err != nil {
		b.Fatal(err)
	}
	_ = st.Close()

	const perTx = 500
	ob, err := core.NewOutbox(ctx, driver.OutboxStore[*sql.Tx](s), nil)
	if err != nil {
		b.Fatal(err)
	}
	evs := make([]core.Event, perTx)
	for i := range evs {
		evs[i] = core.Event{AggregateType: "order", AggregateID: strconv.Itoa(i), Type: "order.created",
			Payload: benchPayload, Headers: map[string]string{"trace_id": "0af7651916cd43dd8448eb211c80319c"}}
	}
	if err := s.InTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := ob.Write(ctx, tx, evs...)
		return err
	}); err != nil {
		b.Fatal(err)
	}
	for round := 1; round*perTx < n; round++ {
		if _, err := db.ExecContext(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version,
			type, schema_id, partition_key, destination, payload, headers, tenant, causation_id, correlation_id,
			lane, created_at)
			SELECT CONCAT('r', ?, '-', seq), aggregate_type, aggregate_id, aggregate_version, type, schema_id,
			partition_key, destination, payload, headers, tenant, causation_id, correlation_id, lane, UTC_TIMESTAMP(6)
			FROM outbox ORDER BY seq LIMIT ?`, round, perTx); err != nil {
			b.Fatal(err)
		}
	}
	total := (n + perTx - 1) / perTx * perTx

	b.ResetTimer()
	for range b.N {
		st, err := src.Resume(ctx, pos0)
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for got < total {
			tx, err := st.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got += len(tx.Records)
		}
		_ = st.Close()
	}
	b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
