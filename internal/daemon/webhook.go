package daemon

import (
	"fmt"
	"log/slog"

	"github.com/outboxkit/outbox/sinks/webhook"
)

// Webhook configures the webhook sink (sink: webhook): signed HTTP POSTs (Standard Webhooks)
// to the endpoint URLs the routes name.
type Webhook struct {
	Secrets       []string   `yaml:"secrets" help:"signing secrets, whsec_ + base64 of the key, one signature each (required with sink webhook; prefer $OUTBOXKIT_SINKS_WEBHOOK_SECRETS, comma-separated)"`
	Source        string     `yaml:"source" help:"the CloudEvents source (ce-source) of every request (default outboxkit)"`
	ContentType   string     `yaml:"content_type" help:"Content-Type of events without a content-type header (default none)"`
	Timeout       Duration   `yaml:"timeout" help:"bound of each request, until the answer is read (default 10s)"`
	Concurrency   int        `yaml:"concurrency" help:"requests in flight per send, never two of one partition key (default 8)"`
	MaxBodyBytes  int        `yaml:"max_body_bytes" help:"largest payload sent; a larger one is parked (default 1048576)"`
	BatchSize     int        `yaml:"batch_size" help:"2 or more: up to this many events per request, CloudEvents batched content mode; the receiver must accept batches (default 0: one request per event)"`
	BatchMaxBytes int        `yaml:"batch_max_bytes" help:"largest body of a batch request, with batch_size (default 1048576)"`
	TLS           WebhookTLS `yaml:"tls"`
}

// WebhookTLS verifies the endpoints' certificates.
type WebhookTLS struct {
	CAFile string `yaml:"ca_file" help:"PEM file of the CAs that sign the endpoints' certificates (default the system's)"`
}

// validate returns one problem per bad key of w (sink webhook), and of the routes, which must
// name http or https endpoint URLs.
func (w *Webhook) validate(routes Routes) []string {
	var p []string
	add := func(path, format string, args ...any) {
		p = append(p, path+": "+fmt.Sprintf(format, args...))
	}
	if len(w.Secrets) == 0 {
		add("sinks.webhook.secrets", "required with sink webhook (whsec_ followed by the base64 of the key; e.g. $OUTBOXKIT_SINKS_WEBHOOK_SECRETS)")
	}
	for i, s := range w.Secrets {
		if webhook.CheckSecret(s) != nil {
			add(fmt.Sprintf("sinks.webhook.secrets[%d]", i), "want whsec_ followed by the standard base64 of a non-empty key")
		}
	}
	if w.Timeout < 0 {
		add("sinks.webhook.timeout", "must not be negative")
	}
	if w.Concurrency < 0 {
		add("sinks.webhook.concurrency", "must not be negative")
	}
	if w.MaxBodyBytes < 0 {
		add("sinks.webhook.max_body_bytes", "must not be negative")
	}
	if w.BatchSize < 0 {
		add("sinks.webhook.batch_size", "must not be negative (0 or 1: one request per event)")
	}
	if w.BatchMaxBytes < 0 {
		add("sinks.webhook.batch_max_bytes", "must not be negative")
	}
	_, problems := tlsFiles("sinks.webhook.tls", w.TLS.CAFile, "", "", "")
	p = append(p, problems...)
	check := func(path, u string) {
		if u == "" {
			return
		}
		if problem := urlProblem(u); problem != "" {
			add(path, "%s (sink webhook: routes name endpoint URLs)", problem)
		}
	}
	check("routes.default", routes.Default)
	for k, v := range routes.ByType {
		check("routes.by_type."+k, v)
	}
	for k, v := range routes.ByDestination {
		check("routes.by_destination."+k, v)
	}
	return p
}

// options are the sink options of w.
func (w *Webhook) options(log *slog.Logger) webhook.Options {
	return webhook.Options{Secrets: w.Secrets, Source: w.Source, ContentType: w.ContentType, Timeout: w.Timeout.D(),
		Concurrency: w.Concurrency, MaxBodyBytes: w.MaxBodyBytes, BatchSize: w.BatchSize, BatchMaxBytes: w.BatchMaxBytes, CAFile: w.TLS.CAFile, Logger: log}
}

// newWebhookSink builds the sink; close closes its idle connections after the last send.
func newWebhookSink(w Webhook, log *slog.Logger) (*webhook.Sink, func(), error) {
	s, err := webhook.New(w.options(log))
	if err != nil {
		return nil, nil, fmt.Errorf("sinks.webhook: %w", err)
	}
	return s, s.Close, nil
}
