package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awssns "github.com/aws/aws-sdk-go-v2/service/sns"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/core/driver"
	"github.com/outboxkit/outbox/internal/console"
	"github.com/outboxkit/outbox/internal/opendb"
	"github.com/outboxkit/outbox/sinks/awssink"
	"github.com/outboxkit/outbox/sinks/sns"
	"github.com/outboxkit/outbox/sinks/sqs"
	"github.com/outboxkit/outbox/sinks/stdout"
)

// NewLogger returns the daemon's logger: JSON (or text) on w at the configured level.
func NewLogger(cfg Log, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.Level))
	o := &slog.HandlerOptions{Level: lvl}
	if cfg.Format == "text" {
		return slog.New(slog.NewTextHandler(w, o))
	}
	return slog.New(slog.NewJSONHandler(w, o))
}

// open opens the configured database (internal/opendb, shared with the operator commands: one
// parser of database addresses, opendb.ParseDSN).
func open(ctx context.Context, cfg Config, log *slog.Logger) (*opendb.DB, error) {
	d := cfg.Database
	driverName, dsn, err := opendb.ParseDSN(d.Driver, d.DSN)
	if err != nil {
		return nil, fmt.Errorf("database.dsn: %w", err)
	}
	return opendb.Open(ctx, opendb.Config{Driver: driverName, DSN: dsn, Schema: d.Schema, Table: d.Table, Lanes: d.Lanes,
		Slot: cfg.CDC.Slot, ServerID: cfg.CDC.ServerID, Logger: log})
}

// newSink builds the configured sink; closeSink (never nil) is called after its last send. out
// is where sink stdout writes.
func newSink(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer) (_ core.Sink, closeSink func(), _ error) {
	noop := func() {}
	switch cfg.Sink {
	case "kafka":
		return newKafkaSink(cfg.Sinks.Kafka, log)
	case "webhook":
		return newWebhookSink(cfg.Sinks.Webhook, log)
	case "nats":
		return newNATSSink(cfg.Sinks.NATS, log)
	case "redis":
		return newRedisSink(cfg.Sinks.Redis, log)
	case "rabbitmq":
		return newRabbitMQSink(cfg.Sinks.RabbitMQ, log)
	case "stdout":
		return stdout.New(out, &stdout.Options{Source: cfg.Sinks.Stdout.Source}), noop, nil
	}
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.AWS.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.AWS.Region))
	}
	idle := idleConnsPerHost(cfg)
	opts = append(opts, awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = max(t.MaxIdleConns, idle), idle
	})))
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("aws: %w", err)
	}
	var endpoint *string
	if cfg.AWS.Endpoint != "" {
		endpoint = aws.String(cfg.AWS.Endpoint)
	}
	switch cfg.Sink {
	case "sqs":
		client := awssqs.NewFromConfig(awsCfg, func(o *awssqs.Options) { o.BaseEndpoint = endpoint })
		s, err := sqs.New(client, &sqs.Options{Concurrency: cfg.Sinks.SQS.Concurrency, MaxBatchEntries: cfg.Sinks.SQS.MaxBatchEntries,
			UnorderedStandard: cfg.Sinks.SQS.UnorderedStandard, Logger: log})
		return s, noop, err
	case "sns":
		client := awssns.NewFromConfig(awsCfg, func(o *awssns.Options) { o.BaseEndpoint = endpoint })
		s, err := sns.New(client, &sns.Options{Concurrency: cfg.Sinks.SNS.Concurrency, MaxBatchEntries: cfg.Sinks.SNS.MaxBatchEntries,
			UnorderedStandard: cfg.Sinks.SNS.UnorderedStandard, Logger: log})
		return s, noop, err
	}
	return nil, nil, fmt.Errorf("sink: %q unsupported", cfg.Sink)
}

// idleConnsPerHost is how many requests the process's relays have in flight to the AWS
// endpoint at most: relays × batches in flight per relay × requests in flight per send. The
// client keeps that many idle connections per host, so a steady relay reuses its connections
// instead of opening one per request beyond the SDK's default 10.
func idleConnsPerHost(cfg Config) int {
	inFlight, conc := cfg.Relay.InFlight, cfg.Sinks.SQS.Concurrency
	if cfg.Sink == "sns" {
		conc = cfg.Sinks.SNS.Concurrency
	}
	if inFlight == 0 {
		inFlight = core.DefaultInFlight
	}
	if conc == 0 {
		conc = awssink.DefaultConcurrency
	}
	return max(1, cfg.Relay.Workers) * inFlight * conc
}

// relayer is a running relay of either kind.
type relayer interface {
	Run(ctx context.Context) error
	Health() error
}

// Daemon is one relay process.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	db     *opendb.DB
	close  func() // the sink's client
	relays []*core.Relay
	cdc    *core.CDCRelay
	srv    *http.Server
	ln     net.Listener
	m      *metrics
	// console is the operator console at /console/ (console.enabled), built with the rest.
	console *console.Console
	// built is set once New has built everything above: until then the HTTP server answers
	// /healthz, and /readyz and /metrics with 503.
	built atomic.Bool
}

// New listens on http.listen first, so that an address that cannot be bound (a port in use, a
// name that does not resolve) fails before the database is touched, and serves /healthz at
// once (/readyz answers 503 until the relays run, /metrics until they are built). Then it
// opens the database (with cfg.Migrate, migrates the outbox) and the sink and builds the
// relays; it starts no relay: Run does. On an error everything is closed again. out is the
// process's standard output, where sink stdout writes its lines (the logs go to log).
func New(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer) (*Daemon, error) {
	if cfg.Console.Enabled {
		if err := console.CheckListen(cfg.HTTP.Listen, cfg.Console.auth()); err != nil {
			return nil, fmt.Errorf("console.enabled: %w", err)
		}
	}
	ln, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		return nil, fmt.Errorf("http.listen: %w", err)
	}
	d := &Daemon{cfg: cfg, log: log, ln: ln, close: func() {}}
	d.srv = newHTTPServer(d.handler(), httpTimeouts{})
	go func() { _ = d.srv.Serve(ln) }()
	ok := false
	defer func() {
		if !ok {
			d.close()
			if d.console != nil {
				_ = d.console.Close()
			}
			if d.db != nil {
				d.db.Close()
			}
			_ = d.srv.Close()
		}
	}()
	db, err := open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	d.db = db
	if cfg.Migrate {
		if err := db.Store.Migrate(ctx); err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		log.Info("migrated")
	}
	sink, closeSink, err := newSink(ctx, cfg, log, out)
	if err != nil {
		return nil, err
	}
	d.close = closeSink
	if d.console, err = newConsole(ctx, cfg, db, log); err != nil {
		return nil, err
	}
	if d.m, err = newMetrics(d); err != nil {
		return nil, err
	}
	if cfg.Mode == "cdc" {
		if d.cdc, err = newCDCRelay(cfg, db, sink, log, d.m.provider); err != nil {
			return nil, err
		}
	} else {
		for range cfg.Relay.Workers {
			r, err := core.NewRelay(db.Store, sink, router(cfg), relayOptions(cfg, log, d.m.provider))
			if err != nil {
				return nil, err
			}
			d.relays = append(d.relays, r)
		}
	}
	ok = true
	d.built.Store(true)
	return d, nil
}

// The bounds of a connection to the health and metrics server: a client that sends a request
// slowly, stops reading its answer or keeps an idle connection open cannot hold the connection
// (and its goroutine) for longer. /healthz and /readyz answer at once and a scraper gives
// /metrics 10s by default (Prometheus's scrape timeout): the write bound leaves room for a slow
// backlog query and a slow reader.
const (
	httpReadHeaderTimeout = 5 * time.Second  // request line and headers
	httpReadTimeout       = 10 * time.Second // the whole request, body included
	httpWriteTimeout      = 30 * time.Second // from the end of the request's headers to the end of the answer
	httpIdleTimeout       = 60 * time.Second // a keep-alive connection between two requests
)

// httpTimeouts overrides the bounds above in tests; a zero field keeps its default.
type httpTimeouts struct{ readHeader, read, write, idle time.Duration }

// newHTTPServer is the health and metrics server of h.
func newHTTPServer(h http.Handler, t httpTimeouts) *http.Server {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: or(t.readHeader, httpReadHeaderTimeout),
		ReadTimeout: or(t.read, httpReadTimeout), WriteTimeout: or(t.write, httpWriteTimeout),
		IdleTimeout: or(t.idle, httpIdleTimeout)}
}

// router is cfg's routes.
func router(cfg Config) core.StaticRouter {
	return core.StaticRouter{Default: cfg.Routes.Default, ByType: cfg.Routes.ByType, ByDestination: cfg.Routes.ByDestination}
}

// relayOptions are the polling relays' options of cfg.
func relayOptions(cfg Config, log *slog.Logger, mp metric.MeterProvider) *core.RelayOptions {
	return &core.RelayOptions{
		LeaseTTL: cfg.Relay.LeaseTTL.D(), PollInterval: cfg.Relay.PollInterval.D(), BatchSize: cfg.Relay.BatchSize,
		InFlight: cfg.Relay.InFlight, MaxRate: cfg.Relay.MaxRate, FixedRate: cfg.Relay.FixedRate, Retry: retryPolicy(cfg), DeleteOnPublish: cfg.Relay.DeleteOnPublish, Logger: log,
		MeterProvider: mp,
	}
}

// cdcOptions are the CDC relay's options of cfg.
func cdcOptions(cfg Config, log *slog.Logger, mp metric.MeterProvider) *core.CDCOptions {
	return &core.CDCOptions{
		LeaseTTL: cfg.Relay.LeaseTTL.D(), BatchSize: cfg.Relay.BatchSize, Retry: retryPolicy(cfg),
		DeleteOnPublish: cfg.Relay.DeleteOnPublish, MaxRetainedBytes: cfg.CDC.MaxRetainedBytes,
		ReleaseOverCap: cfg.CDC.ReleaseOverCap, Logger: log, MeterProvider: mp,
	}
}

// Stand-ins for checkRelayOptions: core's constructors check that they are not nil and call
// nothing on them.
type (
	checkStore  struct{ driver.CDCStore }
	checkSource struct{ driver.ChangeSource }
)

// optionKeys are the configuration keys of core's relay options.
var optionKeys = map[string]string{"BatchSize": "relay.batch_size", "LeaseTTL": "relay.lease_ttl", "RenewInterval": "relay.lease_ttl",
	"PollInterval": "relay.poll_interval", "InFlight": "relay.in_flight", "MaxRate": "relay.max_rate", "FixedRate": "relay.fixed_rate", "MaxRetainedBytes": "cdc.max_retained_bytes",
	"Retry.Initial": "relay.retry.initial", "Retry.Max": "relay.retry.max", "Retry.Multiplier": "relay.retry.multiplier",
	"Retry.Jitter": "relay.retry.jitter", "Retry.Deadline": "relay.retry.deadline"}

// checkRelayOptions returns what core.NewRelay and core.NewCDCRelay refuse in the relay options
// of c (a batch size above core.MaxBatchSize, a lease_ttl too short for the RenewInterval derived
// from it, ...), one problem per key: the rules stay core's, checked here before anything is
// opened instead of after the migration. Both relays' options are checked whatever the mode, as
// every key is checked whether or not it is used.
func (c *Config) checkRelayOptions() []string {
	var p []string
	cfg := *c
	v := reflect.ValueOf(&cfg).Elem()
	sink := core.SinkFunc(func(context.Context, []core.Message) []error { return nil })
	log, mp := slog.New(slog.DiscardHandler), noop.NewMeterProvider()
	for range len(optionKeys) + 1 {
		_, err := core.NewRelay(checkStore{}, sink, core.StaticRouter{Default: "check"}, relayOptions(cfg, log, mp))
		if err == nil {
			_, err = core.NewCDCRelay(checkStore{}, checkSource{}, sink, core.StaticRouter{Default: "check"}, cdcOptions(cfg, log, mp))
		}
		if err == nil {
			break
		}
		var oe *core.OptionError
		key, ok := "", errors.As(err, &oe)
		if ok {
			key, ok = optionKeys[oe.Field]
		}
		if !ok {
			return append(p, fmt.Sprintf("relay: %v", err))
		}
		reason := strings.ReplaceAll(oe.Reason, "Retry.Max", "relay.retry.max")
		if oe.Field == "RenewInterval" {
			reason = "too short: the relay renews its leases every lease_ttl/3, and RenewInterval " + reason
		}
		p = append(p, key+": "+reason)
		f, _ := field(v, key) // check the other keys with this one at its default
		f.SetZero()
	}
	return p
}

// retryPolicy is cfg's relay.retry.
func retryPolicy(cfg Config) core.RetryPolicy {
	return cfg.Relay.Retry.policy()
}

// newCDCRelay builds the CDC relay of cfg (mode cdc) on db and sink: the one construction of
// `outboxkit relay` (New) and `outboxkit backfill` (OpenCDCRelay). mp receives its metrics (nil:
// none).
func newCDCRelay(cfg Config, db *opendb.DB, sink core.Sink, log *slog.Logger, mp metric.MeterProvider) (*core.CDCRelay, error) {
	src, err := db.ChangeSource()
	if err != nil {
		return nil, err
	}
	return core.NewCDCRelay(db.Store.(driver.CDCStore), src, sink, router(cfg), cdcOptions(cfg, log, mp))
}

// ErrNotCDC is OpenCDCRelay's refusal of a configuration whose mode is not cdc.
var ErrNotCDC = errors.New("the configuration's mode is not cdc (a polling relay keeps no log position: backfill needs mode: cdc)")

// CDCRelay is the CDC relay of a configuration with the store it runs on, built as `outboxkit
// relay` builds it, for `outboxkit backfill`.
type CDCRelay struct {
	Relay *core.CDCRelay
	Store opendb.Store
	close func()
}

// OpenCDCRelay opens cfg's database and sink and builds its CDC relay as New does; it starts
// nothing, migrates nothing (cfg.Migrate is ignored: a backfill recovers an existing outbox)
// and serves no HTTP or metrics. A configuration whose mode is not cdc is refused, with nothing
// opened, by an error wrapping ErrNotCDC. Close it after the relay's last call. out is where
// sink stdout writes.
func OpenCDCRelay(ctx context.Context, cfg Config, log *slog.Logger, out io.Writer) (*CDCRelay, error) {
	if cfg.Mode != "cdc" {
		return nil, fmt.Errorf("%w: mode is %s", ErrNotCDC, cfg.Mode)
	}
	db, err := open(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	sink, closeSink, err := newSink(ctx, cfg, log, out)
	if err != nil {
		db.Close()
		return nil, err
	}
	r, err := newCDCRelay(cfg, db, sink, log, nil)
	if err != nil {
		closeSink()
		db.Close()
		return nil, err
	}
	return &CDCRelay{Relay: r, Store: db.Store, close: func() { closeSink(); db.Close() }}, nil
}

// Close closes the sink's client and the database.
func (c *CDCRelay) Close() { c.close() }

func (d *Daemon) running() []relayer {
	var out []relayer
	for _, r := range d.relays {
		out = append(out, r)
	}
	if d.cdc != nil {
		out = append(out, d.cdc)
	}
	return out
}

// ready reports nil when the database answers and every relay is healthy.
func (d *Daemon) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := d.db.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	for _, r := range d.running() {
		if err := r.Health(); err != nil {
			return err
		}
	}
	return nil
}

func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !d.built.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: starting\n")
			return
		}
		if err := d.ready(r.Context()); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if !d.built.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		d.m.handler.ServeHTTP(w, r)
	})
	d.mountConsole(mux)
	return mux
}

// Run runs the relays (and the cleanup schedule), with the HTTP endpoints New serves, until ctx is
// cancelled, then stops gracefully within cfg.ShutdownTimeout: the relays (polling or CDC)
// finish and settle their sends in flight (a CDC relay checkpoints their position) and release
// their lanes. It returns nil after a graceful stop, else the error of the relay that stopped on
// its own or of the hard stop; it does not log that error (its caller does, once).
func (d *Daemon) Run(ctx context.Context) error {
	defer d.db.Close()
	defer d.close() // after the relays' last send
	defer d.m.shutdown()
	d.log.Info("daemon_started", "http", d.ln.Addr().String(), "mode", d.cfg.Mode, "driver", d.cfg.Database.DriverName(),
		"workers", len(d.running()), "sink", d.cfg.Sink)

	// The relays run on their own context: a graceful stop asks them to drain; hard is the
	// fallback once the shutdown timeout is over.
	hardCtx, hard := context.WithCancel(context.WithoutCancel(ctx))
	defer hard()
	errc := make(chan error, len(d.running()))
	var wg sync.WaitGroup
	for _, r := range d.relays {
		wg.Go(func() { errc <- r.Run(hardCtx) })
	}
	if d.cdc != nil {
		wg.Go(func() { errc <- d.cdc.Run(hardCtx) })
	}
	var cleanupWG sync.WaitGroup
	cleanupCtx, stopCleanup := context.WithCancel(ctx)
	defer stopCleanup()
	if d.cfg.Cleanup.Enabled {
		cleanupWG.Go(func() { d.cleanupLoop(cleanupCtx) })
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc: // a relay stopped on its own (fenced, position lost, not migrated, ...): Run returns its error, which the caller logs once
	}
	stopCleanup()
	d.log.Info("daemon_stopping", "timeout", d.cfg.ShutdownTimeout.D(), "relay_stopped", runErr != nil)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.ShutdownTimeout.D())
	defer cancel()
	var swg sync.WaitGroup
	var graceful = true
	var gmu sync.Mutex
	shutdown := func(stop func(context.Context) error) {
		if err := stop(sctx); err != nil {
			gmu.Lock()
			graceful = false
			gmu.Unlock()
			d.log.Error("relay_shutdown_timeout", "error", err)
		}
	}
	for _, r := range d.relays {
		swg.Go(func() { shutdown(r.Shutdown) })
	}
	if d.cdc != nil {
		swg.Go(func() { shutdown(d.cdc.Shutdown) })
	}
	swg.Wait()
	wg.Wait()
	cleanupWG.Wait()
	hctx, hcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer hcancel()
	_ = d.srv.Shutdown(hctx)
	if d.console != nil {
		_ = d.console.Close()
	}
	d.log.Info("daemon_stopped", "published", d.published(), "graceful", graceful && runErr == nil)
	if runErr != nil {
		return runErr
	}
	if !graceful {
		return errors.New("shutdown: timeout: relays were stopped hard")
	}
	return nil
}

// cleanupLoop runs CleanupOutbox every cleanup.interval while this process holds the cleanup
// lease: a polling relay of this process holds lane 0, or its CDC relay is the running
// publisher (it holds every lane). Lane leases are exclusive across the fleet, so one process
// cleans at a time.
func (d *Daemon) cleanupLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.Cleanup.Interval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !d.holdsCleanupLease() {
			continue
		}
		n, err := core.CleanupOutbox(ctx, d.db.Store, &core.CleanupOptions{Retention: d.cfg.Cleanup.Retention.D(), MeterProvider: d.m.provider})
		if err != nil && ctx.Err() == nil {
			d.log.Warn("cleanup_failed", "error", err)
			continue
		}
		d.log.Info("cleanup_done", "deleted", n)
	}
}

func (d *Daemon) holdsCleanupLease() bool {
	if d.cdc != nil {
		return d.cdc.Health() == nil && d.cdc.Stats().Generation != 0
	}
	for _, r := range d.relays {
		if r.HoldsLane(0) {
			return true
		}
	}
	return false
}

// published is how many events this process's relays marked published.
func (d *Daemon) published() uint64 {
	var n uint64
	for _, r := range d.relays {
		n += r.Stats().Published
	}
	if d.cdc != nil {
		n += d.cdc.Stats().Published
	}
	return n
}
