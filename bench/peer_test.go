package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/core"
)

const dsnEnv = "OUTBOXKIT_POSTGRES_DSN"

func events() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOXKIT_BENCH_EVENTS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// jsonPayload is a ~1 KiB JSON document (Watermill's default payload column is JSON).
func jsonPayload() []byte {
	b := make([]byte, 500)
	_, _ = rand.Read(b)
	return []byte(`{"data":"` + hex.EncodeToString(b) + `"}`)
}

// freshSchema creates a schema and a pool whose search_path is that schema.
func freshSchema(b *testing.B, maxConns int32) (string, *pgxpool.Pool) {
	b.Helper()
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			b.Fatalf("%s is not set", dsnEnv)
		}
		b.Skipf("%s is not set: start a server with `source scripts/lib/postgres.sh && pg_start`", dsnEnv)
	}
	ctx := context.Background()
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	schema := "okb_" + hex.EncodeToString(rb[:])
	admin, err := pgx.Connect(ctx, dsn)
	must(b, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, `CREATE SCHEMA "`+schema+`"`)
	must(b, err)
	b.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`)
			_ = c.Close(context.Background())
		}
	})
	cfg, err := pgxpool.ParseConfig(dsn)
	must(b, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = `"` + schema + `"`
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	must(b, err)
	b.Cleanup(pool.Close)
	return schema, pool
}

func must(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}

func settle(b *testing.B, pool *pgxpool.Pool, table string) {
	for _, sql := range []string{"VACUUM ANALYZE " + table, "CHECKPOINT"} {
		_, err := pool.Exec(context.Background(), sql)
		must(b, err)
	}
}

// BenchmarkPeerDrain drains the same number of committed ~1 KiB events, written by each
// library's producer API in transactions of 1,000, to a sink that does nothing: outboxkit's
// relay (one worker, batch 1,000, with the default RelayOptions.InFlight and with InFlight 1)
// and Watermill's SQL Forwarder (batch 100, its default, and 1,000).
func BenchmarkPeerDrain(b *testing.B) {
	n := events()
	payload := jsonPayload()
	for _, v := range []struct {
		name     string
		inFlight int
	}{{"outboxkit/relay/batch=1000", 0}, {"outboxkit/relay/batch=1000/inflight=1", 1}} {
		b.Run(v.name, func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				total += drainOutboxkit(b, n, v.inFlight, payload)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("watermill/forwarder/batch=%d", batch), func(b *testing.B) {
			var total time.Duration
			for range b.N {
				b.StopTimer()
				total += drainWatermill(b, n, batch, payload)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "events/s")
		})
	}
}

func drainOutboxkit(b *testing.B, n, inFlight int, payload []byte) time.Duration {
	ctx := context.Background()
	schema, pool := freshSchema(b, 8)
	store, err := postgres.New(pool, &postgres.Options{Schema: schema})
	must(b, err)
	must(b, store.Migrate(ctx))
	ob, err := core.NewOutbox(ctx, store, nil)
	must(b, err)
	for i := 0; i < n; i += 1000 {
		evs := make([]core.Event, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			evs = append(evs, core.Event{AggregateType: "order", AggregateID: strconv.Itoa(j % 10000),
				Type: "order.created", Payload: payload})
		}
		must(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { _, err := ob.Write(ctx, tx, evs...); return err }))
	}
	settle(b, pool, "outbox")

	var sent atomic.Int64
	sink := core.SinkFunc(func(_ context.Context, msgs []core.Message) []error {
		sent.Add(int64(len(msgs)))
		return make([]error, len(msgs))
	})
	relay, err := core.NewRelay(store, sink, core.StaticRouter{Default: "null"},
		&core.RelayOptions{Owner: "bench", BatchSize: 1000, InFlight: inFlight, PollInterval: 10 * time.Millisecond})
	must(b, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _ = relay.Run(rctx) })
	for relay.Stats().Published < uint64(n) {
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	wg.Wait()
	return elapsed
}

// countingPublisher is Watermill's null sink.
type countingPublisher struct{ n atomic.Int64 }

func (p *countingPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.n.Add(int64(len(msgs)))
	return nil
}
func (p *countingPublisher) Close() error { return nil }

func drainWatermill(b *testing.B, n, batch int, payload []byte) time.Duration {
	ctx := context.Background()
	_, pool := freshSchema(b, 8)
	logger := watermill.NopLogger{}
	schema := wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch}
	// The producer side: the forwarder's publisher over an SQL publisher in the caller's tx.
	var tableMade bool
	for i := 0; i < n; i += 1000 {
		msgs := make([]*message.Message, 0, 1000)
		for j := i; j < min(i+1000, n); j++ {
			msgs = append(msgs, message.NewMessage(watermill.NewUUID(), payload))
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
			if err != nil {
				return err
			}
			return forwarder.NewPublisher(pub, forwarder.PublisherConfig{}).Publish("orders", msgs...)
		})
		if err != nil && !tableMade && strings.Contains(err.Error(), "does not exist") {
			// The first publish needs the topic table: create it outside a transaction.
			pub, err2 := wsql.NewPublisher(wsql.BeginnerFromPgx(pool), wsql.PublisherConfig{SchemaAdapter: schema, AutoInitializeSchema: true}, logger)
			must(b, err2)
			must(b, forwarder.NewPublisher(pub, forwarder.PublisherConfig{}).Publish("orders", msgs...))
			tableMade = true
			continue
		}
		must(b, err)
		tableMade = true
	}
	settle(b, pool, `"watermill_forwarder_topic"`)

	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true, PollInterval: 10 * time.Millisecond,
	}, logger)
	must(b, err)
	out := &countingPublisher{}
	fwd, err := forwarder.NewForwarder(sub, out, logger, forwarder.Config{})
	must(b, err)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.StartTimer()
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { _ = fwd.Run(rctx) })
	for out.n.Load() < int64(n) {
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	_ = fwd.Close()
	wg.Wait()
	return elapsed
}
