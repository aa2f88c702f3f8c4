package reliability_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/outboxkit/outbox/adapters/mysql"
	"github.com/outboxkit/outbox/adapters/mysql/binlog"
	"github.com/outboxkit/outbox/adapters/postgres"
	"github.com/outboxkit/outbox/adapters/postgres/logical"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/testkit"
)

// The liveness bounds of the CDC relays' change streams in these tests (production defaults:
// PostgreSQL StandbyTimeout 10 s + StallTimeout 30 s, MariaDB 3 × HeartbeatPeriod = 15 s).
const (
	cdcStandby   = time.Second            // logical.Options.StandbyTimeout
	cdcStall     = 2 * time.Second        // logical.Options.StallTimeout
	cdcHeartbeat = 500 * time.Millisecond // binlog.Options.HeartbeatPeriod (a 1.5 s bound)
	// cdcRecovery bounds the delivery of every event committed before a fault ended, from
	// that end: the liveness bound (3 s), the reconnect backoff (at most 5 s), a resume (at
	// most StallTimeout + SlotBusyTimeout = 4 s) and the wait for a walsender the server
	// still runs for the old connection (terminated after 1 s), with margin for a loaded
	// machine. RELIABILITY.md gives the measured figures.
	cdcRecovery = 30 * time.Second
)

// cdcDB is one database's outbox read by a CDC relay whose SQL connections go through sql and
// whose change-log connection goes through log: two separate proxies, so that a fault can hit
// either or both.
type cdcDB struct {
	name   string
	d      db
	store  driver.CDCStore
	source driver.ChangeSource
	drop   func() // drops what holds the log (a PostgreSQL slot) once the relay stopped
}

// pgCDC opens a PostgreSQL outbox, a relay store whose pool dials sqlAddr and a change source
// whose replication connection dials logAddr.
func pgCDC(t *testing.T, sqlAddr, logAddr func(upstream string) string) cdcDB {
	d := postgresDB(t, 4, postgres.ClaimSkipLocked)
	store := d.relayStore(t, sqlAddr(d.upstream)).(*postgres.Store[pgx.Tx])
	u, err := url.Parse(testkit.Need(t, testkit.PostgresDSN))
	require.NoError(t, err)
	u.Host = logAddr(d.upstream)
	q := u.Query()
	q.Set("connect_timeout", "5")
	u.RawQuery = q.Encode()
	src, err := logical.NewChangeSource(store, &logical.Options{
		ConnString: u.String(), StandbyTimeout: cdcStandby, StallTimeout: cdcStall, Logger: quiet,
	})
	require.NoError(t, err)
	return cdcDB{name: "postgres", d: d, store: store, source: src, drop: func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := src.DropSlot(ctx); err != nil {
			t.Errorf("drop slot: %v", err)
		}
	}}
}

// mariaCDC opens a MariaDB outbox, a relay store whose handle dials sqlAddr and a change
// source whose binlog connection dials logAddr.
func mariaCDC(t *testing.T, sqlAddr, logAddr func(upstream string) string) cdcDB {
	d := mysqlDB(t, 4, mysql.ClaimSkipLocked)
	store := d.relayStore(t, sqlAddr(d.upstream)).(*mysql.Store)
	base, err := mysqldrv.ParseDSN(testkit.Need(t, testkit.MySQLDSN))
	require.NoError(t, err)
	src, err := binlog.NewChangeSource(store, &binlog.Options{
		DSN: mysqlConfig(base, d.child.Name, logAddr(d.upstream)).FormatDSN(), HeartbeatPeriod: cdcHeartbeat, Logger: quiet,
	})
	require.NoError(t, err)
	return cdcDB{name: "mariadb", d: d, store: store, source: src, drop: func() {}}
}

// runCDC runs one CDC relay on c until the returned stop is called, which shuts it down
// gracefully and returns what went wrong: Run returning by itself (a fault must never end it:
// it is not one of Run's documented ends) or a failed Shutdown.
func runCDC(c cdcDB, sink core.Sink, owner string) (*core.CDCRelay, func() error, error) {
	r, err := core.NewCDCRelay(c.store, c.source, sink, core.StaticRouter{Default: "cdc-faults"}, &core.CDCOptions{
		Owner: owner, BatchSize: 50, CheckpointInterval: time.Second, Logger: quiet,
	})
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	stop := func() error {
		select {
		case err := <-done:
			return fmt.Errorf("Run returned by itself: %v", err)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := r.Shutdown(ctx)
		return errors.Join(err, <-done)
	}
	return r, stop, nil
}

// TestCDCBlackHole silences a CDC relay's change-log connection the way a black-holed route
// or a vanished host does: a TCP proxy (testkit.BlackHole) stops moving bytes on the
// connections it has, leaving their sockets open. New connections are silenced too until the
// relay has reported the stall (so that the test sees the report however briefly the
// reconnect takes, and the new connections' timeouts are exercised), then forwarded again.
// The events written after the silence are published within the stream's liveness bound plus
// a reconnect, by the same Run (never restarted by its caller); meanwhile Health wraps
// ErrLogUnavailable and ErrStreamStalled, Stats says PhaseReconnecting with a Lag, and the
// restart is counted. Before the liveness bound the PostgreSQL relay published 0 of 50 such
// events in 90 s while it reported healthy, and the MariaDB relay's Run returned.
func TestCDCBlackHole(t *testing.T) {
	t.Parallel()
	for _, open := range []func(t *testing.T, sqlAddr, logAddr func(string) string) cdcDB{pgCDC, mariaCDC} {
		var hole *testkit.BlackHole
		direct := func(string) string { return "" }
		c := open(t, direct, func(upstream string) string {
			hole = testkit.NewBlackHole(t, upstream)
			return hole.Addr()
		})
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			sink := newRecorder(0)
			r, stop, err := runCDC(c, sink, "blackhole")
			require.NoError(t, err)
			defer c.drop()
			var evs []core.Event
			write := func(n int, key string) {
				for i := range n {
					out, err := c.d.write(t.Context(), []core.Event{{AggregateType: "order", AggregateID: key,
						AggregateVersion: int64(i + 1), Type: "e", PartitionKey: key, Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))}})
					require.NoError(t, err)
					evs = append(evs, out...)
				}
			}
			waitFor := func(what string, bound time.Duration, ok func() bool) time.Duration {
				began := time.Now()
				for !ok() {
					require.Less(t, time.Since(began), bound, "%s within %v", what, bound)
					time.Sleep(10 * time.Millisecond)
				}
				return time.Since(began)
			}
			waitFor("the relay streams", time.Minute, func() bool { return r.Stats().Phase == core.PhaseStreaming })
			write(10, "before")
			waitFor("the first events", time.Minute, func() bool { return sink.has(committedOf(evs)) })
			require.NoError(t, r.Health())

			// Silence the connections; once the relay reports the stall, new connections
			// forward again (the silenced ones stay silent), so that it can reconnect.
			hole.Swallow()
			silenced := time.Now()
			write(50, "after")
			var lag time.Duration
			stalled := waitFor("Health to report the stall", cdcRecovery, func() bool {
				err, st := r.Health(), r.Stats()
				lag = st.Lag
				return errors.Is(err, core.ErrLogUnavailable) && errors.Is(err, core.ErrStreamStalled) &&
					st.Phase == core.PhaseReconnecting && !st.LogDownSince.IsZero()
			})
			hole.Restore()
			waitFor("every event written after the silence", cdcRecovery, func() bool { return sink.has(committedOf(evs)) })
			took := time.Since(silenced)
			st := r.Stats()
			t.Logf("%s: stall reported %v after the silence (liveness bound %v, Lag then %v); the 50 events written after it published %v after it; restarts %d; connections accepted %d",
				c.name, stalled.Round(time.Millisecond), map[string]time.Duration{"postgres": cdcStandby + cdcStall, "mariadb": 3 * cdcHeartbeat}[c.name],
				lag.Round(time.Millisecond), took.Round(time.Millisecond), st.Restarts, hole.Accepted())
			require.GreaterOrEqual(t, st.Restarts, uint64(1), "the stalled stream was replaced")
			require.Greater(t, lag, time.Duration(0), "Lag while reconnecting")
			require.Less(t, took, cdcRecovery)
			waitFor("healthy again", cdcRecovery, func() bool { return r.Health() == nil })
			require.NoError(t, stop())
			rep := sink.check(committedOf(evs))
			require.Zero(t, rep.Lost, "lost")
			require.Zero(t, rep.OrderBreaks, "order")
		})
	}
}

// committedOf is what the recorder checks written events against.
func committedOf(evs []core.Event) []committed {
	out := make([]committed, len(evs))
	for i, ev := range evs {
		out[i] = committed{id: ev.ID, key: ev.PartitionKey, version: ev.AggregateVersion}
	}
	return out
}

// TestCDCFaults injects TestFaults' faults (latency, bandwidth, slow close, reset, black hole,
// outage; OUTBOXKIT_OUTAGE_SECONDS each, default 3 s) into a CDC relay's change-log
// connection, into its SQL connections, and into both at once, on PostgreSQL and MariaDB,
// while a producer commits straight to the database. One Run lasts the whole test: a fault
// that ends it fails the test. After each fault every event committed before it ended is
// delivered within cdcRecovery (measured and logged); in the end nothing is lost and first
// deliveries are in write order per key.
func TestCDCFaults(t *testing.T) {
	t.Parallel()
	hold := envSeconds(t, "OUTBOXKIT_OUTAGE_SECONDS", 3*time.Second)
	type target struct {
		c        cdcDB
		sql, log *toxiproxy.Proxy
	}
	var targets []target
	for _, open := range []func(t *testing.T, sqlAddr, logAddr func(string) string) cdcDB{pgCDC, mariaCDC} {
		var tg target
		tg.c = open(t, func(up string) string {
			tg.sql = newProxy(t, up)
			return tg.sql.Listen
		}, func(up string) string {
			tg.log = newProxy(t, up)
			return tg.log.Listen
		})
		targets = append(targets, tg)
	}
	results := make([]faultResult, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		wg.Go(func() { results[i] = cdcFaults(t.Context(), tg.c, tg.sql, tg.log, hold) })
	}
	wg.Wait()
	for i, tg := range targets {
		t.Run(tg.c.name, func(t *testing.T) { checkFaults(t, results[i], cdcRecovery, 3*len(faults), "stream restarts") })
	}
}

// cdcFaults runs every fault on the log connection, the SQL connections and both, one after
// another, with one CDC relay; like injectFaults it does not touch a *testing.T.
func cdcFaults(ctx context.Context, c cdcDB, sqlProxy, logProxy *toxiproxy.Proxy, hold time.Duration) faultResult {
	var res faultResult
	fail := res.failf()
	defer c.drop()
	sink := newRecorder(5 * time.Millisecond)
	r, stop, err := runCDC(c, sink, "faults")
	if err != nil {
		fail("new relay: %v", err)
		return res
	}
	prod := produce(ctx, c.d, 32, 10*time.Millisecond, fail)
	for len(prod.committed()) < 200 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := waitDelivered(ctx, sink, prod.committed(), time.Minute); !ok {
		fail("the relay did not deliver before the first fault")
	}
	places := []struct {
		name    string
		proxies []*toxiproxy.Proxy
	}{{"log", []*toxiproxy.Proxy{logProxy}}, {"sql", []*toxiproxy.Proxy{sqlProxy}}, {"log+sql", []*toxiproxy.Proxy{logProxy, sqlProxy}}}
phases:
	for _, place := range places {
		for _, f := range faults {
			p := phase{name: place.name + "/" + f.name, progress: f.progress}
			before := r.Stats().Restarts
			// TestFaults' reset and black hole act on what the client sends; a change stream
			// mostly receives, so here they act on what the server sends too ("g").
			toxics := map[string]string{}
			if f.toxic != "" {
				toxics["f"] = f.toxic
				if strings.Contains(f.toxic, `"stream":"upstream"`) {
					toxics["g"] = strings.NewReplacer(`"name":"f"`, `"name":"g"`, `"stream":"upstream"`, `"stream":"downstream"`).Replace(f.toxic)
				}
			}
			for _, px := range place.proxies {
				if f.toxic == "" {
					px.Stop()
				}
				for _, tx := range toxics {
					if _, err := px.Toxics.AddToxicJson(strings.NewReader(tx)); err != nil {
						fail("%s: add toxic: %v", p.name, err)
						break phases
					}
				}
			}
			p.during, p.lasted = holdFault(ctx, hold, cdcRecovery, f.progress, sink.count)
			health := r.Health()
			for _, px := range place.proxies {
				if f.toxic == "" {
					if err := px.Start(); err != nil {
						fail("%s: enable the proxy again: %v", p.name, err)
						break phases
					}
				}
				for name := range toxics {
					if err := px.Toxics.RemoveToxic(context.Background(), name); err != nil {
						fail("%s: remove toxic %s: %v", p.name, name, err)
						break phases
					}
				}
			}
			p.recovery, p.recovered = waitDelivered(ctx, sink, prod.committed(), cdcRecovery)
			p.restarts = int64(r.Stats().Restarts - before)
			if health != nil {
				p.why = "(health at the fault's end: " + digits.ReplaceAllString(health.Error(), "N") + ")"
			}
			res.phases = append(res.phases, p)
			if !p.recovered {
				break phases
			}
		}
	}
	prod.stop()
	evs := prod.committed()
	if _, ok := waitDelivered(ctx, sink, evs, cdcRecovery); !ok {
		fail("not every event was delivered within %v after the last fault", cdcRecovery)
	}
	if err := stop(); err != nil {
		fail("stop: %v", err)
	}
	res.events = evs
	res.report = sink.check(evs)
	res.restarts = int64(r.Stats().Restarts)
	return res
}
