package pgtest

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// RelayWays runs the ways of the relay benchmarks (BenchmarkRelayToRabbitMQ, …ToNATS and …ToRedis of the sinks) with n events
// each per iteration: dest gives each run a fresh destination and its check-and-cleanup
// (called after the run, untimed), bare a bare publisher of the broker's client for one
// goroutine.
func RelayWays(b *testing.B, pg Schema, sink core.Sink, dest func() (string, func()), n int,
	bare func() func(dest string, batch []core.Message) error) {
	const keys, loops = 64, core.DefaultInFlight
	batch := core.DefaultBatchSize
	ctx := context.Background()
	ob, err := core.NewOutbox(ctx, pg.Store, nil)
	require.NoError(b, err)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	events := func() []core.Event {
		evs := make([]core.Event, n)
		for i := range evs {
			evs[i] = core.Event{AggregateType: "order", AggregateID: fmt.Sprint(i % keys), Type: "order.changed", Payload: payload}
		}
		return evs
	}
	// parts splits the messages by key mod goroutines, in order.
	parts := func(d string, goroutines int) [][]core.Message {
		evs := events()
		out := make([][]core.Message, goroutines)
		stamp := time.Now().UnixNano()
		for i := range evs {
			evs[i].ID = fmt.Sprintf("%s-%d-%d", d, stamp, i)
			m := core.Message{Record: driver.Record{Event: evs[i], CreatedAt: time.Now()}, Destination: d,
				DedupID: evs[i].ID, GroupID: "order/" + evs[i].AggregateID}
			g := i % keys % goroutines
			out[g] = append(out[g], m)
		}
		return out
	}
	// run calls send on every batch of every part, one goroutine per part.
	run := func(ps [][]core.Message, send func(g int, batch []core.Message) error) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(ps))
		for g, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < len(p) && errs[g] == nil; i += batch {
					errs[g] = send(g, p[i:min(i+batch, len(p))])
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		for _, err := range errs {
			require.NoError(b, err)
		}
		return d
	}
	var sendTime, dbTime time.Duration
	var sends, fetches uint64
	relayPG := func() time.Duration {
		d, done := dest()
		defer done()
		require.NoError(b, pg.Store.InTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			_, err := ob.Write(ctx, tx, events()...)
			return err
		}))
		r, err := core.NewRelay(pg.Store, sink, core.StaticRouter{Default: d}, &core.RelayOptions{Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		t := TimeRun(b, uint64(n), r.Run, func() uint64 { return r.Stats().Published })
		st := r.Stats()
		require.Zero(b, st.Failures+st.Parked, "%+v", st)
		sendTime += st.SendTime
		dbTime += st.FetchTime + st.SettleTime
		sends += st.Sends
		fetches += st.Fetches
		return t
	}
	sinkOnly := func() time.Duration {
		d, done := dest()
		defer done()
		return run(parts(d, loops), func(_ int, ms []core.Message) error {
			for _, err := range sink.Send(ctx, ms) {
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	bareN := func(goroutines int) func() time.Duration {
		return func() time.Duration {
			d, done := dest()
			defer done()
			senders := make([]func(string, []core.Message) error, goroutines)
			for g := range senders {
				senders[g] = bare()
			}
			return run(parts(d, goroutines), func(g int, ms []core.Message) error { return senders[g](d, ms) })
		}
	}
	ways := []struct {
		name string
		run  func() time.Duration
		t    time.Duration
	}{{"relay_pg", relayPG, 0}, {"sink", sinkOnly, 0}, {"bare", bareN(loops), 0}, {"bare_1", bareN(1), 0}}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for k := range ways {
			w := &ways[k]
			if i%2 == 1 {
				w = &ways[len(ways)-1-k]
			}
			w.t += w.run()
		}
	}
	total := float64(n * b.N)
	for _, w := range ways {
		b.ReportMetric(total/w.t.Seconds(), w.name+"_msgs/s")
	}
	b.ReportMetric(ways[2].t.Seconds()/ways[0].t.Seconds(), "relay_pg/bare")
	b.ReportMetric(ways[3].t.Seconds()/ways[0].t.Seconds(), "relay_pg/bare_1")
	b.ReportMetric(ways[2].t.Seconds()/ways[1].t.Seconds(), "sink/bare")
	b.ReportMetric(float64(sendTime.Milliseconds())/float64(max(sends, 1)), "relay_send_ms/batch")
	b.ReportMetric(float64(dbTime.Milliseconds())/float64(max(fetches, 1)), "relay_db_ms/batch")
}

// LatencyProxy starts an in-process toxiproxy in front of upstream (host:port) whose latency
// toxic delays every byte from the server by d (pipelined: a fixed answer delay, not a
// bandwidth limit), stopped when the benchmark ends, and returns its address: the relay
// benchmarks' broker at the capacity model's median answer time.
func LatencyProxy(b testing.TB, name, upstream string, d time.Duration) string {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	require.NoError(b, p.Start())
	b.Cleanup(p.Stop)
	_, err := p.Toxics.AddToxicJson(strings.NewReader(fmt.Sprintf(
		`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, d.Milliseconds())))
	require.NoError(b, err)
	return p.Listen
}
