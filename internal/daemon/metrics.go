package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
)

// metrics are the daemon's OpenTelemetry instruments, served at /metrics in Prometheus format.
// Their attributes are bounded: the database system, the outbox table and the relay mode —
// never an event id or a partition key.
type metrics struct {
	handler  http.Handler
	provider *sdkmetric.MeterProvider
	reg      metric.Registration
	backlog  *backlog
}

// backlog is the outbox's Admin.Stats, queried at most once per interval: a collection (a
// Prometheus scrape, an OTLP push) within interval of the last query reuses its answer, and
// concurrent collections share one query. Stats counts the pending rows, which is a scan of
// them in some adapters: this bounds its cost to one query per interval whatever the number of
// scrapers. A failed query is also kept for interval, so that a struggling database is not
// queried at every scrape.
type backlog struct {
	stats    func(ctx context.Context) (driver.Stats, error)
	interval time.Duration
	now      func() time.Time // time.Now; tests replace it

	mu      sync.Mutex
	at      time.Time // of the last query; zero before the first
	st      driver.Stats
	err     error
	queries int // Stats calls made (tests)
}

// get returns the last answer when it is younger than interval, else queries Stats.
func (b *backlog) get(ctx context.Context) (driver.Stats, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && b.now().Sub(b.at) < b.interval {
		return b.st, b.err
	}
	b.queries++
	b.st, b.err = b.stats(ctx)
	b.at = b.now()
	return b.st, b.err
}

func newMetrics(d *Daemon) (*metrics, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, err
	}
	// The resource names the service "outboxkit-relay" unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES say otherwise (Prometheus: the target_info metric).
	res, err := resource.New(context.Background(), resource.WithAttributes(attribute.String("service.name", "outboxkit-relay")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("otel resource: %w", err)
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp), sdkmetric.WithResource(res)}
	if d.cfg.OTLP.Endpoint != "" {
		push, err := otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(d.cfg.OTLP.Endpoint))
		if err != nil {
			return nil, fmt.Errorf("otlp.endpoint: %w", err)
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(push, sdkmetric.WithInterval(d.cfg.OTLP.Interval.D()))))
	}
	mp := sdkmetric.NewMeterProvider(opts...)
	meter := mp.Meter("github.com/outboxkit/outbox/internal/daemon")
	m := &metrics{handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), provider: mp,
		backlog: &backlog{stats: d.db.Store.Stats, interval: d.cfg.Metrics.StatsInterval.D(), now: time.Now}}

	table := d.cfg.Database.Table
	if table == "" {
		table = "outbox"
	}
	attrs := metric.WithAttributes(
		attribute.String("db.system.name", d.cfg.Database.DriverName()),
		attribute.String("db.collection.name", table),
		attribute.String("outboxkit.mode", d.cfg.Mode),
	)
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, e := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err == nil {
			err = e
		}
		return g
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, e := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		if err == nil {
			err = e
		}
		return c
	}
	pending := gauge("outboxkit.outbox.pending", "{event}", "Unpublished events that are not parked (the backlog).")
	parked := gauge("outboxkit.outbox.parked", "{event}", "Parked events: retries exhausted or a permanent error; they hold back their key.")
	oldest, e := meter.Float64ObservableGauge("outboxkit.outbox.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest pending event (0 when none)."))
	if err == nil {
		err = e
	}
	published := counter("outboxkit.relay.published", "{event}", "Events marked published after the sink acknowledged them.")
	sends := counter("outboxkit.relay.sends", "{batch}", "Sink.Send calls.")
	failures := counter("outboxkit.relay.failures", "{event}", "Failed delivery attempts recorded (each is retried later or parked).")
	parkedTotal := counter("outboxkit.relay.parked", "{event}", "Events parked by this process.")
	claimLost := counter("outboxkit.relay.claim_lost", "{settle}", "Settles refused because a lane lease was lost (the new owner resends).")
	lanes := gauge("outboxkit.relay.lanes", "{lane}", "Lanes held by this process's relays.")
	ready := gauge("outboxkit.relay.ready", "", "1 when every relay of the process is healthy (publishing, breaker closed, generation current).")
	generation := gauge("outboxkit.relay.generation", "", "Publisher generation the relays run under.")
	retained := gauge("outboxkit.cdc.retained_bytes", "By", "Change log the database retains for the CDC relay.")
	cdcLag, e := meter.Float64ObservableGauge("outboxkit.cdc.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the last record the CDC relay saw acknowledged when it was acknowledged (CDCStats.Lag)."))
	if err == nil {
		err = e
	}
	cpAge, e := meter.Float64ObservableGauge("outboxkit.cdc.checkpoint_age", metric.WithUnit("s"),
		metric.WithDescription("Time since the CDC relay last saved its checkpoint (0 before the first)."))
	if err == nil {
		err = e
	}
	retainedCap := gauge("outboxkit.cdc.retained_bytes_cap", "By", "cdc.max_retained_bytes (0: no cap).")
	headroom := gauge("outboxkit.cdc.headroom_bytes", "By", "MySQL/MariaDB: binary log between the oldest log on the server and the CDC checkpoint; purging more loses the position (Retention.HeadroomBytes). Not exported where the relay's slot pins the log (PostgreSQL).")
	breaker := gauge("outboxkit.relay.breaker_open", "{relay}", "Relays whose breaker pauses fetching after sends in a row failed.")
	if err != nil {
		return nil, err
	}

	m.reg, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if st, err := m.backlog.get(ctx); err == nil {
			o.ObserveInt64(pending, st.Pending, attrs)
			o.ObserveInt64(parked, st.Parked, attrs)
			age := 0.0
			if !st.OldestPendingAt.IsZero() {
				age = max(time.Since(st.OldestPendingAt).Seconds(), 0)
			}
			o.ObserveFloat64(oldest, age, attrs)
		}
		var pub, snd, fail, park, lost, held, gen int64
		for _, r := range d.relays {
			st := r.Stats()
			pub += int64(st.Published)
			snd += int64(st.Sends)
			fail += int64(st.Failures)
			park += int64(st.Parked)
			lost += int64(st.ClaimLost)
			held += int64(st.Lanes)
			gen = max(gen, st.Generation)
		}
		if d.cdc != nil {
			st := d.cdc.Stats()
			pub += int64(st.Published)
			snd += int64(st.Sends)
			fail += int64(st.Failures)
			park += int64(st.Parked)
			gen = max(gen, st.Generation)
			o.ObserveInt64(retained, st.Retention.RetainedBytes, attrs)
			o.ObserveInt64(retainedCap, d.cfg.CDC.MaxRetainedBytes, attrs)
			if st.Retention.HeadroomBytes >= 0 {
				o.ObserveInt64(headroom, st.Retention.HeadroomBytes, attrs)
			}
			held += int64(st.LanesHeld)
			o.ObserveFloat64(cdcLag, st.Lag.Seconds(), attrs)
			age := 0.0
			if !st.CheckpointAt.IsZero() {
				age = time.Since(st.CheckpointAt).Seconds()
			}
			o.ObserveFloat64(cpAge, age, attrs)
		}
		o.ObserveInt64(published, pub, attrs)
		o.ObserveInt64(sends, snd, attrs)
		o.ObserveInt64(failures, fail, attrs)
		o.ObserveInt64(parkedTotal, park, attrs)
		o.ObserveInt64(claimLost, lost, attrs)
		o.ObserveInt64(lanes, held, attrs)
		o.ObserveInt64(generation, gen, attrs)
		ok, open := int64(1), int64(0)
		for _, r := range d.running() {
			if err := r.Health(); err != nil {
				ok = 0
				if errors.Is(err, core.ErrBreakerOpen) {
					open++
				}
			}
		}
		o.ObserveInt64(ready, ok, attrs)
		o.ObserveInt64(breaker, open, attrs)
		return nil
	}, pending, parked, oldest, published, sends, failures, parkedTotal, claimLost, lanes, ready, generation, retained, retainedCap, headroom, cdcLag, cpAge, breaker)
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) shutdown() {
	_ = m.reg.Unregister()
	_ = m.provider.Shutdown(context.Background())
}
