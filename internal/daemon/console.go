package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/outboxkit/outbox/internal/console"
	"github.com/outboxkit/outbox/internal/opendb"
)

// consolePath is where the daemon serves the operator console on http.listen.
const consolePath = "/console"

// Console is the operator console (package internal/console) the daemon serves at /console/
// on http.listen, next to /healthz, /readyz and /metrics, over the daemon's own database
// connection. Users and tokens are console.Auth's, inline (the file of `outboxkit console
// --auth` holds the same two lists); they come from the file only.
type Console struct {
	Enabled       bool            `yaml:"enabled" help:"serve the operator console at /console/ on http.listen; beyond loopback it needs console.users or console.tokens"`
	PrometheusURL string          `yaml:"prometheus_url" help:"a Prometheus server with the daemon's outbox_* metrics, which the console's overview links its charts to (empty: none)"`
	Users         []console.User  `yaml:"users"`
	Tokens        []console.Token `yaml:"tokens"`
}

// auth is the console's console.Auth.
func (c Console) auth() console.Auth { return console.Auth{Users: c.Users, Tokens: c.Tokens} }

// validate returns one "console.key: problem" line per bad key. A disabled console is not
// checked (as the sinks not selected are not): its users and tokens may be unfinished.
func (c Console) validate(listen string) []string {
	if !c.Enabled {
		return nil
	}
	var p []string
	a := c.auth()
	for _, line := range a.Validate() {
		p = append(p, "console."+line)
	}
	if c.PrometheusURL != "" {
		if problem := urlProblem(c.PrometheusURL); problem != "" {
			p = append(p, "console.prometheus_url: "+problem)
		}
	}
	if err := console.CheckListen(listen, a); errors.Is(err, console.ErrOpenListen) {
		p = append(p, fmt.Sprintf("console.enabled: http.listen %q is beyond loopback and the console has no user or token: add console.users or console.tokens, or listen on a loopback address (127.0.0.1:9464)", listen))
	}
	return p
}

// newConsole is the console of cfg over db (nil when console.enabled is off). Its sampler runs
// at metrics.stats_interval (at least 1s), the pace of the daemon's own backlog queries.
func newConsole(ctx context.Context, cfg Config, db *opendb.DB, log *slog.Logger) (*console.Console, error) {
	if !cfg.Console.Enabled {
		return nil, nil
	}
	a := cfg.Console.auth()
	if err := console.CheckListen(cfg.HTTP.Listen, a); err != nil {
		return nil, fmt.Errorf("console.enabled: %w", err)
	}
	c, err := console.New(ctx, db, &console.Options{Auth: a, BasePath: consolePath, PrometheusURL: cfg.Console.PrometheusURL,
		SampleInterval: max(cfg.Metrics.StatsInterval.D(), minConsoleSample), Logger: log.With("component", "console")})
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	return c, nil
}

// minConsoleSample is console.Options.SampleInterval's least value.
const minConsoleSample = time.Second

// mountConsole serves the console under /console/ on mux when console.enabled is on: 503 until
// New has built the daemon (the database is not open before), then the console.
func (d *Daemon) mountConsole(mux *http.ServeMux) {
	if !d.cfg.Console.Enabled {
		return
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.built.Load() || d.console == nil {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		d.console.ServeHTTP(w, r)
	})
	mux.Handle(consolePath+"/", h)
	mux.Handle(consolePath, h)
}
