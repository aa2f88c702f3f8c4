package daemon

import (
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	natssink "github.com/outboxkit/outbox/sinks/nats"
)

// NATS configures the NATS JetStream sink (sink: nats): the connection it publishes on.
// Routes name subjects, each covered by a stream.
type NATS struct {
	URL         string   `yaml:"url" help:"server URLs, comma-separated: nats://host:port or tls://host:port (required with sink nats)"`
	Token       string   `yaml:"token" help:"authentication token (prefer $OUTBOXKIT_SINKS_NATS_TOKEN); not with creds_file"`
	CredsFile   string   `yaml:"creds_file" help:"NATS credentials file (user JWT and NKey seed); not with token"`
	Concurrency int      `yaml:"concurrency" help:"publish rounds of one send in flight at once, each at most one message per partition key (default 4)"`
	AckTimeout  Duration `yaml:"ack_timeout" help:"wait for a message's PubAck before its outcome is retryable (default 5s)"`
	AtomicBatch bool     `yaml:"atomic_batch" help:"publish a send's messages of one subject as atomic batches of up to 1000 where the stream allows them (nats-server 2.12+, allow_atomic); elsewhere one message per partition key at a time (default false)"`
	TLS         NATSTLS  `yaml:"tls"`
}

// NATSTLS verifies the servers' certificates.
type NATSTLS struct {
	CAFile string `yaml:"ca_file" help:"PEM file of the CAs that sign the servers' certificates (default the system's); implies TLS"`
}

// validate returns one problem per bad key of n (sink nats).
func (n *NATS) validate() []string {
	var p []string
	add := func(path, format string, args ...any) {
		p = append(p, "sinks.nats."+path+": "+fmt.Sprintf(format, args...))
	}
	if strings.TrimSpace(n.URL) == "" {
		add("url", "required with sink nats (nats://host:port)")
	}
	var bad []string
	for _, s := range strings.Split(n.URL, ",") {
		if s = strings.TrimSpace(s); s != "" && natsURLProblem(s) != "" {
			bad = append(bad, natsURLProblem(s))
		}
	}
	if len(bad) > 0 {
		add("url", "%s", strings.Join(bad, "; "))
	}
	if n.Token != "" && n.CredsFile != "" {
		add("token", "not with sinks.nats.creds_file: choose one way to authenticate")
	}
	if n.CredsFile != "" {
		if _, err := os.Stat(n.CredsFile); err != nil {
			add("creds_file", "%v", err)
		}
	}
	if n.Concurrency < 0 {
		add("concurrency", "must not be negative (0: default 4)")
	}
	if n.AckTimeout < 0 {
		add("ack_timeout", "must not be negative (0: default 5s)")
	}
	if f := n.TLS.CAFile; f != "" {
		if err := nats.RootCAs(f)(&nats.Options{}); err != nil { // reads and parses the file
			add("tls.ca_file", "%v", err)
		}
	}
	return p
}

// natsURLProblem says what is wrong with one server URL ("" when nothing).
func natsURLProblem(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Hostname() == "" || u.Opaque != "" {
		return fmt.Sprintf("want nats://host:port or tls://host:port, got %q", s)
	}
	if problem := hostProblem(u.Hostname()); problem != "" {
		return fmt.Sprintf("bad host %q in %q: %s", u.Hostname(), s, problem)
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("bad port %q in %q: want 1 to 65535", port, s)
		}
	}
	return ""
}

// options are the nats.go connection options of a valid n.
func (n *NATS) options(log *slog.Logger) []nats.Option {
	opts := []nats.Option{
		nats.Name("outboxkit-relay"),
		nats.MaxReconnects(-1), // the relay keeps retrying; sends fail retryably meanwhile
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("nats_disconnected", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("nats_reconnected", "url", nc.ConnectedUrlRedacted()) }),
	}
	if n.Token != "" {
		opts = append(opts, nats.Token(n.Token))
	}
	if n.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(n.CredsFile))
	}
	if n.TLS.CAFile != "" {
		opts = append(opts, nats.RootCAs(n.TLS.CAFile))
	}
	return opts
}

// newNATSSink connects and builds the sink; close drains the connection after the last send.
func newNATSSink(n NATS, log *slog.Logger) (*natssink.Sink, func(), error) {
	nc, err := nats.Connect(n.URL, n.options(log)...)
	if err != nil {
		return nil, nil, fmt.Errorf("sinks.nats: connect: %w", err)
	}
	sink, err := natssink.New(nc, &natssink.Options{Concurrency: n.Concurrency, AckTimeout: n.AckTimeout.D(),
		AtomicBatch: n.AtomicBatch, Logger: log})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return sink, nc.Close, nil
}
