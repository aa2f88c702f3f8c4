package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/outboxkit/outbox/sinks/rabbitmq"
)

// RabbitMQ configures the RabbitMQ sink (sink: rabbitmq): publisher confirms on a connection
// to one broker; routes name "exchange/routing-key" or a queue (see package sinks/rabbitmq).
type RabbitMQ struct {
	URL             string      `yaml:"url" help:"amqp://user:password@host:5672/vhost or amqps://... (required with sink rabbitmq; pass it as $OUTBOXKIT_SINKS_RABBITMQ_URL to keep the password out of the file)"`
	Concurrency     int         `yaml:"concurrency" help:"channels one send publishes on at once (default 8)"`
	ConfirmTimeout  Duration    `yaml:"confirm_timeout" help:"longest wait for a batch's publisher confirms; then its messages are retried (default 30s)"`
	MaxMessageBytes int         `yaml:"max_message_bytes" help:"largest message published; a larger one is parked (default 134217728, the broker's default max_message_size)"`
	TLS             RabbitMQTLS `yaml:"tls"`
}

// RabbitMQTLS tunes the TLS of an amqps:// URL.
type RabbitMQTLS struct {
	CAFile     string `yaml:"ca_file" help:"PEM file of the CAs that sign the broker's certificate (default the system's; needs an amqps:// url)"`
	CertFile   string `yaml:"cert_file" help:"PEM client certificate (mutual TLS; with key_file)"`
	KeyFile    string `yaml:"key_file" help:"PEM key of cert_file"`
	ServerName string `yaml:"server_name" help:"name to verify in the broker's certificate (default the url's host)"`
}

// validate returns one problem per bad key of r (sink rabbitmq). It never prints the URL,
// which holds the password.
func (r *RabbitMQ) validate() []string {
	var p []string
	add := func(path, format string, args ...any) {
		p = append(p, "sinks.rabbitmq."+path+": "+fmt.Sprintf(format, args...))
	}
	tlsURL := false
	if r.URL == "" {
		add("url", "required with sink rabbitmq (amqp://user:password@host:5672/vhost; the password may come from $OUTBOXKIT_SINKS_RABBITMQ_URL)")
	} else if u, err := amqp.ParseURI(r.URL); err != nil {
		add("url", "not an amqp:// or amqps:// URL (scheme, host, port from 1 to 65535, vhost)")
	} else {
		tlsURL = u.Scheme == "amqps"
	}
	if r.Concurrency < 0 {
		add("concurrency", "must not be negative")
	}
	if r.ConfirmTimeout < 0 {
		add("confirm_timeout", "must not be negative")
	}
	if r.MaxMessageBytes < 0 {
		add("max_message_bytes", "must not be negative")
	}
	t := r.TLS
	if !tlsURL {
		if r.URL != "" {
			for path, v := range map[string]string{"tls.ca_file": t.CAFile, "tls.cert_file": t.CertFile, "tls.key_file": t.KeyFile, "tls.server_name": t.ServerName} {
				if v != "" {
					add(path, "needs an amqps:// url")
				}
			}
		}
	} else if _, problems := r.tlsConfig(); len(problems) > 0 {
		p = append(p, problems...)
	}
	return p
}

// tlsConfig builds the TLS configuration, reading the files; problems name the bad keys.
func (r *RabbitMQ) tlsConfig() (*tls.Config, []string) {
	t := r.TLS
	return tlsFiles("sinks.rabbitmq.tls", t.CAFile, t.CertFile, t.KeyFile, t.ServerName)
}

// options are the sink options of a valid r.
func (r *RabbitMQ) options(log *slog.Logger) (*rabbitmq.Options, error) {
	cfg := &amqp.Config{Properties: amqp.NewConnectionProperties()}
	cfg.Properties.SetClientConnectionName("outboxkit-relay")
	if u, err := amqp.ParseURI(r.URL); err == nil && u.Scheme == "amqps" {
		c, problems := r.tlsConfig()
		if len(problems) > 0 {
			return nil, &ConfigError{Problems: problems}
		}
		cfg.TLSClientConfig = c
	}
	return &rabbitmq.Options{Config: cfg, Concurrency: r.Concurrency, ConfirmTimeout: r.ConfirmTimeout.D(),
		MaxMessageBytes: r.MaxMessageBytes, Logger: log}, nil
}

// newRabbitMQSink builds the sink; close closes its connection after the last send.
func newRabbitMQSink(r RabbitMQ, log *slog.Logger) (*rabbitmq.Sink, func(), error) {
	o, err := r.options(log)
	if err != nil {
		return nil, nil, err
	}
	sink, err := rabbitmq.New(r.URL, o)
	if err != nil {
		return nil, nil, fmt.Errorf("sinks.rabbitmq: %w", err)
	}
	return sink, func() { _ = sink.Close() }, nil
}
